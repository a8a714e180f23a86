"""Joint angles per person (`angles:`): after the smoother and the 3-D of one camera, before the events."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...angles.files import write_track
from ...angles.options import AnglesConfig
from ...angles.recompute import camera_up, source_frames
from ...angles.tracks import Seen, TrackAngles
from ...config import DEFAULT_FPS
from ...io.records import METRE_DIGITS, PTS_DIGITS, SCORE_DIGITS, as_recorded
from ...io.sink import best_keypoints
from ...io.stage_files import FileOutbox
from ..results import FrameResult
from .base import Stage, register_stage
from .context import SourceContext

UP_DIGITS = 6


@dataclass
class SourceAngles:
    angles: TrackAngles
    files: FileOutbox | None  # where each track's .mot, CSV and plot go when the track ends (OUTPUT/angles/)
    label: str
    folder: Path  # where they land (a segment's angles/ with outputs.segment_s): for the summary
    latest: dict = field(default_factory=dict)  # track id -> the latest frame's angles of who is in it (console)


def recorded_up(world_from_camera: np.ndarray | None) -> np.ndarray | None:
    """The floor's up in the camera frame, rounded as the records keep it; None before there is a floor."""
    up = camera_up(world_from_camera)
    return None if up is None else np.round(up, UP_DIGITS)


def recorded(p) -> Seen:
    """A person as the JSONL records them (keypoints to 0.01 px, 3-D to 0.1 mm, scores to 1e-4): the angles are
    computed from these, so `sapiens2-stream angles` on the run's files gives the same values."""
    flat, scores = (None, None) if p.keypoints is None else as_recorded(0.0, best_keypoints(p), p.keypoint_scores)[1:]
    if p.keypoints_3d is None:
        return Seen(p.track_id, flat, scores)
    deep = np.round(np.asarray(p.keypoints_3d, np.float64), METRE_DIGITS)
    return Seen(p.track_id, flat, scores, deep, np.round(np.asarray(p.keypoints_3d_confidence, np.float64),
                                                         SCORE_DIGITS))  # fmt: skip


@register_stage("angles")
class Angles(Stage):
    """Each person's angles: 2-D from the smoothed keypoints as Sports2D computes them, 3-D where the 3-D stage put
    them in metres, as OpenSim's coordinates; heel strikes and toe-offs go with the frame's events."""

    section, doc = "angles", "joint angles: 2-D as Sports2D, 3-D as OpenSim's coordinates; gait events"

    Options = AnglesConfig
    files_off = {"files": False}
    reports = "angles"

    def enabled(self, options: AnglesConfig, ctx: SourceContext) -> bool:
        return bool(options)

    def emits(self, options: AnglesConfig) -> bool:
        return bool(options and options.gait)  # heel strikes and toe-offs

    def open(self, options: AnglesConfig, ctx: SourceContext) -> SourceAngles:
        fps = (ctx.reader.fps or ctx.reader.rate or DEFAULT_FPS) if ctx.reader is not None else DEFAULT_FPS
        files = ctx.sinks.files if ctx.sinks is not None else None
        state = SourceAngles(TrackAngles(options, fps), files, ctx.label, ctx.out_dir / "angles")
        if ctx.resumed is not None:  # the interrupted run's frames again, so a track alive at the cut has them all
            for time_s, index, people, up in source_frames(ctx.resumed.records, None):
                state.angles.frame(time_s, index, people, up)
        return state

    def __call__(self, state: SourceAngles, result: FrameResult) -> None:
        up = recorded_up(result.world_from_camera)
        time_s = round(result.frame.pts_s, PTS_DIGITS)
        records, events = state.angles.frame(time_s, result.frame.index, [recorded(p) for p in result.people], up)
        for person, record in zip(result.people, records, strict=True):
            if record is not None:
                person.fields["angles"] = record
        state.latest = {str(p.track_id): {k: r[k] for k in ("2d", "3d", "side")}
                        for p, r in zip(result.people, records, strict=True) if r is not None}  # fmt: skip
        result.events += [{**e, "source": state.label, "frame": result.frame.index} for e in events]
        for track_id in result.ended_tracks:
            self.end(state, track_id)

    def end(self, state: SourceAngles, track_id: int) -> None:
        """A track that ended: its files written, its rows let go (the summary keeps what it needs)."""
        state.angles.end(track_id)
        track = state.angles.ended.get(track_id)
        if track is None:
            return
        if state.angles.cfg.files and state.files is not None:
            rows, cfg, fps = track.rows, state.angles.cfg, state.angles.fps
            state.files.put("angles", lambda folder: write_track(folder, track_id, rows, cfg, fps))
        track.rows = []

    def close(self, state: SourceAngles) -> None:
        for track_id in list(state.angles.tracks):
            self.end(state, track_id)

    def report(self, state: SourceAngles) -> dict:
        """Each person's latest angles, by track id."""
        return state.latest

    def summary(self, state: SourceAngles) -> dict:
        return {"angles": {"folder": str(state.folder), "tracks": state.angles.summary()}}
