"""The training step's threads: as many as the cores other processes leave idle.

OpenMP's threads wait for each other by spinning. On an idle machine that is the fastest way to run the many
small parallel regions of a step; when other processes hold the cores, each region waits for a thread that is not
running, and training here slowed 5-20x beside two busy processes (a plain loop too: `benchmarks.train`).
Waiting asleep instead (`OMP_WAIT_POLICY=PASSIVE`) held that to about 1x but made the idle step twice as slow,
and it can only be set before torch loads. So the trainer keeps spinning and, every few steps, sets its thread
count to the cores the others leave idle (from /proc/stat and this process's own CPU time; elsewhere than Linux
it leaves torch's setting alone): one thread beside two busy processes on two cores, all of them when idle.
"""

from __future__ import annotations

import os
import time

import torch

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (of /proc/stat's "cpu" line)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class CoreShare:
    """Sets torch's thread count to the cores other processes have left idle since the last call."""

    def __init__(self, most: int | None = None) -> None:
        self.most = most or torch.get_num_threads()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last = self.sample()

    def sample(self) -> tuple[float, float, float] | None:
        """(wall seconds, CPU seconds busy on the machine, CPU seconds of this process), or None off Linux."""
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        own = os.times()
        return time.monotonic(), sum(fields[i] for i in BUSY_FIELDS) / self.tick, own.user + own.system

    def others(self) -> float | None:
        """Cores busy with other processes since the last call (None off Linux or too soon to tell)."""
        now = self.sample()
        if now is None or self.last is None or now[0] - self.last[0] < 0.5:
            return None
        wall, busy, own = (a - b for a, b in zip(now, self.last, strict=True))
        self.last = now
        return max(0.0, (busy - own) / wall)

    def adjust(self) -> int:
        """Set and return the thread count: the idle cores, at least one, at most `most`."""
        others = self.others()
        if others is not None:
            threads = max(1, min(self.most, round(usable_cores() - others)))
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        return torch.get_num_threads()
