"""What a frame's path passes between its steps (`runtime.frame_path` tells the path): the frames waiting for the
models in each source's queue (`Waiting`), the planner that takes the next micro-batch from them (`Planner`), the
frame on its way (`Item`), the hand-offs between the lanes and to a source's writer (`Handoff`, then `END`), the
models' clock (`ModelClock`), the models themselves (`LoadedModels`) and what the batch stages work with
(`BatchRun`).

Waiting frames follow the source's policy. `block` (files): the reader waits for room, nothing is dropped.
`latest` (live): when the models free up they take the newest frames and the older ones are dropped, counted
as waiting too long; `drop_oldest` (live): frames are taken in order and a full buffer drops its oldest (queue
full). Live frames older than `runtime.max_frame_age_s` are dropped before any work.

A leaf: it imports none of the files that tell the path, so the stages, the streams and the narrator all read these
types from one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from ..io.sources import Frame
from .numbers import SourceNumbers, StageTimes
from .options import RuntimeConfig
from .results import Person

if TYPE_CHECKING:
    from ..detect import Detector
    from .engine import InferenceEngine

END = object()  # the end of input, on every hand-off
EMA = 0.3  # weight of the newest measurement in the cost estimates
LOAD_HOLD_S = 1.0  # a live source counts as behind for this long after frames were dropped for want of time,
LOAD_HOLD_MAX_S = 60.0  # doubled up to this each time it falls behind again within a hold of catching up
ROOM = 0.9  # the share of the models' time live frames may take with everything on (flip TTA)


def smoothed(previous: float | None, value: float) -> float:
    return value if previous is None else EMA * value + (1 - EMA) * previous


class ModelClock:
    """What the lanes measured of the models, for the planner: seconds of inference per frame and per detected
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

    @contextlib.contextmanager
    def computing(self, frames: int, thinned: bool = False) -> Iterator[Took]:
        """The models are busy with `frames` for the block, and free again after it; what they took is read from the
        `Took` it gives (left None: the batch was released or abandoned, nothing measured). `thinned`: the batch
        runs as under load (`flip: auto` leaves flip TTA out)."""
        self.busy_until = time.monotonic() + (self.cost_per_frame or 0.0) * frames
        self.models_free.clear()
        took = Took()
        try:
            yield took
        finally:
            self.models_free.set()
            if took.seconds is not None:
                self.cost_per_frame = smoothed(self.cost_per_frame, took.seconds / frames)
                self.thinned[thinned] = smoothed(self.thinned[thinned], took.seconds / frames)


@dataclass
class Took:
    """What a batch took on the models, in seconds (None: nothing measured)."""

    seconds: float | None = None


class Tracks(Protocol):
    """What the detect and track stages ask of a source's tracking (`stages.track.SourceTracking`)."""

    def needs_detection(self, frame: Frame, behind: bool = False) -> bool: ...

    def track(self, frame: Frame, detections: np.ndarray | None) -> tuple[list[Person], list[int]]: ...


class Feeding(Protocol):
    """What the batch stages see of a frame's source (`stream.Stream`): its address, its waiting frames, its
    tracking, and a way to give back frames taken that will not be written."""

    uri: str
    waiting: Waiting
    tracking: Tracks

    def release(self, n: int) -> None: ...


@dataclass
class Item:
    """A frame on its way from its stream through the batch stages."""

    stream: Feeding
    frame: Frame
    behind: bool = False  # its live source was behind when it was taken (flip TTA and detection thin out)
    detect: bool = False  # a detector frame (the tracker carries boxes on the others)
    detections: np.ndarray | None = None
    people: list[Person] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)  # tracks that ended by this frame


