"""The `kinematics:` section: OpenSim scaling and IK of a camera group's people as the run goes (the
group_kinematics stage), the same as `sapiens2-stream kinematics` gives from the run's files."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..config import Above0, Switch, section


@section(key="kinematics")
class KinematicsConfig:
    """Each person in metres (a calibrated camera group's, or one camera's 3-D stage's) scaled to an OpenSim model
    once seen standing for `scale_frames` frames, then solved frame by frame: `kinematics` ({coordinate: degrees})
    with each person of OUTPUT/3d/keypoints_3d.jsonl and MQTT TOPIC/3d (a group) or of results.jsonl (a camera);
    each person's files in OUTPUT/kinematics/ (a camera's when the track ends, a group's at the end)."""

    enabled: Switch = False  # off unless asked (needs the opensim extra)
    model: Literal["simple", "full"] = "simple"  # Pose2Sim's OpenSim model: without muscles, or with them
    mass_kg: Above0 = 70.0  # the people's mass, spread over the scaled model as over the generic one
    scale_frames: Annotated[int, Field(ge=5, le=10000)] = 30  # frames a person stands straight enough in before
    # the model is scaled (and kept); till then their kinematics is null, with the reason
    files: bool = True  # each person's files in OUTPUT/kinematics/ at the end of the run (the Python API's
    # output=None turns them off)

    def __bool__(self) -> bool:
        return bool(self.enabled)
