"""The models: every task of the table on a micro-batch, on the one device thread."""

from __future__ import annotations

import asyncio

from ..flow import BatchRun, Item
from ..results import FrameResult
from ..task_sections import ModelsConfig
from .base import Stage, register_stage


@register_stage("infer")
class Infer(Stage):
    """Every task of the table on the batch, on the one device thread: each item with its result, for its
    source's writer. A stop that came before the frames reached the models releases them; a second Ctrl-C
    abandons the batch on the models (the device thread finishes it unheard)."""

    section, doc = "models", "every task's batched forward with flip TTA on the one device thread, decoded"
    Options = ModelsConfig

    scope = "batch"

    def open(self, options, batch: BatchRun) -> BatchRun:
        return batch

    async def __call__(self, batch: BatchRun, items: list[Item]) -> list[tuple[Item, FrameResult]]:
        if batch.stop.is_set():
            return release(items)
        engine = batch.models.engine
        behind = any(item.behind for item in items)  # a live source is behind: `flip: auto` leaves the flip out
        running = asyncio.get_running_loop().run_in_executor(
            engine.executor, engine.run, [i.frame for i in items], [i.people for i in items], behind
        )
        abandoned = asyncio.ensure_future(batch.abandon.wait())
        try:
            await asyncio.wait([running, abandoned], return_when=asyncio.FIRST_COMPLETED)
        finally:
            abandoned.cancel()
        if not running.done():
            return release(items)
        if people := sum(len(i.people) for i in items):
            batch.times.batch_size("people", people)
        results = running.result()
        for item, result in zip(items, results, strict=True):
            result.ended_tracks = item.ended
        return list(zip(items, results, strict=True))


def release(items: list[Item]) -> list:
    """Frames taken that will not reach the models after all."""
    for item in items:
        item.stream.release(1)
    return []
