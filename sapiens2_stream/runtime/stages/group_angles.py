"""Joint angles of a calibrated camera group's people (`angles:`): after triangulate, before write_3d, so each
moment's records carry them (OUTPUT/3d/keypoints_3d.jsonl, MQTT TOPIC/3d) and each person's files land in
OUTPUT/3d/angles/ (handed to the group's files at the end)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...angles.files import write_track
from ...angles.options import AnglesConfig
from ...angles.recompute import WORLD_UP, moment_people
from ...angles.tracks import TrackAngles
from ...config import DEFAULT_FPS
from ...io.records import RecordedMoment
from ...io.stage_files import FileOutbox
from ..live_mocap import Moment
from .base import GroupStage, register_stage
from .context import GroupContext


@dataclass
class GroupAnglesState:
    angles: TrackAngles
    folder: Path  # where the files land (for the summary)
    files: FileOutbox  # the group's files: each person's at the end
    moments: int = 0


@register_stage("group_angles")
class GroupAngles(GroupStage):
    """The 3-D angles (OpenSim's coordinates) and gait of each person a camera group triangulates, from the moment's
    records (so `sapiens2-stream angles` on OUTPUT/3d gives the same values)."""

    section, doc = "angles", "a camera group's people: 3-D angles as OpenSim's coordinates, gait, in each moment"
    Options = AnglesConfig
    files_off = {"files": False}

    def enabled(self, options: AnglesConfig, ctx: GroupContext) -> bool:
        return bool(options) and len(ctx.group) >= 2

    def open(self, options: AnglesConfig, ctx: GroupContext, emit) -> GroupAnglesState:
        fps = max((r for r in ctx.rates.values() if r), default=DEFAULT_FPS)
        return GroupAnglesState(TrackAngles(options, fps), ctx.out_dir / "3d" / "angles", ctx.files)

    def resume(self, state: GroupAnglesState, moments: list[RecordedMoment]) -> None:
        for recorded in moments:  # the tracks' rows and gait as they were (their angles are in the records already)
            state.angles.frame(recorded.time, state.moments, moment_people(recorded), WORLD_UP)
            state.moments += 1

    def __call__(self, state: GroupAnglesState, moment: Moment) -> None:
        record = moment.record
        people = moment_people(moment.recorded)
        records, events = state.angles.frame(moment.recorded.time, state.moments, people, WORLD_UP)
        state.moments += 1
        for person, angles in zip(record["people"], records, strict=True):
            if angles is not None:
                person["angles"] = angles
        if events:
            record["events"] = events

    def close(self, state: GroupAnglesState) -> None:
        if state.angles.cfg.files:
            state.files.put("3d/angles", lambda folder: self.write(state, folder))

    def write(self, state: GroupAnglesState, folder: Path) -> None:
        for track_id, track in sorted(state.angles.all_tracks().items()):
            write_track(folder, track_id, track.rows, state.angles.cfg, state.angles.fps)

    def summary(self, state: GroupAnglesState) -> dict:
        return {"group_angles": {"folder": str(state.folder), "tracks": state.angles.summary()}}
