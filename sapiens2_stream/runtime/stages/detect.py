"""People boxes from the one detector that every source shares."""

from __future__ import annotations

import asyncio

from ...detect.options import DetectorConfig
from ..flow import BatchRun, Item
from .base import Stage, register_stage


@register_stage("detect")
class Detect(Stage):
    """People boxes of the detector frames, on the detector's own thread (one detector shared by every source);
    which frames are detector frames is each source's tracking's say (`detector.every`)."""

    section, doc = "detector", "people boxes, on the detector's own thread (one detector for every source)"

    Options = DetectorConfig
    scope = "batch"

    def open(self, options, batch: BatchRun) -> BatchRun:
        return batch

    async def __call__(self, batch: BatchRun, items: list[Item]) -> list[Item]:
        for item in items:
            item.detect = item.stream.tracking.needs_detection(item.frame, item.behind)
        due = [i for i in items if i.detect]
        if due:
            frames, sources = [i.frame for i in due], [i.stream.uri for i in due]
            loop = asyncio.get_running_loop()
            models = batch.models
            found = await loop.run_in_executor(models.detect_thread, models.detector.detect_frames, frames, sources)
            for item, boxes in zip(due, found, strict=True):
                item.detections = boxes
        return items
