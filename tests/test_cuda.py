"""The GPU path on a real GPU: pinned staging reused across batches, bf16 and CUDA streams against the CPU,
compiled CUDA graphs against eager on chunked and split batches, and a whole pipeline run. Skipped where no CUDA
device exists (this project's CI machines); `bash benchmarks/gpu.sh` runs them first on a machine with one."""

import numpy as np
import pytest
import torch

from sapiens2_stream.io.sources import Frame
from sapiens2_stream.runtime.device import CudaTransfers
from sapiens2_stream.runtime.engine import InferenceEngine
from sapiens2_stream.runtime.options import ModelSection
from sapiens2_stream.runtime.results import Person
from tests.test_engine import ReplayingModel, assert_same_people

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (benchmarks/gpu.sh)"),
]

CUDA = torch.device("cuda")


def frames_and_people(n=5, people=2, seed=0):
    rng = np.random.default_rng(seed)
    frames = [Frame(i, i / 30, 0.0, rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)) for i in range(n)]
    return frames, lambda: [[Person(j, np.array([30.0 + 120 * j, 20, 80, 180]), 1.0) for j in range(people)]
                            for _ in frames]  # fmt: skip


def test_uploads_and_copies_back_reuse_pinned_buffers():
    transfers = CudaTransfers(CUDA, ["pose"])
    kept_batches = []
    for batch in range(3):
        frames, _ = frames_and_people(seed=batch)  # each batch its own pictures, in the same buffers
        images = [f.rgb for f in frames]
        uploaded = transfers.upload(images)
        back = [transfers.to_host(t * 1) for t in uploaded]
        transfers.synchronize()
        kept = [transfers.keep(t).numpy() for t in back]
        kept_batches.append((images, kept))
        if batch == 0:
            pinned = transfers.pool.pinned_bytes
        assert transfers.pool.pinned_bytes == pinned  # no new page-locked memory after the first batch
    for images, kept in kept_batches:  # what was kept outlives the staging buffers' reuse by later batches
        assert all(np.array_equal(a, b) for a, b in zip(images, kept, strict=True))
    assert transfers.upload(images[:1])[0].is_cuda


def test_cuda_bf16_engine_agrees_with_the_cpu(tiny_dir):
    cfg = {"pose": ModelSection(str(tiny_dir["pose"]), input_size=[256, 192], max_batch=4),
           "seg": ModelSection(str(tiny_dir["seg"]), input_size=[256, 192], max_batch=2),
           "matting": ModelSection(str(tiny_dir["matting"]), input_size=[256, 192], max_batch=2)}  # fmt: skip
    frames, people = frames_and_people()
    cpu = InferenceEngine(cfg, torch.device("cpu"), torch.float32).run(frames, people())
    gpu = InferenceEngine(cfg, CUDA, torch.bfloat16).run(frames, people())
    for a, b in zip(cpu, gpu, strict=True):
        scores = np.concatenate([p.keypoint_scores for p in a.people])
        assert np.abs(scores - np.concatenate([p.keypoint_scores for p in b.people])).max() < 0.05 * scores.max()
        assert (a.seg == b.seg).mean() > 0.9
        assert np.abs(a.alpha - b.alpha).mean() < 0.02