class Handoff:
    """Items from one lane to the next, or results from the models to a source's writer: in order, then END. Its
    consumer iterates it (`async for`) until the END; a producer may `hand_over` an item and wait until it was
    taken (the first lane takes the next frames only then, so they do not age while the models are busy)."""

    def __init__(self) -> None:
        self.items: deque = deque()
        self.most = 0  # the most items that waited at once (a live writer's queue stays bounded: tested)
        self.ready = asyncio.Event()
        self.empty = asyncio.Event()
        self.empty.set()

    def put(self, item, most: int | None = None) -> tuple[object, object] | None:
        """Hand `item` on. With `most`, a hand-off already holding that many first drops its oldest: returns it and
        the one now first (which inherits what the dropped one carried), else None."""
        dropped = None
        if most is not None and len(self.items) >= most:
            oldest = self.items.popleft()
            dropped = oldest, (self.items[0] if self.items else item)
        self.items.append(item)
        self.most = max(self.most, len(self.items))
        self.empty.clear()
        self.ready.set()
        return dropped

    async def hand_over(self, item) -> None:
        """Hand `item` on, then wait until it was taken."""
        self.put(item)
        await self.empty.wait()

    def end(self) -> None:
        self.put(END)

    async def __aiter__(self):
        """Every item, in order, until the END."""
        while True:
            while not self.items:
                self.ready.clear()
                await self.ready.wait()
            item = self.items.popleft()
            if not self.items:
                self.empty.set()
            if item is END:
                return
            yield item

    def clear(self) -> list:
        """Take out every item waiting (not the END); returns them."""
        taken = [item for item in self.items if item is not END]
        self.items = deque(item for item in self.items if item is END)
        if not self.items:
            self.empty.set()
        return taken

    def __len__(self) -> int:
        return len(self.items)


class Waiting:
    """One source's frames waiting for the models, by its policy (see the module docstring), and the frames it
    has in flight (taken by the models and not yet written or dropped)."""

    def __init__(self, policy: str, live: bool, runtime: RuntimeConfig, numbers: SourceNumbers) -> None:
        """`policy`: the runtime's, `auto` resolved for this source; `live`: a camera (its frames may be dropped
        unless the policy is `block`); `numbers`: the source's counters (drops, time behind)."""
        self.policy, self.live, self.runtime, self.numbers = policy, live, runtime, numbers
        self.drops_allowed = live and policy != "block"
        self.frames: deque[Frame] = deque()
        self.room = asyncio.Event()  # the reader may add a frame (block policy)
        self.room.set()
        self.in_flight = 0
        self.most = 0  # the most frames that waited at once
        self.stopping = False  # asked to stop: nothing more is taken, waiting frames are left unprocessed
        self.behind_until = 0.0
        self.hold = LOAD_HOLD_S  # how long falling behind lasts now (`fell_behind`)
        self.last_take: float | None = None

    async def arrive(self, frame: Frame) -> bool:
        """A frame from the reader (on the loop): waits for room (no drops allowed), or makes room by dropping
        the oldest. False when the source is stopping and the frame is left unprocessed."""
        queue_size = self.runtime.queue_size
        if not self.drops_allowed:  # files (whatever the policy) and live sources under `block`
            while len(self.frames) >= queue_size and not self.stopping:
                self.room.clear()
                await self.room.wait()
        elif len(self.frames) >= queue_size:
            self.frames.popleft()  # latest: superseded by a newer frame; drop_oldest: no room
            self.numbers.dropped["waiting_too_long" if self.policy == "latest" else "queue_full"] += 1
            self.fell_behind(time.time())
        if self.stopping:
            self.numbers.left += 1
            return False
        self.frames.append(frame)
        self.most = max(self.most, len(self.frames))
        return True

    def admission(self) -> int:
        """How many more frames the engine may take now. Files are bounded by what is in flight (their
        outputs never drop, so this is their back-pressure); live streams only by what waits."""
        if self.stopping:
            return 0
        if self.drops_allowed:
            return len(self.frames)
        limit = self.runtime.queue_size + 2 * self.runtime.max_frames_per_batch
        return max(0, min(len(self.frames), limit - self.in_flight))

    def take(self, n: int) -> list[Frame]:
        """Up to n frames for the engine: the newest (latest policy) or the oldest (otherwise); live frames older
        than max_frame_age_s and those passed over for newer ones are dropped, counted."""
        now = time.time()
        if self.drops_allowed:
            old = 0
            while self.frames and now - self.frames[0].wall_s > self.runtime.max_frame_age_s:
                self.frames.popleft()
                old += 1
            if self.policy == "latest":
                while len(self.frames) > n:
                    self.frames.popleft()
                    old += 1
            self.numbers.dropped["waiting_too_long"] += old
            if old:
                self.fell_behind(now)
        frames = [self.frames.popleft() for _ in range(min(n, len(self.frames)))]
        if self.live and self.last_take is not None and self.under_load(now):
            self.numbers.behind_s += now - self.last_take
        self.last_take = now
        self.in_flight += len(frames)
        self.room.set()
        return frames

    def fell_behind(self, now: float) -> None:
        """Frames were dropped for want of time: the source is behind for `hold` seconds (what thins out under
        load stays off: flip TTA with `flip: auto`, detections). Behind again within a hold of catching up, the hold
        doubles (up to LOAD_HOLD_MAX_S): what came back once it caught up costs more than the camera allows (a
        model whose flip TTA does not fit the frame rate would otherwise go on and off, dropping frames each time);
        after a calm of ten holds it is LOAD_HOLD_S again."""
        if self.behind_until and now >= self.behind_until:  # it had caught up
            calm = now - self.behind_until
            self.hold = min(2 * self.hold, LOAD_HOLD_MAX_S) if calm < self.hold else (
                LOAD_HOLD_S if calm > 10 * self.hold else self.hold)  # fmt: skip
        self.behind_until = now + self.hold

    def served_share(self) -> float:
        """The share of a live source's frames the models have taken so far (0 for a source that never drops). The
        planner serves the least served live camera first: at a device's capacity, cameras whose frames happen to
        arrive just after a take would otherwise lose their turn again and again, while one whose come just
        before it gains."""
        frames = self.numbers.stats.frames
        return (self.numbers.processed + self.in_flight) / frames if self.drops_allowed and frames else 0.0

    def arriving_fps(self) -> float:
        """Frames a second a live source has been delivering lately (0 for a file: it waits for the models)."""
        return self.numbers.recent_fps()["in"] if self.live else 0.0

    def under_load(self, now: float | None = None) -> bool:
        """A live source falling behind: frames were dropped for want of time within the last LOAD_HOLD_S."""
        return self.live and (now or time.time()) < self.behind_until

    def finished(self, n: int = 1) -> bool:
        """`n` frames taken are done with: written, or dropped as their output was too slow. Whether the source is
        now settled (`settled`)."""
        self.in_flight -= n
        return self.settled()

    def release(self, n: int) -> None:
        """`n` frames taken will not be written after all: left unprocessed, counted."""
        self.in_flight -= n
        self.numbers.left += n

    def settled(self) -> bool:
        """Nothing waits and nothing taken is still on its way."""
        return self.in_flight == 0 and not self.frames

    def stop(self) -> None:
        """Take nothing more; the frames only waiting are left unprocessed, counted."""
        self.stopping = True
        self.numbers.left += len(self.frames)
        self.frames.clear()
        self.room.set()


