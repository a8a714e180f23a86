"""Per-stage latency, batch sizes and counters, and the end-of-run summary."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Metrics:
    stage_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    batch_sizes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    frame_age_ms: list[float] = field(default_factory=list)  # arrival to written, per frame
    frames_out: int = 0

    def stage(self, name: str, ms_per_frame: float, batch: int | None = None) -> None:
        self.stage_ms[name].append(ms_per_frame)
        if batch is not None:
            self.batch_sizes[name].append(batch)

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
