"""A run's numbers, with one owner each: `SourceNumbers` per source, `StageTimes` for the shared stages. Their
`snapshot()` is what every reader uses (the summary, the console's status, Prometheus, the progress line, the
fleet worker's report), so each figure is computed here, once.

Samples are kept for the last SAMPLES frames or batches only, in arrays allocated once, so a run of weeks keeps
the same memory from its first minute (a deque of Python floats grew by 32 bytes a sample for hours); the
percentiles are over those. Recent rates are over the last RATE_WINDOW_S seconds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable

import numpy as np

from ..io.sources import SourceStats

SAMPLES = 100_000
RATE_WINDOW_S = 5.0  # recent frames/s (in, processed, written) are measured over this many seconds
RATE_SAMPLE_S = 0.5  # counts are sampled for the recent rates at most this often
DROP_REASONS = ("waiting_too_long", "queue_full", "output_too_slow")


class Samples:
    """The last SAMPLES measurements (float32), in a ring allocated once; reads as an array, oldest first."""

    def __init__(self, size: int = SAMPLES) -> None:
        self.data = np.zeros(size, np.float32)
        self.count = 0  # measurements taken in all

    def append(self, value: float) -> None:
        self.data[self.count % len(self.data)] = value
        self.count += 1

    def __len__(self) -> int:
        return min(self.count, len(self.data))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        n, size = len(self), len(self.data)
        values = self.data[:n] if self.count <= size else np.roll(self.data, -(self.count % size))
        return values.astype(dtype or np.float32, copy=True)

    def __getitem__(self, index: int) -> float:
        return float(np.asarray(self)[index])

    def latest(self, n: int) -> np.ndarray:
        """The newest n measurements (fewer at the start)."""
        return np.asarray(self)[-n:]


def samples() -> Samples:
    return Samples()


def p50_p95(values: Samples, digits: int) -> dict[str, float]:
    if not len(values):
        return {"p50": 0.0, "p95": 0.0}
    p50, p95 = np.percentile(np.asarray(values), [50, 95])
    return {"p50": round(float(p50), digits), "p95": round(float(p95), digits)}


class StageTimes:
    """Time per frame of each stage and the batch sizes it ran at; `observer` is told every measurement as it
    happens (Prometheus' histograms)."""

    def __init__(self) -> None:
        self.stage_ms: dict[str, Samples] = defaultdict(samples)
        self.batch_sizes: dict[str, Samples] = defaultdict(samples)
        self.observer: Callable[[str, float, int | None], None] | None = None
        self.lock = threading.Lock()  # stages are timed on a stream's writer thread and read on others (the
        # console's loop, /metrics): a stage's first time adds a key while a reader goes through them

    def stage(self, name: str, ms_per_frame: float, batch: int | None = None) -> None:
        with self.lock:
            self.stage_ms[name].append(ms_per_frame)
            if batch is not None:
                self.batch_sizes[name].append(batch)
        if self.observer is not None:
            self.observer(name, ms_per_frame, batch)

    def batch_size(self, name: str, size: int) -> None:
        """A batch size measured outside a stage's timing (the people of a micro-batch)."""
        with self.lock:
            self.batch_sizes[name].append(size)

    def snapshot(self) -> dict:
        with self.lock:
            stage_ms, batch_sizes = dict(self.stage_ms), dict(self.batch_sizes)
        return {
            "stage_ms_per_frame": {k: p50_p95(v, 2) for k, v in stage_ms.items()},
            "batch_size": {
                k: {"max": int(np.max(v)), "mean": round(float(np.mean(v)), 2)}
                for k, v in batch_sizes.items()
                if len(v)
            },  # fmt: skip
        }


class SourceNumbers:
    """Everything counted for one source: what its reader counts (`stats`: frames in, reconnects, gaps, skipped,
    conversions), what was processed, written and dropped, how long it was behind, its latest result, and its own
    stages' times."""

    def __init__(self, stats: SourceStats, live: bool) -> None:
        self.stats, self.live = stats, live
        self.processed = 0  # results the models computed (not redrawn ones)
        self.written = 0
        self.redrawn = 0  # results drawn again by --resume from their records
        self.detected = 0  # frames the detector ran on
        self.left = 0  # frames read but left unprocessed by a stop
        self.dropped: Counter[str] = Counter()
        self.behind_s = 0.0  # time spent behind a live source
        self.people = 0  # in the latest result written
        self.last_frame: int | None = None  # the latest result's frame index
        self.last_written: float | None = None  # and when it was written (wall time)
        self.started = time.time()
        self.ended: float | None = None
        self.times = StageTimes()
        self.frame_age_ms = samples()  # arrival to written, per frame
        self.history: deque = deque()  # (monotonic time, frames in, processed, written), for the recent rates
        self.history_lock = threading.Lock()  # sampled by the writer thread and by readers on other threads
        self.errors: list[dict] = []  # stages that failed for this source: {stage, error, frame}

    def stage_failed(self, stage: str, error: str, frame: int | None) -> None:
        """A stage failed for this source (it is off from then on): said in the summary, /metrics and the console."""
        self.errors.append({"stage": stage, "error": error, "frame": frame})

    def wrote(self, frame_index: int, people: int, arrived_wall_s: float) -> None:
        """A result was written."""
        now = time.time()
        self.written += 1
        self.people, self.last_frame, self.last_written = people, frame_index, now
        self.frame_age_ms.append((now - arrived_wall_s) * 1e3)
        self._sample(time.monotonic())

    def seconds(self) -> float:
        """How long the source has run (up to its end)."""
        return max((self.ended or time.time()) - self.started, 1e-9)

    def _sample(self, now: float) -> tuple:
        """The oldest sample of the rate window, after taking one now if the latest is RATE_SAMPLE_S old."""
        with self.history_lock:
            if not self.history or now - self.history[-1][0] >= RATE_SAMPLE_S:
                self.history.append((now, self.stats.frames, self.processed, self.written))
                while len(self.history) > 2 and now - self.history[1][0] >= RATE_WINDOW_S:
                    self.history.popleft()
            return self.history[0]

    def recent_fps(self) -> dict[str, float]:
        """Frames/s in, processed and written over about the last RATE_WINDOW_S seconds (falling to 0 when a source
        stops delivering)."""
        now = time.monotonic()
        t0, in0, processed0, written0 = self._sample(now)
        span = now - t0
        if span < RATE_SAMPLE_S:
            return {"in": 0.0, "processed": 0.0, "written": 0.0}
        return {"in": round((self.stats.frames - in0) / span, 2),
                "processed": round((self.processed - processed0) / span, 2),
                "written": round((self.written - written0) / span, 2)}  # fmt: skip

    def snapshot(self) -> dict:
        """Every figure of this source, as summary.json, the console, Prometheus, the progress line and the fleet
        report it."""
        elapsed, s = self.seconds(), self.stats
        ages = self.frame_age_ms
        latest = ages.latest(10)
        return {
            "frames_in": s.frames,
            "frames_out": self.written,
            "processed": self.processed,
            "dropped": {reason: self.dropped[reason] for reason in DROP_REASONS if self.dropped[reason]},
            "reconnects": s.reconnects,
            "gap_s": round(s.gaps_s, 2),
            "corrupt_skipped": s.corrupt,
            "conversions": list(s.conversions),
            "left_unprocessed": self.left,
            "redrawn_frames": self.redrawn,
            "frames_detected": self.detected,
            "seconds": round(elapsed, 2),
            "processed_fps": round(self.processed / elapsed, 2),
            "written_fps": round(self.written / elapsed, 2),
            "recent_fps": self.recent_fps(),
            "under_load_share": round(self.behind_s / elapsed, 3) if self.live else 0.0,
            "served_share": round(self.processed / s.frames, 3) if self.live and s.frames else None,
            "people": self.people,
            "last_frame": self.last_frame,
            "result_age_s": None if self.last_written is None else round(time.time() - self.last_written, 3),
            "frame_age_ms": p50_p95(ages, 1) | {"max": round(float(np.max(ages)), 1) if len(ages) else 0.0,
                                                "recent": round(float(np.mean(latest)), 1) if len(latest) else 0.0},
            "errors": list(self.errors),
            **self.times.snapshot(),
        }  # fmt: skip
