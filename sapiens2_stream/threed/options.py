"""The `threed:` section: people in metres from one camera, and a calibrated camera group triangulated live."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from ..config import Above0, Switch, section


@section(key="threed")
class ThreeDConfig:
    """People in metres from one camera, when pose and pointmap both run: `keypoints_3d` in the JSONL records, the
    floor and world frame in world.json, and per-track motion-capture files in tracks_3d/."""

    enabled: Switch | Literal["auto"] = "auto"  # auto: whenever models.pose and models.pointmap both run
    calibration: str | None = None  # a Pose2Sim Calib.toml with a camera named like the source (its name in
    # sources:, else the pipeline's name): its intrinsics (keypoints undistorted) and its world frame; without one,
    # the intrinsics come from the pointmap and the world frame from the floor under people's feet
    formats: list[Literal["trc", "c3d", "bvh"]] = field(default_factory=lambda: ["trc", "c3d", "bvh"])  # per track
    cameras: list[str] | None = None  # several cameras: the sources triangulated together into OUTPUT/3d/ (default:
    # every source the calibration names; two or more make a live motion-capture group)
    max_skew_s: Above0 | Literal["auto"] = "auto"  # the longest a moment waits for a camera; auto: half a frame
    sync: Literal["auto", "audio", "none"] = "auto"  # a group's file cameras (live ones go by capture time): their
    # time offsets from their soundtracks (a clap); auto: when every one has a clear one, else none (they started
    # together)
    offsets_s: dict[str, float] = field(default_factory=dict)  # offsets by hand, per camera, over `sync`: camera
    # time t is the group's time t + offset (the export pose2sim convention)
    vmc: list[str] = field(default_factory=list)  # host:port of VMC receivers (VSeeFace, Unity EVMC4U, Blender;
    # usually 127.0.0.1:39539): the first person, live (needs the osc extra)
    osc: list[str] = field(default_factory=list)  # host:port of plain OSC receivers (TouchDesigner, Max): everyone
    files: bool = True  # the files: one camera's world.json and tracks_3d/, a group's 3d/keypoints_3d.jsonl and
    # 3d/tracks_3d/ (the Python API's output=None turns them off; the people in metres still reach the results)

    def lifts(self, tasks) -> bool:
        """Whether the single-camera 3-D stage runs with these models (`tasks`: the enabled tasks' names): on
        request, or by default when pose and pointmap both run."""
        both = {"pose", "pointmap"} <= set(tasks)
        return both if self.enabled == "auto" else bool(self.enabled) and both
