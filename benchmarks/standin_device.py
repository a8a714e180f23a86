"""How many cameras one GPU carries, proven at the device's pace on a CPU host (issues 61 and 72).

    python -m benchmarks.standin_device [--quick] [--scale 4] [--json benchmarks/results/standin_device.json]
    python -m benchmarks.standin_device --device cuda     # the same rows on a real device (benchmarks/gpu.sh)

The device is replaced by a stand-in that costs what the model costs (`benchmarks.standin`: `fixed + per_input x
inputs` per task, from the H200 figures, flip counted twice, `--scale` times slower); everything the host does is
real: decoding, detection (fixed boxes), tracking, smoothing, the part labels' steadying, drawing and encoding the
annotated video, the JSONL. Three kinds of row, each printed as one JSON object on its own line:

- **the matrix** (`1x720p-pose@1`): 1, 4 and 8 files (H.264), 720p and 1080p, pose and pose + seg, the annotated
  video and the JSONL written, policy block, at the H200's pace and `--scale` times slower. A row is
  `device_bound` where the device would run out first: its frames per second at full time (`device_capacity_fps`)
  below the host's at `HOST_FULL` of its cores and of its busiest thread (`host_capacity_fps`). Then it should be
  kept >= 90% busy; else the row is bound by the host and `host_cpu_ms_by_stage` says where the CPU went.
- **cameras per device** (`cameras-5`): 4 to 7 live cameras at 10 frames/s, 640x360, two rendered people each,
  pose 0.4b (flip off) at the H200's pace; each camera's results/s, frame age, drops, and `cameras_served` (at
  least 95% of its frames, frame age p95 <= 0.5 s).
- **`webcam_matting`**: pipelines/webcam_matting.yaml on a 30 fps 720p camera, the matting model costed as 1b.

`--device cpu|cuda` runs the same rows on that device's real engine, no stand-in (a GPU: 0.4b-shaped random
models; the CPU: the tiny ones, a dry run of the rows' code). `--quick` runs every row shorter (under 5 minutes
on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks.standin import StandInDevice, TaskCost, ThreadClock, TimedEngine
from sapiens2_stream.config import from_dict, parse_yaml
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.models import make_tiny_checkpoints
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig

HOST_FULL = 0.85  # a host using this share of its cores, or a thread this share of the time, has no room left:
# the row is bound by the host
MATRIX_FRAMES = 60  # frames per source of the matrix rows (the files' length)
RESOLUTIONS = {"720p": (720, 1280), "1080p": (1080, 1920)}
CAMERA_FPS, CAMERA_SIZE = 10, (360, 640)
SERVED_SHARE, SERVED_AGE_S = 0.95, 0.5  # a camera served: this share of its frames, frame age p95 within this
WARM_S = 2.0  # a live row's rates are counted after its first seconds (models loaded, the first batches
# captured; 1 s on a CPU dry run)
WEBCAM = Path(__file__).parents[1] / "pipelines" / "webcam_matting.yaml"


@dataclass
class Bench:
    """What every row shares: the models' folders, the device (None: the stand-in), how long rows run."""

    work: Path
    models: dict[str, Path]
    device: str | None
    quick: bool
    clip: Path = field(init=False)

    def __post_init__(self) -> None:
        self.clip = self.work / "people-10fps.mp4"  # two rendered people, looped by the cameras
        make_clip(self.clip, frames=40, size=CAMERA_SIZE, fps=CAMERA_FPS, people=2)
        self.files = {res: self.work / f"test-{res}.mp4" for res in RESOLUTIONS}  # H.264, as cameras record
        for res, (h, w) in RESOLUTIONS.items():
            encode_test_pattern(self.files[res], w, h, MATRIX_FRAMES)


