"""One process that trains and serves: an ONNX and an OpenVINO export's runtime, a pipeline, `finetune` with a
worker, then all of it again, three times. Every round must give exactly what the first gave: the runtimes'
outputs, the pipeline's records, the batches a worker made (against the same batches made on this thread) and
the training losses. Garbage in a batch (the trainer's workers once read freed memory after an export's runtime
had run in the same process: indices of 4e17) shows as a batch or a loss that differs.

It runs in a fresh process of its own, so what it stresses is its own doing and not the order of the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STRESS = r"""
import contextlib, io, json, sys
from pathlib import Path

import numpy as np
import torch

from sapiens2_stream.cli import main
from sapiens2_stream.deploy.formats import load_runner
from sapiens2_stream.humans.clips import crossing, write_clip
from sapiens2_stream.humans.datasets import write_dataset
from sapiens2_stream.models import make_tiny_checkpoints
from sapiens2_stream.train.batches import StepBatches, batches
from sapiens2_stream.train.data import read_pose_set

work = Path(sys.argv[1])
rounds = int(sys.argv[2])


def cli(*args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([*map(str, args)])
    assert code == 0, err.getvalue()


tiny = make_tiny_checkpoints(work / "tiny")["pose"]
for fmt in ("onnx", "openvino"):
    cli("export-model", tiny, "--format", fmt, "--output", work / fmt, "--input-size", "64x48")
video = work / "walk.mp4"
write_clip(video, crossing(), max_frames=10)
(work / "p.yaml").write_text(
    f"source: {{uri: {video}}}\ndetector: {{type: full_frame}}\n"
    f"models: {{pose: {{source: {tiny}, input_size: [64, 48]}}}}\noutputs: {{dir: {work / 'run'}}}\n"
)
data = write_dataset(work / "synth", 12, seed=5, progress=False)
pixels = torch.from_numpy(np.random.default_rng(1).random((2, 3, 64, 48), dtype=np.float32))
cpu = torch.device("cpu")


def one_round(n):
    seen = {}
    for fmt in ("onnx", "openvino"):
        seen[fmt] = load_runner(fmt, work / fmt, "pose", "fp32", cpu)(pixels)["heatmaps"].clone()
    cli("run", work / "p.yaml", "--no-progress")
    seen["records"] = [json.loads(line)["people"] for line in (work / "run" / "results.jsonl").read_text().splitlines()]
    maker = StepBatches(read_pose_set(data / "keypoints.json"), "pose", (64, 48), 4, seed=3, sigma=2.0)
    inline, ahead = list(batches(maker, 0, 6, 0, cpu)), list(batches(maker, 0, 6, 1, cpu))
    for step, (a, b) in enumerate(zip(inline, ahead, strict=True)):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), f"round {n}: step {step}'s batch differs"
    seen["batches"] = inline
    out = work / f"ft{n}"
    cli("finetune", "pose", "--data", data / "keypoints.json", "--from", tiny, "--output", out, "--steps", 6,
        "--batch-size", 4, "--input-size", "64x48", "--workers", 1, "--val-every", 3, "--no-progress")
    lines = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    seen["losses"] = [m["loss"] for m in lines if "loss" in m]
    assert len(seen["losses"]) == 2 and all(np.isfinite(seen["losses"])), seen["losses"]
    return seen


first = one_round(0)
for n in range(1, rounds):
    again = one_round(n)
    for fmt in ("onnx", "openvino"):
        assert torch.equal(again[fmt], first[fmt]), f"round {n}: {fmt}'s outputs differ"
    assert again["records"] == first["records"], f"round {n}: the pipeline's records differ"
    for a, b in zip(first["batches"], again["batches"], strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), f"round {n}: the batches differ"
    assert again["losses"] == first["losses"], f"round {n}: the losses differ: {first['losses']} {again['losses']}"
print("rounds", rounds, "losses", first["losses"])
"""


def test_training_beside_runtimes_and_pipelines_in_one_process_gives_the_same_every_round(tmp_path):
    one_core = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", STRESS, str(tmp_path), "3"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env={**os.environ, **one_core})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rounds 3" in done.stdout
