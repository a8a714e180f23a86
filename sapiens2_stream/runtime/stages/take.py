"""The first stage: the next micro-batch, taken when the models are about to free up, from the frames waiting in
every source's queue (`runtime.flow`: each source's `Waiting` and the run's `Planner`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..flow import BatchRun, Item
from ..options import RuntimeConfig
from .base import Stage, register_stage


@register_stage("take")
class Take(Stage):
    """The frames of each micro-batch, fairly across sources (the planner), until every source has ended. Live
    frames are taken just before the models free up, so they do not age while the previous batch
    runs; under `block` nothing is dropped, so frames age anyway. Its state is the run's micro-batches, which the
    path iterates."""

    section, doc = "runtime", "the frames of the next micro-batch, fairly across sources, just in time for the models"

    Options = RuntimeConfig
    scope = "batch"

    def open(self, options: RuntimeConfig, batch: BatchRun) -> AsyncIterator[list[Item]]:
        """Its state: the run's micro-batches, taken one at a time as the path asks (`Planner.batches`)."""
        return batch.planner.batches(batch, options.max_wait_ms / 1000)
