"""People boxes from the one detector that every source shares."""

from __future__ import annotations

import asyncio
import time

from ...detect.options import DetectorConfig
from .base import Stage, register_stage
from .handoff import Item


@register_stage("detect")
class Detect(Stage):
    """People boxes of the detector frames, on the detector's own thread (one detector shared by every source);
    which frames are detector frames is each source's tracking's say (`detector.every`)."""

    section, doc = "detector", "people boxes, on the detector's own thread (one detector for every source)"

    Options = DetectorConfig
    scope = "batch"

    def open(self, options, run):
        return run.planner

    async def __call__(self, planner, items: list[Item]) -> list[Item]:
        start = time.perf_counter()
        for item in items:
            item.detect = item.stream.tracking.needs_detection(item.frame)
        frames = [i.frame for i in items if i.detect]
        if frames:
            run = self.run
            loop = asyncio.get_running_loop()
            sources = [i.stream.cfg.source.uri for i in items if i.detect]
            found = await loop.run_in_executor(run.loaded.detect_thread, run.detector.detect_frames, frames, sources)
            for item, boxes in zip((i for i in items if i.detect), found, strict=True):
                item.detections = boxes
        planner.observe_detection(time.perf_counter() - start)
        return items
