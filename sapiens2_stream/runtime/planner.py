"""Which frames the next micro-batch takes, how many, and when: fair across sources, sized to the latency budget
for live sources, taken just before the models free up."""

from __future__ import annotations

import asyncio
from collections import Counter

EMA = 0.3  # weight of the newest measurement in the cost estimates


def frames_within(budget_s: float, cost_per_frame: float, max_frames: int) -> int:
    """The micro-batch a live source gets: as many frames as one batch can process within the latency budget,
    at least 1 and at most `max_frames` (a fleet worker measures its capacity at this size too)."""
    return max(1, min(max_frames, int(budget_s / cost_per_frame)))


def smoothed(previous: float | None, value: float) -> float:
    return value if previous is None else EMA * value + (1 - EMA) * previous


class Planner:
    """Which frames the next micro-batch takes, and how many.

    Sources are served round robin (one frame each per round, starting after the last source served the time
    before), so no camera gets ahead of the others and a file takes its turn like a camera. Without live sources
    a batch is `max_frames_per_batch` frames (throughput); with them, as many as fit in the latency budget
    (`max_frame_age_s`) at the measured cost per frame, at least 1.

    It also keeps what the stages tell each other about time: when the models are expected to be free
    (`busy_until`, `models_free`), what detection costs (`detect_s`), and `work`, set whenever something changed
    that may let a batch be taken (a frame arrived, a result was written, a source ended).
    """

    def __init__(self, streams: list, max_frames: int, budget_s: float) -> None:
        self.streams, self.max_frames, self.budget_s = streams, max_frames, budget_s
        self.cursor = 0
        self.cost_per_frame: float | None = None  # seconds of inference per frame, measured
        self.detect_s: float | None = None  # seconds per detected batch, measured
        self.live_sizes: Counter[int] = Counter()
        self.busy_until = 0.0  # when the models are expected to be free (monotonic)
        self.models_free = asyncio.Event()
        self.work = asyncio.Event()

    def observe(self, seconds: float, frames: int) -> None:
        self.cost_per_frame = smoothed(self.cost_per_frame, seconds / frames)

    def observe_detection(self, seconds: float) -> None:
        self.detect_s = smoothed(self.detect_s, seconds)

    def live_batch(self) -> int:
        if self.cost_per_frame is None:
            return 1
        return frames_within(self.budget_s, self.cost_per_frame, self.max_frames)

    def ready(self) -> list:
        order = self.streams[self.cursor :] + self.streams[: self.cursor]
        return [s for s in order if s.admission() > 0]

    def size(self) -> int:
        return self.live_batch() if any(s.live for s in self.streams if s.reading) else self.max_frames

    def take(self) -> list[tuple[object, object]]:
        ready = self.ready()
        if not ready:
            return []
        n = self.size()
        shares = dict.fromkeys(ready, 0)
        while sum(shares.values()) < n:
            grew = False
            for s in ready:
                if sum(shares.values()) < n and s.admission() > shares[s]:
                    shares[s] += 1
                    grew = True
            if not grew:
                break
        served = [s for s in ready if shares[s]]
        picks = [(s, frame) for s in served for frame in s.take(shares[s])]
        if served:  # the next batch starts with the source after the last one served
            self.cursor = (self.streams.index(served[-1]) + 1) % len(self.streams)
        if picks and any(s.live for s, _ in picks):
            self.live_sizes[len(picks)] += 1
        return picks
