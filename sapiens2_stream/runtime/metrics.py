"""Per-stage latency, batch sizes and counters, and the end-of-run summary.

Samples are kept for the last SAMPLES frames or batches only, so a run of weeks keeps bounded memory; the
summary's percentiles are over those.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

SAMPLES = 100_000


def samples() -> deque:
    return deque(maxlen=SAMPLES)


@dataclass
class Metrics:
    stage_ms: dict[str, deque] = field(default_factory=lambda: defaultdict(samples))
    batch_sizes: dict[str, deque] = field(default_factory=lambda: defaultdict(samples))
    frame_age_ms: deque = field(default_factory=samples)  # arrival to written, per frame
    frames_out: int = 0
    observer: Callable[[str, float, int | None], None] | None = None  # also told every stage time (Prometheus)

    def stage(self, name: str, ms_per_frame: float, batch: int | None = None) -> None:
        self.stage_ms[name].append(ms_per_frame)
        if batch is not None:
            self.batch_sizes[name].append(batch)
        if self.observer is not None:
            self.observer(name, ms_per_frame, batch)

    @staticmethod
    def percentiles(values: list[float]) -> tuple[float, float]:
        if not values:
            return 0.0, 0.0
        p50, p95 = np.percentile(values, [50, 95])
        return float(p50), float(p95)

    def summary(self) -> dict:
        def p50_p95(values: list[float], digits: int) -> dict[str, float]:
            p50, p95 = self.percentiles(values)
            return {"p50": round(p50, digits), "p95": round(p95, digits)}

        age = p50_p95(self.frame_age_ms, 1) | {"max": round(max(self.frame_age_ms, default=0.0), 1)}
        return {
            "frames_out": self.frames_out,
            "stage_ms_per_frame": {k: p50_p95(v, 2) for k, v in self.stage_ms.items()},
            "batch_size": {
                k: {"max": max(v), "mean": round(float(np.mean(v)), 2)} for k, v in self.batch_sizes.items() if v
            },
            "frame_age_ms": age,
        }
