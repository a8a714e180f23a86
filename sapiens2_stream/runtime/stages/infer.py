"""The models: every task of the table on a micro-batch, on the one device thread."""

from __future__ import annotations

import asyncio
import time

from ..options import ModelsConfig
from .base import Stage, register_stage
from .handoff import Item


@register_stage("infer")
class Infer(Stage):
    """Every task of the table on the batch, on the one device thread; each result goes to its source's writer.
    A stop that came before the frames reached the models releases them; a second Ctrl-C abandons the batch on
    the models (the device thread finishes it unheard). Its state is the run's planner, which it tells how long
    the models are busy (the take stage times live frames by it)."""

    section, doc = "models", "every task's batched forward with flip TTA on the one device thread, decoded"
    Options = ModelsConfig

    scope, apart = "batch", True

    def open(self, options, run):
        return run.planner

    async def __call__(self, planner, items: list[Item]) -> list[Item]:
        run = self.run
        if run.stop.is_set():
            return release(items)
        load = any(item.stream.under_load() for item in items)
        n = len(items)
        planner.busy_until = time.monotonic() + (planner.cost_per_frame or 0.0) * n
        planner.models_free.clear()
        start = time.perf_counter()
        engine = run.engine
        running = asyncio.get_running_loop().run_in_executor(
            engine.executor, engine.run, [i.frame for i in items], [i.people for i in items], load
        )
        abandoned = asyncio.ensure_future(run.abandon.wait())
        try:
            await asyncio.wait([running, abandoned], return_when=asyncio.FIRST_COMPLETED)
        finally:
            abandoned.cancel()
            planner.models_free.set()
        if not running.done():
            return release(items)
        planner.observe(time.perf_counter() - start, n)
        people = sum(len(i.people) for i in items)
        if people:
            run.times.batch_size("people", people)
        for item, result in zip(items, running.result(), strict=True):
            result.ended_tracks = item.ended
            item.stream.deliver(result)
        return items


def release(items: list[Item]) -> list[Item]:
    """Frames taken that will not reach the models after all."""
    for item in items:
        item.stream.release(1)
    return []
