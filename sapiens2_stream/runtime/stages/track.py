"""Track ids for the people of each frame, from each source's own tracker."""

from __future__ import annotations

from ...track.options import TrackerConfig
from ..batch_path import BatchRun, Item
from .base import Stage, register_stage


@register_stage("track")
class TrackStage(Stage):
    """Each source's tracker (`Stream.tracking`: the detector's schedule, the tracker and the records a resumed
    run draws again): track ids for the people of each frame, and the tracks that ended."""

    section, doc = "tracker", "each source's tracker: ids across frames, boxes carried between detections"

    Options = TrackerConfig
    scope = "batch"

    async def __call__(self, _: BatchRun, items: list[Item]) -> list[Item]:
        for item in items:
            item.people, item.ended = item.stream.tracking.track(item.frame, item.detections if item.detect else None)
        return items
