"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sapiens2_stream.runtime.pipeline import ResultCallback
from sapiens2_stream.train.threads import CoreShare

# where the pipeline benchmarks run: cpu here; benchmarks/gpu.sh sets cuda to get the same rows from a GPU
DEVICE = os.environ.get("SAPIENS2_BENCH_DEVICE", "cpu")
# seconds each live benchmark streams (gpu.sh shortens it to fit its time box)
LIVE_S = int(os.environ.get("SAPIENS2_BENCH_LIVE_S", "30"))
# runtime.compile of the pipeline benchmarks (auto: on CUDA). gpu.sh turns it off for the multi-source rows: there
# every process compiles its graphs before its first frame, which outweighs a 90-frame clip on a tiny model
COMPILE = os.environ.get("SAPIENS2_BENCH_COMPILE", "auto")


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of `fn()` over `repeats` runs after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main_with_figure(run: Callable[[], list[dict]], save: Callable[[str], None], flag: str, what: str) -> None:
    """A benchmark module's command line: print its table, and with `--FLAG PATH` also save its figure there."""
    parser = argparse.ArgumentParser()
    parser.add_argument(f"--{flag}", help=f"also save {what} to this file")
    path = getattr(parser.parse_args(), flag)
    print_table(run())
    if path:
        save(path)


def print_table(rows: list[dict]) -> None:
    """Rows of {name, ours_s, baseline, baseline_s[, note]}: prints each with the speed-up ratio."""
    print(f"{'benchmark':44s} {'ours':>10s} {'baseline':>10s} {'speed-up':>9s}  baseline")
    for r in rows:
        ratio = r["baseline_s"] / r["ours_s"]
        note = f" ({r['note']})" if r.get("note") else ""
        print(
            f"{r['name']:44s} {r['ours_s'] * 1e3:8.1f}ms {r['baseline_s'] * 1e3:8.1f}ms {ratio:8.2f}x  {r['baseline']}"
            + note
        )


@dataclass
class Steady:
    """A run's written frames/s from the end of its first batch to its last frame, and the CPU over that window:
    this process's and the machine's other processes' (in cores; nan where /proc/stat cannot be read)."""

    summary: dict
    fps: float
    own_cores: float
    other_cores: float


def steady_run(pipeline) -> Steady:
    """Run a single-source pipeline and measure its steady window: the models' warm-up is not the machine's rate,
    and counting the first batch's frames without its time would favour large batches (a file's 4 frames arrive
    at once)."""
    share = CoreShare()
    samples: list[tuple[float, float, float]] = []  # (wall, machine busy, own) seconds at each written frame

    def written(result, p) -> None:
        samples.append(share.sample() or (time.monotonic(), float("nan"), float("nan")))

    pipeline.observe(ResultCallback(pipeline, written))
    summary = pipeline.run()
    first = int(pipeline.times.batch_sizes["infer"][0])
    (wall0, busy0, own0), (wall1, busy1, own1) = samples[first - 1], samples[-1]
    wall, own = wall1 - wall0, own1 - own0
    return Steady(summary, (len(samples) - first) / wall, own / wall, (busy1 - busy0 - own) / wall)


def steady_rate(pipeline) -> tuple[dict, float]:
    """`steady_run`'s summary and written frames/s."""
    run = steady_run(pipeline)
    return run.summary, run.fps


def peak_rss_mb(pid: int) -> float:
    """A process's own peak RSS so far (VmHWM: unlike ru_maxrss it excludes what a forked child inherited from
    its parent before exec); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
