"""The first stage: the frames of the next micro-batch, fairly across sources."""

from __future__ import annotations

import asyncio
import contextlib
import time

from ..options import RuntimeConfig
from .base import Stage, register_stage
from .handoff import Item


@register_stage("take")
class Take(Stage):
    """The frames of the next micro-batch, fairly across sources (the planner), or None once every source has
    ended. Live frames are taken just before the models free up, so they do not age while the previous batch
    runs; under `block` nothing is dropped, so frames age anyway. Its state is the run's planner."""

    section, doc = "runtime", "the frames of the next micro-batch, fairly across sources, just in time for the models"

    Options = RuntimeConfig
    scope = "batch"

    def open(self, options: RuntimeConfig, run):
        self.max_wait_s = options.max_wait_ms / 1000
        return run.planner

    async def __call__(self, planner, _=None) -> list[Item] | None:
        run = self.run
        while True:
            planner.work.clear()
            if planner.ready():
                break
            if all(not s.reading and not s.waiting for s in run.streams) and (run.stop.is_set() or not run.serve):
                return None
            await planner.work.wait()
        want = planner.size()
        deadline = time.monotonic() + self.max_wait_s
        while sum(s.admission() for s in planner.ready()) < want and any(s.reading for s in run.streams):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            planner.work.clear()
            try:
                await asyncio.wait_for(planner.work.wait(), remaining)
            except TimeoutError:
                break
        if any(s.drops_allowed for s in run.streams):
            delay = planner.busy_until - time.monotonic() - (planner.detect_s or 0.0)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(planner.models_free.wait(), delay)
        return [Item(stream, frame) for stream, frame in planner.take()]
