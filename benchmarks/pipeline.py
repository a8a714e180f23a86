"""End to end: our pipeline against a naive per-frame loop written from the documented transformers usage
(processor -> model, and again on the mirrored crops with flip_pairs -> post_process_pose_estimation, frame by
frame), with the same clip, detector, tracker, smoother and sinks. Tiny random pose model, CPU.

Run: `python -m benchmarks.pipeline`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import av
import numpy as np
import torch

from sapiens2_stream.config import from_dict
from sapiens2_stream.detect import make_detector
from sapiens2_stream.io.outputs import SinkSetup, make_sinks
from sapiens2_stream.io.sources import Frame, Source
from sapiens2_stream.io.synthetic import figure_box, make_clip
from sapiens2_stream.io.video_feed import VideoFeed
from sapiens2_stream.models import pose_metadata
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig
from sapiens2_stream.runtime.results import FrameResult, Person
from sapiens2_stream.runtime.stages.context import source_context
from sapiens2_stream.runtime.stages.write import sink_inputs
from sapiens2_stream.track import OnlineSmoother, Tracker

FRAMES, SIZE, PEOPLE = 8, (240, 320), 2
TINY = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
            num_key_value_attention_heads=2, num_first_full_attention_layers=1, num_last_full_attention_layers=1,
            head_config=dict(upsample_out_channels=[32, 32], conv_out_channels=[32]), num_labels=308)  # fmt: skip


def setup(work: Path) -> tuple[Path, Path, list]:
    import transformers

    clip = work / "clip.mp4"
    make_clip(clip, frames=FRAMES, size=SIZE, people=PEOPLE)
    torch.manual_seed(0)
    model_dir = work / "pose"
    transformers.Sapiens2ForPoseEstimation(transformers.Sapiens2Config(**TINY)).save_pretrained(model_dir)
    boxes = [figure_box(FRAMES // 2, FRAMES, SIZE, p).tolist() for p in range(PEOPLE)]
    return clip, model_dir, boxes


def config(clip: Path, model_dir: Path, boxes: list, out: Path, dtype: str) -> PipelineConfig:
    return from_dict(PipelineConfig, {
        "source": {"uri": str(clip)}, "detector": {"type": "fixed", "boxes": boxes},
        "models": {"pose": {"source": str(model_dir), "flip": "on"}},
        "runtime": {"dtype": dtype, "device": "cpu"}, "outputs": {"dir": str(out)},
    })  # fmt: skip


def naive_loop(cfg: PipelineConfig) -> float:
    from transformers import Sapiens2ForPoseEstimation, Sapiens2ImageProcessor

    start = time.perf_counter()
    processor = Sapiens2ImageProcessor()
    model = Sapiens2ForPoseEstimation.from_pretrained(cfg.models.pose.source).eval()
    pairs = torch.tensor(pose_metadata().flip_pairs)
    detector, tracker, smoother = make_detector(cfg.detector), Tracker(cfg.tracker), OnlineSmoother()
    sinks = make_sinks(cfg.outputs, sink_inputs(source_context(cfg)), Source(cfg.source),
                       SinkSetup(VideoFeed(), on_quit=lambda: None))  # fmt: skip
    with av.open(cfg.source.uri) as container:
        for index, vf in enumerate(container.decode(video=0)):
            frame = Frame(index, float(vf.time), time.time(), vf.to_ndarray(format="rgb24"))
            tracked = tracker.update(detector.detect([frame.rgb])[0], frame.pts_s)
            boxes = [[b.tolist() for _, b, _ in tracked]]
            inputs = processor(frame.rgb, boxes=boxes, return_tensors="pt")
            with torch.inference_mode():
                out = model(**inputs)
                flipped = model(inputs["pixel_values"].flip(-1), flip_pairs=pairs)
            people = processor.post_process_pose_estimation(out, boxes=boxes, outputs_flipped=flipped)[0]
            result = FrameResult(frame, [
                Person(tid, box, score, p["keypoints"].numpy(), p["scores"].numpy())
                for (tid, box, score), p in zip(tracked, people, strict=True)
            ], flip={"pose": True})  # fmt: skip
            for p in result.people:
                p.smoothed = smoother(p.track_id, frame.pts_s, p.keypoints, p.keypoint_scores)
            for sink in sinks:
                sink.write(result)
    for sink in sinks:
        sink.close()
    return FRAMES / (time.perf_counter() - start)


def ours(cfg: PipelineConfig) -> float:
    start = time.perf_counter()
    Pipeline(cfg).run()
    return FRAMES / (time.perf_counter() - start)


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clip, model_dir, boxes = setup(work)
        naive_fps = naive_loop(config(clip, model_dir, boxes, work / "naive", "fp32"))
        rows = []
        for dtype in ("fp32", "auto"):
            fps = ours(config(clip, model_dir, boxes, work / f"ours-{dtype}", dtype))
            rows.append(dict(
                name=f"pipeline {FRAMES} frames x {PEOPLE} people, flip, dtype {dtype}",
                ours_s=1 / fps, baseline="naive transformers loop (fp32), per frame", baseline_s=1 / naive_fps,
            ))  # fmt: skip
        outputs = [np.array([len(line) for line in (work / d / "results.jsonl").read_text().splitlines()])
                   for d in ("naive", "ours-fp32")]  # fmt: skip
        assert len(outputs[0]) == len(outputs[1]) == FRAMES
        return rows


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(run())