@pytest.fixture(autouse=True)
def exact_fp32_convolutions(monkeypatch):
    """These tests compare fp32 runs that differ only in batching or compilation. cuDNN's default TF32
    convolutions round to 10 mantissa bits with algorithms that change with the batch, so the runs would differ
    by about 1e-3 for a reason the tests are not about."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


def test_compiled_cuda_graphs_equal_eager_on_chunked_batches(tiny_dir):
    """torch.compile with CUDA graphs for real, every shape compiled before the first batch: several chunks of
    the same bucket replay one graph, and no batch compiles again."""
    from torch._dynamo.utils import counters

    size = [256, 192]
    cfg = {"pose": ModelSection(str(tiny_dir["pose"]), input_size=size, max_batch=2, flip="off"),
           "matting": ModelSection(str(tiny_dir["matting"]), input_size=size, max_batch=2, flip="off")}  # fmt: skip
    frames, people = frames_and_people()
    eager = InferenceEngine(cfg, CUDA, torch.float32).run(frames, people())
    compiled = InferenceEngine(cfg, CUDA, torch.float32, compiled=True)
    assert compiled.warm_up(max_frames=4) == {"pose": [1, 2], "matting": [1, 2]}
    graphs = counters["stats"]["unique_graphs"]
    for _ in range(2):  # the first run records the graphs of shapes warm_up only compiled, the second replays
        got = compiled.run(frames, people())
    assert counters["stats"]["unique_graphs"] == graphs
    for a, b in zip(eager, got, strict=True):
        assert_same_people(a.people, b.people)
        assert np.abs(a.alpha - b.alpha).max() < 1e-3


def test_split_batch_on_cuda_with_replayed_outputs(tiny_dir):
    cfg = {"pose": ModelSection(str(tiny_dir["pose"]), input_size=[256, 192], max_batch=8, flip="off")}
    frames, people = frames_and_people(n=2)
    expected = InferenceEngine(cfg, CUDA, torch.float32).run(frames, people())
    engine = InferenceEngine(cfg, CUDA, torch.float32)
    engine.compiled, engine.fused_flip = True, set()
    engine.runners = {"pose": ReplayingModel(engine.models["pose"], fits=2)}
    got = engine.run(frames, people())
    assert any("out of memory" in e for e in engine.events)
    for a, b in zip(expected, got, strict=True):
        assert_same_people(a.people, b.people)


def test_pipeline_runs_on_cuda(tmp_path, tiny_dir):
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.runtime.pipeline import Pipeline
    from tests.test_pipeline import config, read_jsonl, source_summary

    clip = tmp_path / "clip.mp4"
    make_clip(clip, frames=12, size=(240, 320), people=2)
    cfg = config(tmp_path, tiny_dir, clip, tasks=("pose", "seg"), runtime={"device": "cuda"})
    summary = Pipeline(cfg).run()
    assert summary["device"].startswith("cuda") and summary["dtype"] == "bfloat16"
    assert summary["compiled"] == {"pose": [1, 2, 4, 8], "seg": [1, 2, 4, 8]}  # runtime.compile auto: on CUDA
    assert source_summary(summary)["frames_out"] == 12 and len(read_jsonl(tmp_path / "out" / "results.jsonl")) == 12


def test_finetune_on_cuda_learns_in_bf16_with_checkpointing(tmp_path):
    """`finetune` on the GPU (bf16 autocast, gradient checkpointing): the loss falls, and best/ loads on the CPU."""
    from sapiens2_stream.humans.datasets import write_dataset
    from sapiens2_stream.models import load_model
    from sapiens2_stream.train.finetune import FinetuneOptions, finetune
    from tests.conftest import read_jsonl

    data = write_dataset(tmp_path / "data", 30, seed=2, progress=False)
    opts = FinetuneOptions("pose", str(data / "keypoints.json"), str(tmp_path / "out"), steps=200, batch_size=32,
                           input_size=(128, 96), val_every=100, device="cuda", progress=False)  # fmt: skip
    finetune(opts)
    lines = read_jsonl(tmp_path / "out" / "metrics.jsonl")
    assert lines[-1]["loss"] < lines[1]["loss"] and lines[-1]["pck@0.1"] > lines[0]["pck@0.1"]
    assert load_model(tmp_path / "out" / "best", task="pose").config.image_size == (128, 96)


def test_the_command_line_runs_on_cuda(tmp_path, tiny_dir):
    """`sapiens2-stream run` in its own process on the GPU, two sources at once (as benchmarks.multi_source runs
    it); its error output is shown if it fails."""
    import json
    import subprocess
    import sys

    import yaml

    from sapiens2_stream.io.synthetic import make_clip

    clips = [tmp_path / f"cam{i}.mp4" for i in range(2)]
    for i, clip in enumerate(clips):
        make_clip(clip, frames=10, size=(240, 320), people=1 + i)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump({
        "source": {"uri": "replaced.mp4"},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {m: {"source": str(tiny_dir[m]), "input_size": [256, 192], "max_batch": 2, "flip": "off"}
                   for m in ("pose", "seg")},  # four graphs to compile: pose and seg at batches of 1 and 2
        "runtime": {"device": "cuda"},
    }))  # fmt: skip
    args = [sys.executable, "-m", "sapiens2_stream.cli", "run", str(pipeline), "--output", str(tmp_path / "out"),
            "--no-progress", *(a for clip in clips for a in ("--source", f"{clip.stem}={clip}"))]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["totals"]["frames_out"] == 20 and summary["device"].startswith("cuda")
    assert summary["compiled"] == {"pose": [1, 2], "seg": [1, 2]}


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 9),
                    reason="fp8 needs compute capability 8.9 or later")  # fmt: skip
def test_fp8_on_the_gpu_passes_its_gate_and_stays_near_bf16():
    """runtime.fp8 on an fp8 GPU (H100, H200): the toy pose model's backbone in fp8 passes the parity gate against
    its bf16 outputs, and the engine's keypoints stay within about a pixel of bf16's."""
    from sapiens2_stream.models.toy import toy_model

    cfg = {"pose": ModelSection(str(toy_model("pose")), max_batch=4)}
    frames, people = frames_and_people()
    bf16 = InferenceEngine(cfg, CUDA, torch.bfloat16).run(frames, people())
    engine = InferenceEngine(cfg, CUDA, torch.bfloat16, fp8=True)
    assert engine.fp8["pose"].startswith("on"), engine.fp8
    fp8 = engine.run(frames, people())
    a = np.concatenate([p.keypoints for r in bf16 for p in r.people])
    b = np.concatenate([p.keypoints for r in fp8 for p in r.people])
    assert np.median(np.abs(a - b)) < 1.5
