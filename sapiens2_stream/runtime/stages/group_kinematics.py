"""OpenSim kinematics of a calibrated camera group's people as the run goes (`kinematics:`): after group_angles,
before write_3d, on the group stages' own thread (never a camera's writer).

Each person is scaled once their first `scale_frames` standing frames are seen and from then on solved frame by
frame from the pose of their last (`kinematics.live`, the same code as `sapiens2-stream kinematics`). Each
moment's person gets `kinematics` ({coordinate: degrees, pelvis translations in metres}), or null with
`kinematics_why`, and `kinematics_doubtful` (the start whose solve was kept) where the solve from the last pose was
doubted; the records are what OUTPUT/3d/keypoints_3d.jsonl and MQTT TOPIC/3d carry. At the end of the run
each person's files go to OUTPUT/kinematics/ (handed to the group's files) as the command writes them from the
run's files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...io.records import RecordedMoment
from ...io.stage_files import FileOutbox
from ...kinematics.live import LiveKinematics
from ...kinematics.opensim_files import need_opensim, setup_dir
from ...kinematics.options import KinematicsConfig
from ..live_mocap import Moment
from .base import GroupStage, register_stage
from .context import GroupContext


@dataclass
class GroupKinematicsState:
    live: LiveKinematics
    out: Path  # OUTPUT/kinematics (for the summary)
    files: FileOutbox  # the group's files: each person's at the end


@register_stage("group_kinematics")
class GroupKinematics(GroupStage):
    """A camera group's people scaled and solved by OpenSim as their moments come."""

    section, doc = "kinematics", "a camera group's people: an OpenSim model scaled to each, IK in each moment"
    Options = KinematicsConfig
    files_off = {"files": False}

    def enabled(self, options: KinematicsConfig, ctx: GroupContext) -> bool:
        return bool(options) and len(ctx.group) >= 2

    def check(self, options: KinematicsConfig, ctx: GroupContext) -> None:
        if options:
            need_opensim()
            setup_dir()

    def open(self, options: KinematicsConfig, ctx: GroupContext, emit) -> GroupKinematicsState:
        return GroupKinematicsState(LiveKinematics(options), ctx.out_dir / "kinematics", ctx.files)

    def resume(self, state: GroupKinematicsState, moments: list[RecordedMoment]) -> None:
        for recorded in moments:
            for person in recorded.people:
                state.live.take(person.id, recorded.time, person.keypoints_3d, person.confidence)
        state.live.catch_up()

    def __call__(self, state: GroupKinematicsState, moment: Moment) -> None:
        recorded = moment.recorded
        for seen, person in zip(recorded.people, moment.record["people"], strict=True):
            values, why, doubt = state.live(seen.id, recorded.time, seen.keypoints_3d, seen.confidence)
            person["kinematics"] = values
            if values is None:
                person["kinematics_why"] = why
            if doubt is not None:
                person["kinematics_doubtful"] = doubt

    def close(self, state: GroupKinematicsState) -> None:
        """Each person's files, as `sapiens2-stream kinematics` writes them from the run's files, handed over."""
        state.live.close()  # the live models (the files' jobs scale their own)
        for person_id in sorted(state.live.people if state.live.cfg.files else ()):
            state.files.put("kinematics", lambda folder, person_id=person_id: state.live.files(person_id, folder))

    def summary(self, state: GroupKinematicsState) -> dict:
        return {"kinematics": {"folder": str(state.out), "people": state.live.summary}}
