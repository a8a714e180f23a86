"""OpenSim kinematics of one camera's people in metres (`kinematics:` with the single-camera 3-D stage): after
angles, before events, on the source's writer thread.

Each person of the 3-D stage is put in the world its floor (or calibration) gives at that frame, scaled once their
first `scale_frames` standing frames are seen, then solved frame by frame (`kinematics.live`, the command's code).
The floor is found again as the run goes, so each person's record keeps the world the values stood on
(`kinematics_world`: the 3x4 world-from-camera transform, as `angles` keeps its `up`) and `sapiens2-stream
kinematics` on the run's files uses it: the same values. A person gets `kinematics` ({coordinate: degrees, pelvis
translations in metres}) or `kinematics_why`, and `kinematics_doubtful` where the solve from the last pose was
doubted (the start whose solve was kept, as the files' marker errors say); when their track ends, their files go
to OUTPUT/kinematics/ through the outputs (the segment being written, behind a fleet worker's fence, off without
files).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...io.records import METRE_DIGITS, PTS_DIGITS, SCORE_DIGITS, rounded_points
from ...io.stage_files import FileOutbox
from ...kinematics.live import LiveKinematics
from ...kinematics.opensim_files import need_opensim, setup_dir
from ...kinematics.options import KinematicsConfig
from ...kinematics.run import recorded_in_world
from ...threed.floor import transform
from ..results import FrameResult
from .base import Stage, register_stage
from .context import SourceContext

WORLD_DIGITS = 6


@dataclass
class SourceKinematics:
    live: LiveKinematics
    files: FileOutbox | None  # where each person's files go when their track ends (OUTPUT/kinematics/)
    label: str
    solved: int = 0  # people in the latest frame with their coordinates (the status)
    waiting: int = 0  # and those without


def world_keypoints(keypoints_3d: np.ndarray, confidence: np.ndarray,
                    world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A person's camera-frame keypoints and their sureness as the JSONL records them, moved into `world` (3x4, as
    recorded): what the stage and the command on the run's files both solve."""
    kept = np.array([[np.nan] * 3 if k is None else k for k in rounded_points(keypoints_3d, METRE_DIGITS)])
    return transform(world, kept), np.round(np.asarray(confidence, np.float64), SCORE_DIGITS)


@register_stage("kinematics")
class Kinematics(Stage):
    """One camera's people in metres scaled and solved by OpenSim as its frames come."""

    section, doc = "kinematics", "one camera's people in metres: an OpenSim model scaled to each, IK in each frame"
    Options = KinematicsConfig
    files_off = {"files": False}
    reports = "kinematics"

    def enabled(self, options: KinematicsConfig, ctx: SourceContext) -> bool:
        return bool(options) and ctx.lifted

    def check(self, options: KinematicsConfig, ctx: SourceContext) -> None:
        need_opensim()
        setup_dir()

    def open(self, options: KinematicsConfig, ctx: SourceContext) -> SourceKinematics:
        files = ctx.sinks.files if ctx.sinks is not None and options.files else None
        state = SourceKinematics(LiveKinematics(options), files, ctx.label)
        if ctx.resumed is not None:  # the interrupted run's frames, so the people go on as they were
            for record in ctx.resumed.records:
                for p in record.people:
                    keypoints = recorded_in_world(p)
                    if keypoints is not None:
                        state.live.take(p.track_id, record.pts, keypoints, p.keypoints_3d_confidence)
            state.live.catch_up()
        return state

    def __call__(self, state: SourceKinematics, result: FrameResult) -> None:
        state.solved = state.waiting = 0
        world = None if result.world_from_camera is None else np.round(result.world_from_camera[:3], WORLD_DIGITS)
        time_s = round(result.frame.pts_s, PTS_DIGITS)
        for person in result.people:
            if person.keypoints_3d is None:
                continue
            if world is None:
                person.fields["kinematics_why"] = "no floor yet (the 3-D stage has not found one)"
                state.waiting += 1
                continue
            keypoints, confidence = world_keypoints(person.keypoints_3d, person.keypoints_3d_confidence, world)
            values, why, doubt = state.live(person.track_id, time_s, keypoints, confidence)
            person.fields["kinematics"], person.fields["kinematics_world"] = values, world.tolist()
            if values is None:
                person.fields["kinematics_why"] = why
            if doubt is not None:
                person.fields["kinematics_doubtful"] = doubt
            state.solved += values is not None
            state.waiting += values is None
        for track_id in result.ended_tracks:
            self.end(state, track_id)

    def end(self, state: SourceKinematics, track_id: int) -> None:
        """A track that ended: its files written through the outputs, or let go."""
        if track_id not in state.live.people:
            return
        if state.files is None:
            state.live.people.pop(track_id)
            return
        live, label = state.live, state.label
        state.files.put("kinematics", lambda folder: live.files(track_id, folder, label))

    def close(self, state: SourceKinematics) -> None:
        for track_id in list(state.live.people):
            self.end(state, track_id)
        state.live.close()  # the live models (the files' jobs scale their own)

    def report(self, state: SourceKinematics) -> dict:
        """How many people of the latest frame have their coordinates, and how many wait (scaling, no floor)."""
        return {"solved": state.solved, "waiting": state.waiting}

    def summary(self, state: SourceKinematics) -> dict:
        return {"kinematics": {"people": state.live.summary}}
