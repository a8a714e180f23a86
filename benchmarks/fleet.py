"""The live fleet on a local Ray instance against one process on the same cameras, and what a failover costs.

- throughput: N camera-paced lavfi sources (320x240) with the tiny pose model, for LIVE_S seconds: total written
  frames/s and peak memory (each process's own VmHWM: the fleet's workers, or the single process) for a fleet
  of two 1-CPU workers against one `run` process.
- failover: a worker SIGKILLed, split into detection (until Ray has started the replacement process), model
  load (until it answers: its constructor loaded the models and took its cameras back) and reconnect (until its
  cameras' next result). A lost node adds Ray's health-check time (`fleet.detect_s`; 3-4.5 s measured with the
  tuned checks) before the same steps.
- cameras per worker: how many cameras at 10 results/s each one worker carries (its measured capacity / 10); on
  a GPU (`SAPIENS2_BENCH_DEVICE=cuda`, run by benchmarks/gpu.sh) that is cameras per GPU.

Run: `python -m benchmarks.fleet` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import DEVICE, LIVE_S, peak_rss_mb
from sapiens2_stream.config import from_dict
from sapiens2_stream.models import make_tiny_checkpoints
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig

CAMERAS, FPS = 4, 8


def config(tiny: dict, out: Path) -> PipelineConfig:
    return from_dict(PipelineConfig, {
        "sources": [{"name": f"cam{i}", "uri": f"lavfi:testsrc2=size=320x240:rate={FPS},realtime"}
                    for i in range(CAMERAS)],
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {"pose": {"source": str(tiny["pose"]), "input_size": [256, 192], "flip": "off"}},
        "outputs": {"dir": str(out), "video": {"enabled": False}},
        "runtime": {"device": DEVICE, "threads": 1},
        "fleet": {"workers": 1 if DEVICE == "cuda" else 2, "cpus_per_worker": 1},  # gpu.sh: one GPU, one worker
    })  # fmt: skip


def written_fps(sources: dict) -> float:
    return sum(s["frames_out"] / s["seconds"] for s in sources.values())


def newest_wall(camera_dir: Path) -> float:
    walls = [json.loads(line)["wall"] for p in camera_dir.glob("*/results.jsonl")
             for line in p.read_text().splitlines()[-1:]]  # fmt: skip
    return max(walls, default=0.0)


def capacity_row(tiny: dict, out: Path) -> dict:
    """Cameras at 10 results/s one worker carries: its own measurement, as placement uses it (no Ray needed)."""
    from sapiens2_stream.fleet.worker import FleetWorker

    worker = FleetWorker(config(tiny, out), "w0")
    capacity = worker.measure()
    worker.stop()
    return dict(name=f"cameras one worker carries at 10 results/s ({DEVICE}, tiny pose 256x192)",
                ours_s=10 / capacity, baseline="one camera", baseline_s=1.0,
                note=f"{capacity / 10:.1f} cameras (measured capacity {capacity:.1f} frames/s)")  # fmt: skip


def run() -> list[dict]:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on 127.0.0.1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = make_tiny_checkpoints(work / "tiny", ("pose",))
        rows = [capacity_row(tiny, work / "capacity")]
        try:
            import ray  # noqa: F401
        except ImportError:  # the GPU machine has no Ray: the capacity row alone
            return rows
        from sapiens2_stream.fleet.controller import Fleet

        single = Pipeline(config(tiny, work / "single"))
        threading.Timer(LIVE_S, single.finish).start()
        single_fps = written_fps(single.run()["sources"])
        single_mb = peak_rss_mb(os.getpid())

        fleet = Fleet(config(tiny, work / "fleet"), "local")
        try:
            fleet.start()
            started = time.time()
            while time.time() - started < LIVE_S:
                fleet.poll()
            fleet_mb = sum(peak_rss_mb(w["pid"]) for w in fleet.record.data["workers"].values())
            # failover: SIGKILL a worker with cameras
            name, worker = next((n, dict(w)) for n, w in fleet.record.data["workers"].items() if w["sources"])
            before = fleet_worker_pids()
            os.kill(worker["pid"], signal.SIGKILL)
            killed = time.time()
            respawned = answered = back = None
            while back is None and time.time() - killed < 300:
                fleet.poll()
                if respawned is None and fleet_worker_pids() - before:
                    respawned = time.time()
                if answered is None and fleet.record.data["workers"][name]["pid"] != worker["pid"]:
                    answered = time.time()
                if answered and all(newest_wall(fleet.out / c) > answered for c in worker["sources"]):
                    back = time.time()
            fleet_fps = written_fps(fleet.shutdown()["sources"])
        finally:
            fleet.close()
    respawned = respawned or answered
    return rows + [
        dict(name=f"fleet of 2 workers, {CAMERAS} cameras at {FPS} fps: written frames/s",
             ours_s=1 / fleet_fps, baseline="one process, the same cameras", baseline_s=1 / single_fps,
             note=f"peak RSS {fleet_mb:.0f} MB (workers) vs {single_mb:.0f} MB"),
        dict(name="fleet failover, worker SIGKILLed: to its cameras' next result", ours_s=back - killed,
             baseline="detection (Ray starts a new process)", baseline_s=respawned - killed,
             note=f"model load {answered - respawned:.1f} s, reconnect {back - answered:.1f} s"),
    ]  # fmt: skip


def fleet_worker_pids() -> set[int]:
    """Processes Ray titled as fleet workers on this machine (Ray sets the title when it starts an actor's
    constructor, before the models load)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(b"ray::FleetWorker"):
                pids.add(int(proc.name))
        except OSError:
            pass
    return pids


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(run())
