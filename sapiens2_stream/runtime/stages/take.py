"""The first stage: frames wait for the models in each source's queue (`Waiting`), and `Take` picks the next
micro-batch from them (`Planner`): which frames, how many, and when. Everything about a frame before the models
see it is here, so the path of a batch (`runtime.batch_path`) starts in one file.

Waiting frames follow the source's policy. `block` (files): the reader waits for room, nothing is dropped.
`latest` (live): when the models free up they take the newest frames and the older ones are dropped, counted
as waiting too long; `drop_oldest` (live): frames are taken in order and a full buffer drops its oldest (queue
full). Live frames older than `runtime.max_frame_age_s` are dropped before any work.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque

from ...io.sources import Frame
from ..batch_path import BatchRun, Item, ModelClock
from ..numbers import SourceNumbers
from ..options import RuntimeConfig
from .base import Stage, register_stage

LOAD_HOLD_S = 1.0  # a live source counts as behind for this long after frames were dropped for want of time,
LOAD_HOLD_MAX_S = 60.0  # doubled up to this each time it falls behind again within a hold of catching up
ROOM = 0.9  # the share of the models' time live frames may take with everything on (flip TTA)


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


@register_stage("take")
class Take(Stage):
    """The frames of the next micro-batch, fairly across sources (the planner), or None once every source has
    ended. Live frames are taken just before the models free up, so they do not age while the previous batch
    runs; under `block` nothing is dropped, so frames age anyway. Its state is the batch run."""

    section, doc = "runtime", "the frames of the next micro-batch, fairly across sources, just in time for the models"

    Options = RuntimeConfig
    scope = "batch"

    def open(self, options: RuntimeConfig, batch: BatchRun) -> BatchRun:
        self.max_wait_s = options.max_wait_ms / 1000
        return batch

    async def __call__(self, batch: BatchRun, _=None) -> list[Item] | None:
        planner, streams = batch.planner, batch.streams
        while True:
            planner.work.clear()
            if planner.ready():
                break
            ended = all(not s.reading and not s.waiting.frames for s in streams)
            if ended and (batch.stop.is_set() or not batch.serve):
                return None
            await planner.work.wait()
        want = planner.size()
        deadline = time.monotonic() + self.max_wait_s
        while sum(s.waiting.admission() for s in planner.ready()) < want and any(s.reading for s in streams):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            planner.work.clear()
            try:
                await asyncio.wait_for(planner.work.wait(), remaining)
            except TimeoutError:
                break
        if any(s.waiting.drops_allowed for s in streams):  # live: just before the models free up, less detection
            clock = batch.clock
            delay = clock.busy_until - time.monotonic() - (clock.detect_s or 0.0)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(clock.models_free.wait(), delay)
        return planner.take()
