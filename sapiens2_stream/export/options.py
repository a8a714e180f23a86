"""The `outputs.pose2sim` section: the take's cameras written as one Pose2Sim project when the run ends."""

from __future__ import annotations

from typing import Literal

from ..config import Above0, Switch, section


@section(key="outputs.pose2sim")
class Pose2SimOutput:
    """With several file sources: write a Pose2Sim project of the take to OUTPUT/pose2sim/ when the run ends."""

    enabled: Switch = False  # write the project when the run ends
    skeleton: Literal["HALPE_26", "COCO_133_WRIST", "COCO_133"] = "HALPE_26"  # Pose2Sim's 2-D skeleton
    calibration: str | None = None  # Calib.toml, cameras named like the sources
    sync: Literal["auto", "motion", "audio", "none"] = "auto"  # auto: the soundtracks when every camera has a clear
    # one, otherwise the people's motion; none: the recordings start together
    fps: Above0 | None = None  # the project's frame rate (default: the first source's)
