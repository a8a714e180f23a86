"""The camera group's moments written: OUTPUT/3d/keypoints_3d.jsonl, MQTT TOPIC/3d, VMC and OSC, and at the end
TRC / C3D / BVH per person in OUTPUT/3d/tracks_3d/ (handed to the group's files, `GroupContext.files`)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from ...export.motion3d import write_track
from ...export.vmc import OscSender
from ...io.jsonl import write_line
from ...io.records import RecordedMoment
from ...threed.options import ThreeDConfig
from ..live_mocap import MOMENTS, Moment, checked_group
from .base import GroupStage, register_stage
from .context import GroupContext


class MomentOutputs:
    """Where one group's moments go: the JSONL as they come (opened at the first; continued after `--resume`), the
    OSC senders and MQTT, and each person's rows as recorded (the interrupted run's too) for the per-person files
    written at the end."""

    def __init__(self, t: ThreeDConfig, ctx: GroupContext) -> None:
        self.path = ctx.out_dir / MOMENTS
        self.jsonl = t.files
        self.formats = list(t.formats) if t.files else []
        self.senders = [OscSender(t.vmc, "vmc")] if t.vmc else []
        self.senders += [OscSender(t.osc, "osc")] if t.osc else []
        self.mqtt, self.topic = ctx.mqtt, ctx.topic.replace("{source}", "3d")
        self.rows: dict[int, list] = defaultdict(list)  # each person's (time, keypoints, confidence) as recorded
        self.fd: int | None = None
        self.append = False  # --resume: the JSONL goes on after the interrupted run's moments
        self.files = ctx.files  # the per-person files go there at the end

    def resume(self, moments: list[RecordedMoment]) -> None:
        self.append = True
        for recorded in moments:
            self.keep(recorded)

    def keep(self, recorded: RecordedMoment) -> None:
        """The moment's people as its record has them, for the per-person files at the end (none asked, or the
        files off: nothing is kept, so a long run without them holds no rows)."""
        if not self.formats:
            return
        for person in recorded.people:
            self.rows[person.id].append((recorded.time, person.keypoints_3d, person.confidence))

    def write(self, moment: Moment) -> None:
        self.keep(moment.recorded)
        for sender in self.senders:
            sender.send(moment.people, moment.time_s)
        if self.fd is None and self.jsonl:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if self.append else os.O_TRUNC)
            self.fd = os.open(self.path, flags, 0o644)
        if self.fd is not None:
            write_line(self.fd, moment.record)
        if self.mqtt is not None:
            self.mqtt.publish(self.topic, moment.record)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write_tracks(self, folder: Path) -> None:
        """Each person's TRC / C3D / BVH in `folder` (3d/tracks_3d)."""
        for person_id, rows in sorted(self.rows.items()):
            if len(rows) < 2:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            times = np.array([r[0] for r in rows])
            xyz = np.array([r[1] for r in rows], np.float64)
            xyz[np.array([r[2] for r in rows]) <= 0] = np.nan
            write_track(folder / f"person_{person_id:04d}", times, xyz, self.formats)


@register_stage("write_3d")
class Write3D(GroupStage):
    """The moments triangulate made, after any group stage placed between (its additions are in the records)."""

    section, doc = "threed", "the group's moments to OUTPUT/3d/ (JSONL, TRC/C3D/BVH per person), MQTT, VMC, OSC"
    Options = ThreeDConfig
    files_off = {"files": False}

    def enabled(self, options: ThreeDConfig, ctx: GroupContext) -> bool:
        return bool(checked_group(options, ctx.sources))

    def open(self, options: ThreeDConfig, ctx: GroupContext, emit) -> MomentOutputs:
        return MomentOutputs(options, ctx)

    def resume(self, state: MomentOutputs, moments: list[RecordedMoment]) -> None:
        state.resume(moments)

    def __call__(self, state: MomentOutputs, moment: Moment) -> None:
        state.write(moment)

    def close(self, state: MomentOutputs) -> None:
        state.close()
        if state.formats:
            state.files.put("3d/tracks_3d", state.write_tracks)