def encode_test_pattern(path: Path, width: int, height: int, frames: int) -> None:
    """FFmpeg's moving test pattern as an H.264 file (x264, a keyframe a second), so that the matrix's sources
    are decoded as a camera's recording is (a lavfi source would cost generating the pattern instead)."""
    import av

    with av.open(f"testsrc2=size={width}x{height}:rate=30", format="lavfi") as pattern, av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=30, options={"preset": "veryfast", "g": "30"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        for i, frame in enumerate(pattern.decode(video=0)):
            if i == frames:
                break
            out.mux(video.encode(frame.reformat(format="yuv420p")))
        out.mux(video.encode(None))


def two_boxes(height: int, width: int) -> list[list[float]]:
    return [[width * 0.2, height * 0.2, width * 0.15, height * 0.6], [width * 0.6, height * 0.2, width * 0.15,
                                                                      height * 0.6]]  # fmt: skip


def matrix_config(bench: Bench, sources: int, res: str, tasks: tuple[str, ...], frames: int,
                  out: Path) -> PipelineConfig:  # fmt: skip
    h, w = RESOLUTIONS[res]
    return from_dict(PipelineConfig, {
        "sources": [{"name": f"cam{i}", "uri": str(bench.files[res]), "max_frames": frames}
                    for i in range(sources)],
        "detector": {"type": "fixed", "boxes": two_boxes(h, w)},
        "models": {t: {"source": str(bench.models[t]), "flip": "off"} | small(bench) for t in tasks},
        "runtime": {"device": bench.device or "cpu", "policy": "block", "compile": "off"},
        "outputs": {"dir": str(out)},
    })  # fmt: skip


def small(bench: Bench) -> dict:
    """The tiny models run at a small input (the stand-in costs the real one's); a real device runs its own."""
    return {"input_size": [256, 192]} if bench.device != "cuda" else {}


def camera_config(bench: Bench, cameras: int, out: Path) -> PipelineConfig:
    h, w = CAMERA_SIZE
    uri = f"lavfi:movie=filename={bench.clip}:loop=0,setpts=N/({CAMERA_FPS}*TB),realtime"
    return from_dict(PipelineConfig, {
        "sources": [{"name": f"cam{i}", "uri": uri} for i in range(cameras)],
        "detector": {"type": "fixed", "boxes": [[0, 72, 80, 216], [560, 90, 80, 216]]},
        "models": {"pose": {"source": str(bench.models["pose"]), "flip": "off"} | small(bench)},
        "runtime": {"device": bench.device or "cpu", "compile": "off"},
        "outputs": {"dir": str(out)},
    })  # fmt: skip


def webcam_config(bench: Bench, out: Path) -> PipelineConfig:
    spec = parse_yaml(WEBCAM.read_text(), str(WEBCAM))
    spec["source"] = {"uri": "lavfi:testsrc2=size=1280x720:rate=30,realtime"}
    spec["models"]["matting"] |= {"source": str(bench.models["matting"])} | small(bench)
    spec["runtime"]["device"] = bench.device or "cpu"
    spec["runtime"]["compile"] = "off"
    spec["outputs"] |= {"dir": str(out), "display": False}
    return from_dict(PipelineConfig, spec)


def measure(bench: Bench, cfg: PipelineConfig, costs: dict[str, TaskCost], scale: float,
            seconds: float | None = None, warm_s: float = 0.0) -> dict:  # fmt: skip
    """Run one configuration (live ones stopped after `seconds`, their rates counted after `warm_s`) on the
    stand-in (or the real device): the run's figures, the device's busy share and the host's CPU by what it did."""
    pipeline = Pipeline(cfg)
    device = TimedEngine(pipeline.engine) if bench.device else StandInDevice(pipeline.engine, costs, scale)
    pipeline.engine.run = device
    counts: list[tuple[float, list[int], list[int]]] = []  # (time, written, frames in) per source, warm and at the end

    def count() -> None:
        counts.append((time.perf_counter(), [s.numbers.written for s in pipeline.streams],
                       [s.numbers.stats.frames for s in pipeline.streams]))  # fmt: skip

    if seconds is not None:
        threading.Timer(warm_s, count).start()
        threading.Timer(seconds, lambda: (count(), pipeline.request_stop())).start()
    with ThreadClock() as clock:
        wall = time.perf_counter()
        summary = pipeline.run()
        wall = time.perf_counter() - wall - device.capture_s
    cpu = clock.by_role(ROLES)
    cpu["device"] = max(0.0, cpu.get("device", 0.0) - device.capture_cpu_s)  # a stand-in's captures: not the host's
    sources = list(summary["sources"].values())
    frames = sum(s["frames_out"] for s in sources)
    host_cpu = sum(v for k, v in cpu.items() if k not in ("device", "bench"))
    cores = len(os.sched_getaffinity(0))
    host_share = host_cpu / (wall * cores)
    busiest, busiest_share = clock.busiest(wall, ("sapiens2-device", "thread-clock"))
    # which would run out first: the device at full time, or the host with its cores (and its busiest thread) at
    # HOST_FULL, each in frames per second of this row's work
    device_fps = frames / sum(device.busy) if device.busy else float("inf")
    host_fps = HOST_FULL * frames / wall / max(host_share, busiest_share, 1e-9)
    row = {
        "device_bound": bool(device_fps < host_fps), "device_capacity_fps": round(device_fps, 1),
        "host_capacity_fps": round(host_fps, 1),
        "device_busy_share": None, "device_busy_share_whole_run": None,
        "host_cpu_share": round(host_share, 3), "busiest_thread": busiest,
        "busiest_thread_share": round(busiest_share, 3),
        "written_fps": round(frames / wall, 1),
        "frame_age_p50_s": round(max(s["frame_age_ms"]["p50"] for s in sources) / 1e3, 3),
        "frame_age_p95_s": round(max(s["frame_age_ms"]["p95"] for s in sources) / 1e3, 3),
        "host_cpu_ms_per_frame": round(1e3 * host_cpu / max(frames, 1), 1),
        "host_cpu_ms_by_stage": by_stage(cpu, sources, frames), "frames_written": frames,
        "dropped": sum(sum(s["dropped"].values()) for s in sources), "seconds": round(wall, 1),
        "summary_sources": sources,
    }  # fmt: skip
    if device.window:  # busy while the device had work (from its first batch to its last), and over the run
        row["device_busy_share"] = round(device.share(), 3)
        row["device_busy_share_whole_run"] = round(sum(device.busy) / wall, 3)
    if len(counts) == 2:  # live: each source's results/s and frames in/s after the warm-up
        (t0, w0, in0), (t1, w1, in1) = counts
        row["steady_results_per_s"] = [round((b - a) / (t1 - t0), 2) for a, b in zip(w0, w1, strict=True)]
        row["steady_frames_in_per_s"] = [round((b - a) / (t1 - t0), 2) for a, b in zip(in0, in1, strict=True)]
    return row


def stream_role(name: str) -> str:
    """A source's two threads: its reader (the first its pool starts, decoding) and its writer."""
    return "decode" if name.endswith("_0") else "writer"


ROLES = {"stream-": stream_role, "sapiens2-detect": "detect", "sapiens2-device": "device", "video-encoder": "encode",
         "MainThread": "loop", "thread-clock": "bench"}  # fmt: skip


def by_stage(cpu: dict[str, float], sources: list[dict], frames: int) -> dict[str, float]:
    """CPU-ms per written frame of each part of the host's work: decode (the readers), detect (the detector's
    thread: here fixed boxes, so its preparation), loop (take, track, hand-offs), each source stage (the writers'
    CPU split by the stages' times: temporal, smooth, write = drawing and JSON), encode (x264 and FFmpeg's threads:
    the encoder's and the native ones)."""
    ms = {k: 1e3 * v / max(frames, 1) for k, v in cpu.items() if k not in ("device", "bench")}
    writer = ms.pop("writer", 0.0)
    stage_ms: dict[str, float] = {}
    for s in sources:
        for stage, t in s["stage_ms_per_frame"].items():
            stage_ms[stage] = stage_ms.get(stage, 0.0) + t["p50"]
    total = sum(stage_ms.values()) or 1.0
    out = {k: v for k, v in ms.items() if k not in ("native", "encode")}
    out |= {stage: writer * t / total for stage, t in stage_ms.items()}
    out["encode"] = ms.get("encode", 0.0) + ms.get("native", 0.0)
    return {k: round(v, 2) for k, v in out.items()}


def matrix_rows(bench: Bench, scales: list[float]) -> list[dict]:
    rows = []
    for scale in scales:
        for sources in (1, 4, 8):
            for res in RESOLUTIONS:
                for tasks in (("pose",), ("pose", "seg")):
                    frames = (20 if bench.quick else 40) if scale > 1 else (20 if bench.quick else MATRIX_FRAMES)
                    frames = 2 if bench.device == "cpu" else frames
                    name = f"{sources}x{res}-{'+'.join(tasks)}@{scale:g}"
                    out = bench.work / name
                    cfg = matrix_config(bench, sources, res, tasks, frames, out)
                    row = {"row": name, "sources": sources, "resolution": res, "tasks": list(tasks), "scale": scale}
                    row |= measure(bench, cfg, {t: TaskCost("0.4b") for t in tasks}, scale)
                    rows.append(emit(row))
    return rows


def camera_rows(bench: Bench) -> list[dict]:
    rows = []
    for cameras in (4, 5, 6, 7):
        seconds = 2.5 if bench.device == "cpu" else (8.0 if bench.quick else 20.0)
        cfg = camera_config(bench, cameras, bench.work / f"cameras-{cameras}")
        row = {"row": f"cameras-{cameras}", "cameras": cameras, "asked_results_per_s": CAMERA_FPS}
        row |= measure(bench, cfg, {"pose": TaskCost("0.4b")}, 1.0, seconds, warm_s=warm(bench))
        per = row.pop("steady_results_per_s")
        ages = [s["frame_age_ms"]["p95"] / 1e3 for s in row["summary_sources"]]
        served = [r >= SERVED_SHARE * CAMERA_FPS and a <= SERVED_AGE_S for r, a in zip(per, ages, strict=True)]
        mean = sum(per) / len(per)
        row |= {"results_per_s": per, "frame_age_p95_s_per_camera": [round(a, 3) for a in ages],
                "cameras_served": sum(served), "fairness_max_off_mean": round(max(abs(r / mean - 1) for r in per), 3),
                "served_share": [s.get("served_share") for s in row["summary_sources"]]}  # fmt: skip
        rows.append(emit(row))
    return rows


def warm(bench: Bench) -> float:
    return 1.0 if bench.device == "cpu" else WARM_S


def webcam_row(bench: Bench) -> dict:
    seconds = 2.5 if bench.device == "cpu" else (8.0 if bench.quick else 15.0)
    cfg = webcam_config(bench, bench.work / "webcam_matting")
    row = {"row": "webcam_matting", "matting": "1b", "camera_fps": 30, "resolution": "720p"}
    row |= measure(bench, cfg, {"matting": TaskCost("1b")}, 1.0, seconds, warm_s=warm(bench))
    row["written_fps_after_warm_up"] = row.pop("steady_results_per_s")[0]
    return emit(row)


def host_parts(bench: Bench) -> dict:
    """The host's parts a matrix row does not tell apart, per 1080p frame with two people of 308 keypoints, each
    timed alone (median of 30): drawing the annotated picture (boxes, skeletons), the JSONL record (built and
    serialised), and a person detector's preparation (YOLO's letterbox to 640, ultralytics' own)."""
    import numpy as np

    from sapiens2_stream.io.records import jsonl_record
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.io.video_sinks import annotate
    from sapiens2_stream.runtime.results import FrameResult, Person

    rng = np.random.default_rng(0)
    h, w = RESOLUTIONS["1080p"]
    rgb = rng.integers(0, 255, (h, w, 3), np.uint8)
    people = []
    for i, (x, y, bw, bh) in enumerate(two_boxes(h, w)):
        kp = np.column_stack([rng.uniform(x, x + bw, 308), rng.uniform(y, y + bh, 308)]).astype(np.float32)
        people.append(Person(i + 1, np.array([x, y, bw, bh], np.float32), 0.9, kp, rng.uniform(0.2, 1, 308)))
    result = FrameResult(Frame(0, 0.0, time.time(), rgb), people)

    def median_ms(fn) -> float:
        times = []
        for _ in range(30):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return round(1e3 * sorted(times)[len(times) // 2], 2)

    row = {
        "row": "host_parts_1080p",
        "draw_ms": median_ms(lambda: annotate(result, ["pose", "boxes"], 0.3)),
        "jsonl_ms": median_ms(lambda: json.dumps(jsonl_record(result, "cam0", {"pose": "sapiens2-pose"}))),
    }
    try:
        from ultralytics.data.augment import LetterBox

        box = LetterBox((640, 640), auto=False)
        row["detector_preparation_ms"] = median_ms(lambda: box(image=rgb))
    except ImportError:
        row["detector_preparation_ms"] = None
    return emit(row)


def emit(row: dict) -> dict:
    """One row as one JSON line (without the sources' whole summaries)."""
    row = {k: v for k, v in row.items() if k != "summary_sources"}
    print(json.dumps(row), flush=True)
    return row


def models_for(work: Path, device: str | None) -> dict[str, Path]:
    """The models the rows load: tiny ones (the stand-in costs the real ones; a CPU dry run), or 0.4b-shaped
    random ones on a real GPU (the matting one 0.4b too: a 1b checkpoint is too large to write in the time)."""
    if device != "cuda":
        return make_tiny_checkpoints(work / "tiny", ("pose", "seg", "matting"))
    from sapiens2_stream.models import preset
    from sapiens2_stream.models.tiny import random_model, save_released

    folders = {}
    for task in ("pose", "seg", "matting"):
        folders[task] = work / f"{task}-0.4b"
        save_released(random_model(preset(task, "0.4b"), seed=0), folders[task], f"sapiens2_{task}")
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every row shorter (under 5 minutes on 2 cores)")
    parser.add_argument("--scale", type=float, default=4.0, help="the matrix again this many times slower")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="the real engine on this device, no stand-in")
    parser.add_argument("--rows", default="matrix,cameras,webcam,parts", help="which kinds of row (comma-separated)")
    parser.add_argument("--json", help="write every row here too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    kinds = set(args.rows.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), models_for(Path(tmp), args.device), args.device, args.quick)
        rows = []
        if "matrix" in kinds:
            rows += matrix_rows(bench, [1.0] if args.device else [1.0, args.scale])
        if "cameras" in kinds:
            rows += camera_rows(bench)
        if "webcam" in kinds:
            rows.append(webcam_row(bench))
        if "parts" in kinds:
            rows.append(host_parts(bench))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "device": args.device or "stand-in (H200 figures)", "scale": args.scale, "quick": args.quick,
            "host_cores": len(os.sched_getaffinity(0)), "cpu": cpu_name(), "rows": rows}, indent=1) + "\n")  # fmt: skip


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
