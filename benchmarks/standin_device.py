"""Does the pipeline keep a device busy? The device replaced by a stand-in of fixed latency per batch, proven on
the CPU (issue 61, item 1).

On a GPU, everything `InferenceEngine.run` does happens on the device (crops, forwards, flip, heatmap decoding,
the part labels upsampled to the frame) and the host waits for its results. The stand-in takes the place of that
call on the engine's device thread: it waits `LATENCY_S` per micro-batch without holding the GIL (as waiting on a
synchronise does) and returns the results the real engine gives, of the same shapes and dtypes (keypoints, scores,
part labels at the frame's size: captured from one real run per resolution, then copied). Everything the host does
is real: decoding, detection (fixed boxes), tracking, smoothing, drawing the annotated video, encoding it, JSON.

Measured per row (sources, resolution): the device's busy share (time inside the stand-in over the run's wall
time), the host's CPU time per frame and per person (the process's user + system time, all threads, over frames
written) and frames written per second. A device kept busy is >= 90%; where it is not, the host is the bottleneck
and `host_fps_per_core` (1000 / CPU-ms per frame) says what each host core feeds.

Sources are lavfi test patterns (decoded as a camera's frames are), pose and seg, two people per frame, the
annotated video and the JSONL written, policy block (nothing dropped).

Run: `python -m benchmarks.standin_device` (about 4 minutes on 2 cores); results in
benchmarks/results/standin_device.json.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from sapiens2_stream.config import from_dict
from sapiens2_stream.models import make_tiny_checkpoints
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig
from sapiens2_stream.runtime.results import FrameResult

LATENCY_S = 0.040  # per micro-batch: about a 0.4b pose + seg batch of a few frames' people on an H100
FRAMES = 60
ROWS = [(1, (720, 1280)), (4, (720, 1280)), (1, (1080, 1920)), (4, (1080, 1920)), (8, (720, 1280))]
RESULTS = Path(__file__).parent / "results" / "standin_device.json"


class StandInDevice:
    """`InferenceEngine.run` replaced: waits `latency_s` per micro-batch (GIL released) and gives each frame and
    person what the real engine gave for a frame of that size (captured once per size, copied after)."""

    def __init__(self, engine, latency_s: float) -> None:
        self.real, self.latency_s = engine.run, latency_s
        self.busy: list[float] = []
        self.captured: dict[tuple, tuple[dict, dict]] = {}  # frame shape -> (frame outputs, a person's outputs)
        self.capture_s, self.capture_cpu_s = 0.0, 0.0  # the real engine's time on the captures: not the host's

    def __call__(self, frames: list, people: list, under_load: bool = False) -> list:
        shape = frames[0].rgb.shape
        if shape not in self.captured:  # once per size, the real engine (not counted as device time)
            before = {k: v for k, v in vars(people[0][0]).items()}
            wall, cpu = time.perf_counter(), time.thread_time()
            result = self.real(frames[:1], people[:1], under_load)[0]
            self.capture_s += time.perf_counter() - wall
            self.capture_cpu_s += time.thread_time() - cpu
            person = {k: v for k, v in vars(people[0][0]).items() if v is not before.get(k)}
            blank = FrameResult(result.frame, [])
            frame = {k: v for k, v in vars(result).items() if k not in ("frame", "people") and v is not None
                     and v is not getattr(blank, k, None) and not isinstance(v, list)}  # fmt: skip
            self.captured[shape] = plausible(frame, people[0], shape), person
            return [result, *self(frames[1:], people[1:], under_load)] if len(frames) > 1 else [result]
        start = time.perf_counter()
        time.sleep(self.latency_s)  # releases the GIL, as waiting on the device does
        frame_out, person_out = self.captured[shape]
        results = []
        for f, found in zip(frames, people, strict=True):
            result = FrameResult(f, found)
            for k, v in frame_out.items():
                setattr(result, k, copy.copy(v))
            for p in found:
                for k, v in person_out.items():
                    setattr(p, k, v.copy() if isinstance(v, np.ndarray) else copy.copy(v))
            results.append(result)
        self.busy.append(time.perf_counter() - start)
        return results


def plausible(frame: dict, people: list, shape: tuple) -> dict:
    """A tiny random model's part labels are noise: a boundary at every pixel, which no trained model gives and
    which sends the part labels' steadying down its slowest path. In their place: labels of the same shape and
    dtype with a trained model's layout, background around each person and two parts inside (upper, lower body),
    and class probabilities at the engine's small width that agree."""
    if "seg" not in frame:
        return frame
    labels = np.zeros(shape[:2], np.uint8)
    for p in people:
        x, y, w, h = (int(v) for v in p.box)
        labels[y : y + h // 2, x : x + w], labels[y + h // 2 : y + h, x : x + w] = 22, 13  # torso, legs
    out = {**frame, "seg": labels}
    if frame.get("seg_probabilities") is not None:
        classes, h, w = frame["seg_probabilities"].shape
        small = cv2.resize(labels, (w, h), interpolation=cv2.INTER_NEAREST)
        probabilities = np.full((classes, h, w), 0.1 / (classes - 1), np.float32)
        np.put_along_axis(probabilities, small[None].astype(np.int64), 0.9, axis=0)
        out["seg_probabilities"] = probabilities.astype(frame["seg_probabilities"].dtype)
    return out


def config(work: Path, tiny: dict, sources: int, size: tuple[int, int]) -> PipelineConfig:
    h, w = size
    return from_dict(PipelineConfig, {
        "sources": [{"name": f"cam{i}", "uri": f"lavfi:testsrc2=size={w}x{h}:rate=30", "max_frames": FRAMES}
                    for i in range(sources)],
        "detector": {"type": "fixed", "boxes": [[w * 0.2, h * 0.2, w * 0.15, h * 0.6],
                                                [w * 0.6, h * 0.2, w * 0.15, h * 0.6]]},
        "models": {t: {"source": str(tiny[t]), "input_size": [256, 192], "flip": "off"} for t in ("pose", "seg")},
        "runtime": {"device": "cpu", "policy": "block", "compile": "off"},
        "outputs": {"dir": str(work / f"out-{sources}-{h}")},
    })  # fmt: skip


def measure(work: Path, tiny: dict, sources: int, size: tuple[int, int]) -> dict:
    pipeline = Pipeline(config(work, tiny, sources, size))
    device = StandInDevice(pipeline.engine, LATENCY_S)
    pipeline.engine.run = device
    busy = device.busy
    cpu_before, wall_before = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    summary = pipeline.run()
    wall = time.perf_counter() - wall_before - device.capture_s
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime) - device.capture_cpu_s
    frames = summary["totals"]["frames_out"]
    people = 2 * frames
    host_ms = 1000 * cpu / frames
    return {
        "sources": sources, "resolution": f"{size[1]}x{size[0]}", "frames_written": frames,
        "device_busy_share": round(sum(busy) / wall, 3), "forward_batches": len(busy),
        "written_fps": round(frames / wall, 1), "host_cpu_ms_per_frame": round(host_ms, 1),
        "host_cpu_ms_per_person": round(1000 * cpu / people, 1),
        "host_fps_per_core": round(1000 / host_ms, 1), "stage_ms_per_frame": summary["stage_ms_per_frame"],
        "source_stage_ms_per_frame": {k: v["p50"] for k, v in
                                      next(iter(summary["sources"].values()))["stage_ms_per_frame"].items()},
    }  # fmt: skip


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = make_tiny_checkpoints(work / "tiny")
        rows = []
        for sources, size in ROWS:
            row = measure(work, tiny, sources, size)
            print({k: v for k, v in row.items() if k != "stage_ms_per_frame"}, flush=True)
            rows.append(row)
    cores = len(os.sched_getaffinity(0))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"latency_s_per_batch": LATENCY_S, "frames_per_source": FRAMES,
                                   "host_cores": cores, "cpu": cpu_name(), "threads_at_end": threading.active_count(),
                                   "rows": rows}, indent=1) + "\n")  # fmt: skip


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
