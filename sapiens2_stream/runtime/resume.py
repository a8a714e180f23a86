"""`--resume`: continue an interrupted offline run from its last complete frame, with no duplicates.

The JSONL is the record of what was finished: a partial last line (the run was killed mid-write) is cut off and
the models restart at the next frame. The videos keep the frames they still play (a killed run's fragmented MP4
plays up to its last complete fragment); recorded frames missing from a video are drawn again from the recorded
results and the source (dense layers such as seg overlays and mattes are computed again for them), so every
video ends with one frame per input frame. The per-track exports are seeded from the earlier lines. The tracker
and the keypoint smoother are brought back to where they were by replaying the recorded people, so people
visible at the cut keep their track ids and smooth on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Sapiens2StreamError, redact
from ..io.outputs import video_names
from ..io.records import RecordedFrame, read_frames
from ..io.video_writer import playable_frames
from ..track.smoothing import OnlineSmoother
from ..track.tracker import Tracker

if TYPE_CHECKING:  # (the assembled configuration imports every stage, and so this module)
    from ..io.options import SourceConfig
    from .config_shape import OutputsConfig


@dataclass
class ResumeState:
    records: list[RecordedFrame]  # the complete JSONL lines of the interrupted run
    videos: dict[str, int] = field(default_factory=dict)  # frames each existing video still plays
    alive: set[int] = field(default_factory=set)  # tracks alive at the cut (restore_tracker finds them)

    @property
    def redraw_from(self) -> int:
        """The first recorded frame (an index into `records`) that some video lacks: from there the videos are
        drawn again."""
        return min([len(self.records), *self.videos.values()])

    @property
    def start_frame(self) -> int:
        """The first source frame to read: the first one to draw again, or the first one not yet processed."""
        return self.records[self.redraw_from].frame if self.redraw_from < len(self.records) else self.next_frame

    @property
    def next_frame(self) -> int:
        """The first source frame the models have not processed yet."""
        return self.records[-1].frame + 1

    def replayed(self) -> dict[int, RecordedFrame]:
        """The recorded results of the frames drawn again, by frame index."""
        return {rec.frame: rec for rec in self.records[self.redraw_from :]}

    def describe(self) -> str:
        done = f"resuming after frame {self.records[-1].frame} ({len(self.records)} frames recorded)"
        short = {name: n for name, n in self.videos.items() if n < len(self.records)}
        if not short:
            return done
        lacking = ", ".join(f"{name} played {n}" for name, n in short.items())
        return (f"{done}; {lacking}: drawing frames {self.start_frame}-{self.records[-1].frame} again from the "
                "recorded results and the source")  # fmt: skip

    @property
    def max_track_id(self) -> int:
        return max((p.track_id for r in self.records for p in r.people), default=0)

    @property
    def detect_phase(self) -> int:
        """Frames already seen since the run began, so the detector keeps running on the same frames."""
        return self.next_frame - self.records[0].frame

    def restore(self, tracker: Tracker, smoother: OnlineSmoother, every: int) -> None:
        """Replay the recorded people: the tracker's detector-frame observations, then the smoother over every
        track still alive at the cut. Exact up to the JSONL's 0.01 px rounding when `tracker.min_hits` is 1
        (tracks not yet reported leave no record to replay)."""
        self.restore_tracker(tracker, every)
        self.restore_smoother(smoother, {tr.track_id for tr in tracker.tracks})

    def restore_tracker(self, tracker: Tracker, every: int) -> None:
        """The tracker's part of `restore` (the track stage's; the smoother is the smooth stage's)."""
        first = self.records[0].frame
        for rec in self.records:
            if (rec.frame - first) % every == 0:
                tracker.replay_detected([(p.track_id, p.box, p.score) for p in rec.people], rec.pts)
        tracker.next_id = max(tracker.next_id, self.max_track_id + 1)
        tracker.pop_ended()  # those tracks ended before the cut; the smoother never gets their state
        self.alive = {tr.track_id for tr in tracker.tracks}

    def restore_smoother(self, smoother: OnlineSmoother, alive: set[int] | None = None) -> None:
        """The smoother's part of `restore`: every recorded keypoint of the tracks alive at the cut (`alive`, by
        default those `restore_tracker` left)."""
        alive = self.alive if alive is None else alive
        for rec in self.records:
            for p in rec.people:
                if p.track_id in alive and p.keypoints is not None:
                    smoother(p.track_id, rec.pts, p.keypoints, p.keypoint_scores)


def prepare_resume(outputs: OutputsConfig, source: SourceConfig, models: dict, live: bool) -> ResumeState | None:
    """What was done before by the source `source` with these outputs and models (the enabled ones, by task); None
    when there is nothing to resume (then the run starts from the beginning)."""
    if live:
        raise Sapiens2StreamError("--resume is for files and image folders; a live source cannot be rewound")
    if outputs.segment_s is not None:
        raise Sapiens2StreamError("--resume does not continue segmented outputs (outputs.segment_s); start a new run")
    if not outputs.jsonl.enabled:
        raise Sapiens2StreamError("--resume needs outputs.jsonl.enabled: the JSONL records which frames are done")
    path = Path(outputs.dir) / outputs.jsonl.name
    if not path.exists():
        return None
    records = read_frames(path, cut=True)
    if not records:
        return None
    if records[0].source != redact(source.uri):
        raise Sapiens2StreamError(
            f"--resume: {path} was written for {records[0].source!r}, not {redact(source.uri)!r}; use another --output"
        )
    out = Path(outputs.dir)
    names = video_names(outputs, models)
    videos = {name: playable_frames(out / name) for name in names if (out / name).exists()}
    return ResumeState(records, videos)