def frames_within(budget_s: float, cost_per_frame: float, max_frames: int) -> int:
    """The micro-batch a live source gets: as many frames as one batch can process within the latency budget,
    at least 1 and at most `max_frames` (a fleet worker measures its capacity at this size too)."""
    return max(1, min(max_frames, int(budget_s / cost_per_frame)))


class Planner:
    """Which frames the next micro-batch takes, and how many.

    Sources are served round robin (one frame each per round, starting after the last source served the time
    before), the least served live cameras first (`Waiting.served_share`), so no camera gets ahead of the others
    and a file takes its turn like a camera. Without live sources a batch is `max_frames_per_batch` frames
    (throughput); with them, as many as fit in the latency budget
    (`max_frame_age_s`) at the cost per frame the lanes measured (`clock`), at least 1. `work` is set whenever
    something changed that may let a batch be taken (a frame arrived, a result was written, a source ended).
    """

    def __init__(self, streams: list, clock: ModelClock, max_frames: int, budget_s: float) -> None:
        """`streams`: the run's (the list itself: sources added while running join it); each has `waiting`."""
        self.streams, self.clock, self.max_frames, self.budget_s = streams, clock, max_frames, budget_s
        self.cursor = 0
        self.live_sizes: Counter[int] = Counter()
        self.work = asyncio.Event()

    def live_batch(self) -> int:
        if self.clock.cost_per_frame is None:
            return 1
        return frames_within(self.budget_s, self.clock.cost_per_frame, self.max_frames)

    def room_for_all(self, frames_per_s: float) -> bool:
        """Whether the models have room, at `frames_per_s` arriving from live sources, for what they leave out
        under load (flip TTA doubles a flipped task's work): its cost per frame measured, else twice the thinned
        one, within ROOM of the time there is. Unknown, or nothing left out: yes (tried, then measured)."""
        clock = self.clock
        if not clock.thins:
            return True
        full = clock.thinned[False] or (2 * clock.thinned[True] if clock.thinned[True] is not None else None)
        return full is None or full * frames_per_s <= ROOM

    def ready(self) -> list:
        order = self.streams[self.cursor :] + self.streams[: self.cursor]
        order.sort(key=lambda s: s.waiting.served_share())  # stable: round robin among the equally served
        return [s for s in order if s.waiting.admission() > 0]

    def size(self) -> int:
        return self.live_batch() if any(s.waiting.live for s in self.streams if s.reading) else self.max_frames

    def take(self) -> list[Item]:
        """The next micro-batch's frames, each an `Item`, marked `behind` when its live source is behind or when
        the models have no room for all their work at the live sources' rate (`room_for_all`: `flip: auto` then
        leaves flip TTA out before frames are dropped, not after)."""
        ready = self.ready()
        if not ready:
            return []
        n = self.size()
        shares = dict.fromkeys(ready, 0)
        while sum(shares.values()) < n:
            grew = False
            for s in ready:
                if sum(shares.values()) < n and s.waiting.admission() > shares[s]:
                    shares[s] += 1
                    grew = True
            if not grew:
                break
        served = [s for s in ready if shares[s]]
        room = self.room_for_all(sum(s.waiting.arriving_fps() for s in self.streams if s.reading))
        items = [Item(s, frame, behind=s.waiting.under_load() or (s.waiting.live and not room))
                 for s in served for frame in s.waiting.take(shares[s])]  # fmt: skip
        if served:  # the next batch starts with the source after the last one served
            self.cursor = (self.streams.index(served[-1]) + 1) % len(self.streams)
        if items and any(item.stream.waiting.live for item in items):
            self.live_sizes[len(items)] += 1
        return items

    async def batches(self, batch: BatchRun, max_wait_s: float):
        """Micro-batch after micro-batch (the take stage's), until every source has ended (and, serving, a stop).
        Each waits for a frame, then up to `max_wait_s` for a full batch while sources still read; live frames are
        taken just before the models free up (less a detection's time), so they do not age while the previous
        batch runs. The next is taken when the consumer asks for it (once the models took this one)."""
        streams, clock = self.streams, self.clock
        while True:
            while True:
                self.work.clear()
                if self.ready():
                    break
                ended = all(not s.reading and not s.waiting.frames for s in streams)
                if ended and (batch.stop.is_set() or not batch.serve):
                    return
                await self.work.wait()
            want = self.size()
            deadline = time.monotonic() + max_wait_s
            while sum(s.waiting.admission() for s in self.ready()) < want and any(s.reading for s in streams):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.work.clear()
                try:
                    await asyncio.wait_for(self.work.wait(), remaining)
                except TimeoutError:
                    break
            if any(s.waiting.drops_allowed for s in streams):  # live: just before the models free up
                delay = clock.busy_until - time.monotonic() - (clock.detect_s or 0.0)
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(clock.models_free.wait(), delay)
            if items := self.take():
                yield items


@dataclass
class LoadedModels:
    """What is expensive to load and can serve many runs: the Sapiens2 models and the person detector, each with
    the one thread that runs it."""

    device: torch.device
    dtype: torch.dtype
    dtype_reason: str
    engine: InferenceEngine
    detector: Detector
    detect_thread: ThreadPoolExecutor
    compiled: dict[str, list[int]]  # per task, the batch sizes compiled before the first frame (none: eager)

    def close(self, wait: bool = False) -> None:
        """End the device's and the detector's threads (a process that loads models many times keeps none)."""
        self.engine.executor.shutdown(wait=wait)
        self.detect_thread.shutdown(wait=wait)


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
