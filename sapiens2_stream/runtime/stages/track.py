"""Who is in a source's frames. `SourceTracking` is one source's: its tracker, which frames the detector runs on
(`detector.every`, or `auto`: every frame while a live source keeps up, every 3rd while it is behind, the tracker
carrying boxes in between), and the recorded people of the frames a resumed run draws again. The detect stage asks
it which frames are detector frames; `TrackStage` gives each frame's people their track ids from it."""

from __future__ import annotations

import numpy as np

from ...detect.options import DetectorConfig
from ...io.records import RecordedFrame
from ...io.sources import Frame
from ...track import Tracker
from ...track.options import TrackerConfig
from ..flow import BatchRun, Item
from ..numbers import SourceNumbers
from ..results import Person
from .base import Stage, register_stage

AUTO_EVERY_BEHIND = 3  # detector.every: auto, while a live source is behind


class SourceTracking:
    def __init__(self, detector: DetectorConfig, tracker: TrackerConfig, numbers: SourceNumbers) -> None:
        """The `detector:` and `tracker:` sections, and the source's counters."""
        self.every, self.numbers = detector.every, numbers
        self.tracker = Tracker(tracker)
        self.countdown = 0  # frames until the detector runs again
        self.replay: dict[int, RecordedFrame] = {}  # frame index -> its record, for frames drawn again

    def resume(self, resumed) -> None:
        """Continue an interrupted run: its tracks, the detector's phase, and the recorded frames some video lacks
        (drawn again from their records, nothing recomputed but the dense layers). The smooth stage restores its
        smoothers from the same records."""
        fixed = 1 if self.every == "auto" else self.every
        resumed.restore_tracker(self.tracker, fixed)
        self.countdown = -resumed.detect_phase % fixed
        self.replay = resumed.replayed()

    def start_ids_at(self, first_track: int) -> None:
        """New tracks get ids from `first_track` on (a camera continued on another fleet worker keeps its ids apart
        from those already written)."""
        self.tracker.next_id = max(self.tracker.next_id, first_track)

    def detector_every(self, behind: bool) -> int:
        if self.every == "auto":
            return AUTO_EVERY_BEHIND if behind else 1
        return self.every

    def needs_detection(self, frame: Frame, behind: bool = False) -> bool:
        """Whether `frame`, the next one taken, is a detector frame (the tracker carries boxes on the others);
        `behind`: its live source was behind when it was taken."""
        if frame.index in self.replay:
            return False
        due = self.countdown <= 0
        self.countdown = self.detector_every(behind) - 1 if due else self.countdown - 1
        return due

    def track(self, frame: Frame, detections: np.ndarray | None) -> tuple[list[Person], list[int]]:
        """The people of a frame (track ids) and the tracks that ended by then."""
        if frame.index in self.replay:
            return recorded_people(self.replay[frame.index]), []
        if detections is not None:
            self.numbers.detected += 1
            tracked = self.tracker.update(detections, frame.pts_s)
        else:
            tracked = self.tracker.carry(frame.pts_s)
        return [Person(tid, box, score) for tid, box, score in tracked], self.tracker.pop_ended()

    def replayed_people(self, index: int) -> list[Person]:
        """The recorded people of a frame drawn again (once)."""
        return recorded_people(self.replay.pop(index))


def recorded_people(record: RecordedFrame) -> list[Person]:
    """The people of a JSONL record, as the run that wrote it had them."""
    return [Person(p.track_id, p.box.astype(np.float32), p.score, p.keypoints, p.keypoint_scores, p.smoothed)
            for p in record.people]  # fmt: skip


@register_stage("track")
class TrackStage(Stage):
    """Each source's tracker (`Stream.tracking`, a `SourceTracking`): track ids for the people of each frame, and
    the tracks that ended."""

    section, doc = "tracker", "each source's tracker: ids across frames, boxes carried between detections"

    Options = TrackerConfig
    scope = "batch"

    async def __call__(self, _: BatchRun, items: list[Item]) -> list[Item]:
        for item in items:
            item.people, item.ended = item.stream.tracking.track(item.frame, item.detections if item.detect else None)
        return items
