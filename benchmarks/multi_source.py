"""N sources in one process against N single-source processes on the same files (block policy, nothing dropped):
total frames/s from the start of the processes to the last one done (loading included: it is paid once per
process) and peak memory (the sum of every process's own peak RSS, VmHWM sampled from /proc; GPU memory is not
measured). On the GPU with SAPIENS2_BENCH_DEVICE=cuda; gpu.sh adds SAPIENS2_BENCH_COMPILE=off, as compiled
each process would spend longer on its graphs than on the clip.

Run: `python -m benchmarks.multi_source` (about 4 minutes on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import COMPILE, DEVICE, peak_rss_mb
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.models import make_tiny_checkpoints

FRAMES, COUNTS = 90, (1, 2, 4)


def spec(work: Path, tiny: dict) -> Path:
    path = work / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"uri": "replaced.mp4"},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {m: {"source": str(tiny[m]), "input_size": [256, 192]} for m in ("pose", "seg")},
        "runtime": {"device": DEVICE, "compile": COMPILE},
    }))  # fmt: skip
    return path


def error_log(out: Path) -> Path:
    """Where a run into `out` leaves its error output."""
    return out.with_name(out.name + ".log")


def launch(pipeline: Path, sources: list[Path], out: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "sapiens2_stream.cli", "run", str(pipeline), "--output", str(out), "--no-progress"]
    for source in sources:
        args += ["--source", f"{source.stem}={source}"]
    with open(error_log(out), "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)


def measure(procs: list[subprocess.Popen]) -> float:
    """The sum of the processes' peak RSS in MB, sampled until they end; a process that failed is reported with
    the end of its error output."""
    peaks = dict.fromkeys(p.pid for p in procs)
    while any(p.poll() is None for p in procs):
        for p in procs:
            peaks[p.pid] = max(peaks[p.pid] or 0.0, peak_rss_mb(p.pid))
        time.sleep(0.1)
    for p in procs:
        if p.returncode != 0:
            log = error_log(Path(p.args[p.args.index("--output") + 1])).read_text()
            raise RuntimeError(f"{' '.join(p.args)} exited with {p.returncode}:\n{log[-3000:]}")
    return sum(peaks.values())


def run() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = make_tiny_checkpoints(work / "tiny", ("pose", "seg"))
        pipeline = spec(work, tiny)
        clips = [work / f"cam{i}.mp4" for i in range(max(COUNTS))]
        for i, clip in enumerate(clips):
            make_clip(clip, frames=FRAMES, size=(240, 320), people=1 + i % 2)
        for n in COUNTS:
            t0 = time.perf_counter()
            shared_mb = measure([launch(pipeline, clips[:n], work / f"one{n}")])
            shared_s = time.perf_counter() - t0
            summary = json.loads((work / f"one{n}" / "summary.json").read_text())
            assert summary["totals"]["frames_out"] == n * FRAMES
            t0 = time.perf_counter()
            separate_mb = measure([launch(pipeline, [clip], work / f"sep{n}-{i}") for i, clip in enumerate(clips[:n])])
            separate_s = time.perf_counter() - t0
            rows.append(dict(
                name=f"{n} source(s) in one process: total frames/s", ours_s=shared_s / (n * FRAMES),
                baseline=f"{n} single-source process(es)", baseline_s=separate_s / (n * FRAMES),
                note=f"peak RSS {shared_mb:.0f} MB vs {separate_mb:.0f} MB",
                rss_mb=round(shared_mb), baseline_rss_mb=round(separate_mb),
            ))  # fmt: skip
    return rows


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(run())
