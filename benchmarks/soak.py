"""Soak: does a live run stay flat over hours? `python -m benchmarks.soak --minutes 60 [--every-stage] [--out DIR]`

Two camera-paced sources (`lavfi:testsrc2`, 320x240, 10 frames/s), the tiny pose model, full-frame detection,
annotated videos rolled into 60 s segments with retention (segments older than three minutes deleted), the console
with one live-view viewer reading all the time and a snapshot every 10 s, /metrics scraped every 10 s, and MQTT when
a `mosquitto` binary is on this machine. `--every-stage` adds the tiny pointmap model, so the 3-D stage runs (people
in metres, their per-track rows for the TRC / C3D / BVH files), and events (a zone, a line, falls, lying, hands up).
Every `--every` seconds it samples the process's resident memory, Python's
allocated blocks, threads, open files and the frames written; it writes `soak.csv` and `soak.png` (memory, threads
and rate over time) and prints the slope of each over the second half (per hour).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

CAMERA = "lavfi:testsrc2=size=320x240:rate=10,realtime"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(work: Path) -> tuple[subprocess.Popen | None, int | None]:
    binary = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    if binary is None:
        return None, None
    port = free_port()
    conf = work / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    return subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port


def viewer(url: str, stop: threading.Event) -> None:
    """A browser-like live-view client that reads every fragment, reconnecting when the stream restarts."""
    from websockets.sync.client import connect

    while not stop.is_set():
        try:
            with connect(url, open_timeout=10) as ws:
                while not stop.is_set():
                    ws.recv(timeout=10)
        except Exception:
            time.sleep(1)


EVENTS = {"zones": {"left": {"polygon": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "anchor": "center"}},
          "lines": {"middle": {"points": [[0.5, 0], [0.5, 1]], "anchor": "center"}},
          "poses": {"fall": True, "lying": True, "hands_up": True}}  # fmt: skip


def soak(minutes: float, out: Path, every_s: float, every_stage: bool = False) -> dict:
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.console.pipeline_backend import PipelineConsole
    from sapiens2_stream.models import make_tiny_checkpoints
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    broker, mqtt_port = start_broker(work)
    console, metrics = free_port(), free_port()
    tiny = make_tiny_checkpoints(work / "tiny", ("pose", "pointmap"))
    models = {"pose": {"source": str(tiny["pose"]), "input_size": [128, 96], "flip": "off"}}
    if every_stage:
        models["pointmap"] = {"source": str(tiny["pointmap"]), "input_size": [96, 128], "flip": "off"}
    cfg = from_dict(PipelineConfig, {
        "sources": [{"name": f"cam{i}", "uri": CAMERA} for i in (1, 2)],
        "detector": {"type": "full_frame"},
        "models": models,
        **({"events": EVENTS, "threed": {"enabled": True}} if every_stage else {}),
        "outputs": {"dir": str(work / "run"), "segment_s": 60, "retention": {"max_age_h": 0.05},
                    **({"mqtt": {"host": "127.0.0.1", "port": mqtt_port}} if mqtt_port else {})},
        "runtime": {"device": "cpu", "threads": 1, "console": {"port": console}, "metrics": {"port": metrics}},
    })  # fmt: skip
    pipeline = Pipeline(cfg, serve=True)
    pipeline.observe(PipelineConsole(pipeline))
    runner = threading.Thread(target=pipeline.run, name="soak-run")
    runner.start()
    stop = threading.Event()
    threading.Thread(target=viewer, args=(f"ws://127.0.0.1:{console}/api/v1/sources/cam1/live.mp4", stop),
                     name="soak-viewer", daemon=True).start()  # fmt: skip
    rows, start, last_poke = [], time.time(), 0.0
    out.mkdir(parents=True, exist_ok=True)
    try:
        while (elapsed := time.time() - start) < minutes * 60:
            if elapsed - last_poke >= 10:
                last_poke = elapsed
                for url in (f"http://127.0.0.1:{console}/api/v1/sources/cam2/snapshot.jpg",
                            f"http://127.0.0.1:{metrics}/metrics"):  # fmt: skip
                    try:
                        urllib.request.urlopen(url, timeout=10).read()
                    except OSError:
                        pass
            rows.append({
                "minutes": round(elapsed / 60, 3), "rss_mb": round(rss_mb(), 1),
                "python_blocks": sys.getallocatedblocks(), "threads": len(os.listdir("/proc/self/task")),
                "open_files": len(os.listdir("/proc/self/fd")),
                "written": sum(s.numbers.written for s in pipeline.streams),
            })  # fmt: skip
            print(" ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
            time.sleep(every_s)
    finally:
        stop.set()
        pipeline.request_stop()
        runner.join(120)
        if broker is not None:
            broker.terminate()
    with open(out / "soak.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report = {**slopes(rows), "stages": "pose, 3-D, events" if every_stage else "pose"}
    plot(rows, out / "soak.png", report)
    shutil.rmtree(work, ignore_errors=True)
    return report


def slopes(rows: list[dict]) -> dict:
    """Per hour over the second half: the fitted slope of memory, blocks, threads and files, and the written rate's
    mean and spread (frames/s between samples)."""
    half = [r for r in rows if r["minutes"] >= rows[-1]["minutes"] / 2]
    hours = np.array([r["minutes"] / 60 for r in half])
    fit = {k: float(np.polyfit(hours, [r[k] for r in half], 1)[0]) for k in ("rss_mb", "python_blocks", "threads",
                                                                           "open_files")}  # fmt: skip
    t = np.array([r["minutes"] * 60 for r in half])
    rate = np.diff([r["written"] for r in half]) / np.diff(t)
    return {"minutes": rows[-1]["minutes"], **{f"{k}_per_hour": round(v, 2) for k, v in fit.items()},
            "threads_range": [min(r["threads"] for r in half), max(r["threads"] for r in half)],
            "open_files_range": [min(r["open_files"] for r in half), max(r["open_files"] for r in half)],
            "written_fps_mean": round(float(rate.mean()), 2),
            "written_fps_std": round(float(rate.std()), 2)}  # fmt: skip


def plot(rows: list[dict], path: Path, report: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [r["minutes"] for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(minutes, [r["rss_mb"] for r in rows])
    axes[0].set_ylabel("resident memory (MB)")
    axes[0].set_title(f"soak: 2 live cameras ({report['stages']}), console, metrics, segments\nresident memory "
                      f"slope {report['rss_mb_per_hour']} MB/h over the second half")  # fmt: skip
    axes[1].plot(minutes, [r["threads"] for r in rows], label="threads")
    axes[1].plot(minutes, [r["open_files"] for r in rows], label="open files")
    axes[1].legend()
    axes[1].set_ylabel("count")
    t = np.array(minutes) * 60
    axes[2].plot(minutes[1:], np.diff([r["written"] for r in rows]) / np.diff(t))
    axes[2].set_ylabel("written frames/s")
    axes[2].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--out", default="benchmarks/results/soak")
    parser.add_argument("--every-stage", action="store_true", help="also the 3-D stage and events")
    args = parser.parse_args()
    print(soak(args.minutes, Path(args.out), args.every, args.every_stage))


if __name__ == "__main__":
    main()
