"""A micro-batch's path through the models, told in one place.

    (frames wait in each source's queue: `stages.take.Waiting`, its drop policy and back-pressure)
    take     the next micro-batch, fairly across sources, sized and timed for live ones  stages/take.py
    detect   people boxes on the detector's thread, for the frames due a detection        stages/detect.py
    track    each source's tracker: ids, boxes carried between detections                 stages/track.py
    infer    every task's batched forward on the device thread, flip TTA, decoding        stages/infer.py
    deliver  each result to its source's writer, in frame order                           Stream.deliver

Two lanes run it (`run_batches`): the first (take, detect, track) prepares the next batch while the second (infer)
runs this one, and takes the next frames only once the second has taken its batch, so live frames are taken just
before the models free up rather than ageing behind them. What happens to a result after it is delivered is its
source's story (`Stream.write_all`: the source stages, in frame order) and then the group's (`stages.group`).

The lanes time the stages (`StageTimes`) and keep the models' clock (`ModelClock`: what a frame and a detection
cost, when the models will be free), which the take stage reads to size and time live batches. The batch stages
see a `BatchRun` (the run's streams, planner, clock, models and stop signals), never the pipeline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import Sapiens2StreamError
from ..io.sources import Frame
from .numbers import StageTimes
from .results import Person

if TYPE_CHECKING:
    from .observer import Observer
    from .pipeline import LoadedModels
    from .stages.take import Planner

END = object()  # the end of input, on every hand-off
BATCH_STAGES = ("take", "detect", "track", "infer")  # the path below, in `stages.base.ORDER`'s order
EMA = 0.3  # weight of the newest measurement in the cost estimates


def smoothed(previous: float | None, value: float) -> float:
    return value if previous is None else EMA * value + (1 - EMA) * previous


class ModelClock:
    """What the lanes measured of the models, for the take stage: seconds of inference per frame and per detected
    batch (smoothed), and when the models are expected to be free (`busy_until`, monotonic; `models_free` is set
    whenever they are)."""

    def __init__(self, thins: bool = False) -> None:
        """`thins`: the models leave work out under load (a task's `flip: auto`)."""
        self.thins = thins
        self.cost_per_frame: float | None = None
        self.thinned: dict[bool, float | None] = {False: None, True: None}  # cost per frame, all on / thinned out
        self.detect_s: float | None = None
        self.busy_until = 0.0
        self.models_free = asyncio.Event()

    def detected(self, seconds: float) -> None:
        self.detect_s = smoothed(self.detect_s, seconds)

    def computing(self, frames: int) -> None:
        """`frames` go to the models now."""
        self.busy_until = time.monotonic() + (self.cost_per_frame or 0.0) * frames
        self.models_free.clear()

    def computed(self, seconds: float | None, frames: int, thinned: bool = False) -> None:
        """The models are free again; `seconds`: what the frames took (None: the batch was released or abandoned,
        nothing measured); `thinned`: the batch ran as under load (`flip: auto` left flip TTA out)."""
        self.models_free.set()
        if seconds is not None:
            self.cost_per_frame = smoothed(self.cost_per_frame, seconds / frames)
            self.thinned[thinned] = smoothed(self.thinned[thinned], seconds / frames)


@dataclass
class Item:
    """A frame on its way from its stream through the batch stages."""

    stream: object
    frame: Frame
    behind: bool = False  # its live source was behind when it was taken (flip TTA and detection thin out)
    detect: bool = False  # a detector frame (the tracker carries boxes on the others)
    detections: np.ndarray | None = None
    people: list[Person] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)  # tracks that ended by this frame


class Handoff:
    """Items from one lane to the next, or results from the models to a source's writer: in order, then END.
    `drained()` lets a producer wait until everything it handed over was taken (the first lane takes the next
    frames only then, so they do not age while the models are busy)."""

    def __init__(self) -> None:
        self.items: deque = deque()
        self.ready = asyncio.Event()
        self.empty = asyncio.Event()
        self.empty.set()

    def put(self, item) -> None:
        self.items.append(item)
        self.empty.clear()
        self.ready.set()

    def end(self) -> None:
        self.put(END)

    async def get(self):
        while not self.items:
            self.ready.clear()
            await self.ready.wait()
        item = self.items.popleft()
        if not self.items:
            self.empty.set()
        return item

    async def drained(self) -> None:
        await self.empty.wait()

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class BatchRun:
    """What the batch stages work with: the run's streams (the list itself: sources added while running join it),
    the planner, the models' clock, the models with their threads, the run's stop signals and its stage times."""

    streams: list
    planner: Planner
    clock: ModelClock
    models: LoadedModels  # the engine and the detector, each with its thread
    stop: threading.Event  # a stop: frames taken but not yet on the models are released
    abandon: asyncio.Event  # a second Ctrl-C: stop waiting for the batch on the models
    serve: bool  # keep taking after every source ended (sources are added while running)
    times: StageTimes


async def run_batches(stages: Sequence, states: dict, batch: BatchRun, observers: list[Observer]) -> None:
    """Batch after batch until every source has ended (or a stop): the path in the module docstring. `stages`: the
    batch stages, in `BATCH_STAGES`' order; `states`: what each opened (by name); `batch`: the run's (its times
    and clock are kept here); the observers are told `ending` once the last batch is delivered."""
    if tuple(s.name for s in stages) != BATCH_STAGES:
        raise Sapiens2StreamError(f"the batch stages are {', '.join(BATCH_STAGES)}, in that order; a new one "
                                  "needs its place in runtime.batch_path")  # fmt: skip
    take, detect, track, infer = stages
    prepared, clock = Handoff(), batch.clock

    async def timed(stage, items: list) -> tuple[list, float]:
        """The stage's work on `items`, and its seconds (its time per frame goes to the run's stage times)."""
        start = time.perf_counter()
        done = await stage(states[stage.name], items)
        seconds = time.perf_counter() - start
        batch.times.stage(stage.name, seconds * 1e3 / len(items), len(items))
        return done, seconds

    async def prepare() -> None:
        """Lane one: take, detect, track; the next batch is taken once the models took the last one."""
        while True:
            await prepared.drained()
            items = await take(states["take"])
            if items is None:
                break
            if items:
                items, seconds = await timed(detect, items)
                clock.detected(seconds)
                items, _ = await timed(track, items)
                prepared.put(items)
        prepared.end()

    async def compute() -> None:
        """Lane two: the models, then each result to its source's writer."""
        while (items := await prepared.get()) is not END:
            clock.computing(len(items))
            results, seconds = [], None
            try:
                results, seconds = await timed(infer, items)
            finally:
                clock.computed(seconds if results else None, len(items), any(i.behind for i in items))
            for item, result in results:
                item.stream.deliver(result)
        for observer in observers:
            observer.ending()

    try:
        async with asyncio.TaskGroup() as lanes:  # a lane that fails stops the other
            lanes.create_task(prepare())
            lanes.create_task(compute())
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None
