"""Live input against the file rate of the same pipeline, measured in the same run (tiny random models; on the
CPU, or the GPU with SAPIENS2_BENCH_DEVICE=cuda).

- 3x too fast: a camera-paced source (`lavfi:testsrc2,realtime`) at three times the frames/s this machine
  processes the pipeline on a file: written frames/s over the file's frames/s (1.0 = every result the machine
  can compute is delivered), and the frame age at the sink. Rates are steady-state (first written frame to last),
  the file's the mean of a run before and one after the live runs (this host's speed drifts).
- keeps up: the same pipeline with the camera at half the file rate, and the live matting pipeline
  (`pipelines/webcam_matting.yaml`, 640x360 at 15 fps, the tiny model at 256x192, which this CPU runs at about
  25 frames/s): written frames/s over the camera's (1.0 = nothing dropped), and the frame age.

Run: `python -m benchmarks.live` (about 2.5 minutes).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.common import DEVICE, LIVE_S, steady_rate
from sapiens2_stream.config import from_dict
from sapiens2_stream.io.synthetic import record_lavfi
from sapiens2_stream.models import make_tiny_checkpoints
from sapiens2_stream.runtime.pipeline import Pipeline, load_models
from sapiens2_stream.runtime.pipeline_config import PipelineConfig, load_config

SIZE = "320x240"


def pose_seg(tiny: dict, uri: str, out: Path, frames: int) -> PipelineConfig:
    models = {m: {"source": str(tiny[m]), "input_size": [512, 384], "flip": "off"} for m in ("pose", "seg")}
    return from_dict(PipelineConfig, {
        "source": {"uri": uri, "max_frames": frames},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": models, "outputs": {"dir": str(out)}, "runtime": {"device": DEVICE},
    })  # fmt: skip


def age(source: dict) -> str:
    a = source["frame_age_ms"]
    return f"frame age p50 {a['p50']:.0f} ms, p95 {a['p95']:.0f} ms"


def row(name: str, written_fps: float, baseline: str, baseline_fps: float, summary: dict) -> dict:
    (source,) = summary["sources"].values()
    return dict(name=name, ours_s=1 / written_fps, baseline=baseline, baseline_s=1 / baseline_fps, note=age(source),
                frame_age_ms=source["frame_age_ms"], dropped=source["dropped"],
                live_batch_sizes=summary["live_batch_sizes"])  # fmt: skip


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = make_tiny_checkpoints(work / "tiny", ("pose", "seg", "matting"))
        record_lavfi(work / "rec.mp4", 36, 15)

        # one load for every pose+seg run: on a GPU the models' graphs are compiled once, not once per run
        loaded = load_models(pose_seg(tiny, str(work / "rec.mp4"), work / "unused", 1))

        def file_rate(label: str) -> float:  # measured before and after the live runs: this host's speed drifts
            return steady_rate(Pipeline(pose_seg(tiny, str(work / "rec.mp4"), work / label, 36), loaded=loaded))[1]

        before = file_rate("file-before")
        runs = {}
        for factor in (3.0, 0.5):
            fps = round(factor * before, 2)
            camera = f"lavfi:testsrc2=size={SIZE}:rate={fps},realtime"
            live = Pipeline(pose_seg(tiny, camera, work / f"live{factor}", int(fps * LIVE_S)), loaded=loaded)
            runs[factor] = (fps, *steady_rate(live))
        file_fps = (before + file_rate("file-after")) / 2
        loaded.close()
        fps, summary, written = runs[3.0]
        rows = [row(f"live pose+seg, camera 3x too fast ({fps} fps): written", written, "the same pipeline on a file",
                    file_fps, summary)]  # fmt: skip
        fps, summary, written = runs[0.5]
        rows.append(row(f"live pose+seg, camera keeps up ({fps} fps): written", written, "the camera's frames/s",
                        fps, summary))  # fmt: skip
        matting = load_config(
            Path(__file__).parent.parent / "pipelines" / "webcam_matting.yaml",
            [f"models.matting.source={tiny['matting']}", "models.matting.input_size=[256,192]", "outputs.display=false",
             f"outputs.dir={work / 'matting'}", f"source.max_frames={15 * LIVE_S}", f"runtime.device={DEVICE}"],
            source="lavfi:testsrc2=size=640x360:rate=15,realtime",
        )  # fmt: skip
        summary, written = steady_rate(Pipeline(matting))
        rows.append(row("live matting (webcam_matting.yaml), 640x360 at 15 fps: written", written,
                        "the camera's frames/s", 15.0, summary))  # fmt: skip
        return rows


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(run())
