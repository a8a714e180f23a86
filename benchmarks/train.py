"""`finetune`'s speed against a plain PyTorch loop, idle and beside two busy processes, and whether its batches
would keep a GPU fed: `python -m benchmarks.train [--count 480] [--steps 60] [--json PATH]`.

Baseline: the loop a user would write first, over crops cut once and kept in memory (no jitter, no heatmaps to
make), with the same tiny pose model, batch and input size, in the same run. `finetune` runs as a user runs it
(the command line, in its own process), from a random tiny model on rendered people; its samples/s are those of
its steps after the first validation (`metrics.jsonl`'s `step_ms`), its data wait is `data_wait_ms`.

The GPU estimate: the forward FLOPs of Sapiens2-0.4b pose at its 1024x768 input (counted, not run, on the meta
device), times 3 for the backward, at 40% of an H200's 989 bf16 TFLOP/s, give the step time a GPU would take for
a batch; the time one worker takes to make such a batch here (crops and keypoints: on CUDA the heatmaps are drawn
on the GPU) says how many workers keep the data wait under 10% of that step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BATCH, SIZE = 32, (128, 96)
GPU_TFLOPS, MFU = 989.0, 0.4  # an H200's dense bf16 peak, and the share of it a ViT's training step reaches


def dataset(count: int) -> Path:
    """Rendered people with truth, made once per count and kept in the temporary folder."""
    from sapiens2_stream.humans.datasets import write_dataset

    folder = Path(tempfile.gettempdir()) / f"sapiens2-bench-train-{count}"
    if not (folder / "keypoints.json").exists():
        write_dataset(folder, count, seed=5, progress=False)
    return folder


def plain_loop(data: Path, steps: int) -> dict:
    """The baseline, in this process: fixed crops made once, then random batches of them through the model and
    the labelled keypoints' heatmap loss, as a first training loop would be written."""
    import torch

    from sapiens2_stream.models.tiny import random_model, tiny_config
    from sapiens2_stream.train.augment import Jitter, heatmap_batch, pose_batch
    from sapiens2_stream.train.data import read_pose_set
    from sapiens2_stream.train.losses import heatmap_loss

    people = read_pose_set(data / "keypoints.json")
    rng = np.random.default_rng(0)
    labelled = torch.from_numpy(np.flatnonzero(people.labelled))
    pixels, heatmaps, weights = heatmap_batch(
        *pose_batch(people, np.arange(len(people)), SIZE, rng, Jitter.none()), labelled, 1.5
    )
    model = random_model(tiny_config("pose")).train()
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        items = torch.from_numpy(rng.integers(0, len(people), BATCH))
        loss = heatmap_loss(model(pixels[items]).heatmaps[:, labelled], heatmaps[items], weights[items])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return {"samples_s": BATCH / float(np.mean(times[3:]))}


def finetune(data: Path, steps: int, workers: int | None) -> dict:
    """`sapiens2-stream finetune pose` from a random tiny model: samples/s of its steps after the first half's
    validation, and its data wait per step."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "sapiens2_stream.cli", "finetune", "pose", "--data",
                   str(data / "keypoints.json"), "--output", out, "--steps", str(steps), "--val-every",
                   str(steps // 2), "--batch-size", str(BATCH), "--input-size", f"{SIZE[0]}x{SIZE[1]}",
                   "--device", "cpu", "--no-progress"]  # fmt: skip
        if workers is not None:
            command += ["--workers", str(workers)]
        subprocess.run(command, check=True, capture_output=True)
        last = json.loads(Path(out, "metrics.jsonl").read_text().splitlines()[-1])
    return {"samples_s": BATCH * 1000 / last["step_ms"], "data_wait_ms": last["data_wait_ms"],
            "step_ms": last["step_ms"]}  # fmt: skip


def child(args: list[str]) -> dict:
    """A measurement in a process of its own (the OpenMP settings of each are its own)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.train", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


class Busy:
    """Two processes that keep two cores busy for as long as they are held."""

    def __enter__(self) -> Busy:
        spin = "while True: pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def gpu_feed() -> dict:
    """Whether the workers would keep a GPU training Sapiens2-0.4b pose busy (see the module's docstring)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from sapiens2_stream.models.config import preset
    from sapiens2_stream.models.network import Sapiens2Network
    from sapiens2_stream.train.augment import Jitter, pose_batch
    from sapiens2_stream.train.batches import cut_people
    from sapiens2_stream.train.data import read_pose_set

    config = preset("pose", "0.4b")
    with torch.device("meta"):
        model = Sapiens2Network(config)
        with FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, 3, *config.image_size))
    step_s = 3 * counter.get_total_flops() * BATCH / (GPU_TFLOPS * 1e12 * MFU)
    people = read_pose_set(dataset(480) / "keypoints.json")
    cut, rng = cut_people(people, config.image_size, Jitter()), np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(3):
        pose_batch(cut, rng.integers(0, len(cut), BATCH), config.image_size, rng, Jitter())
    batch_s = (time.perf_counter() - start) / 3
    workers = math.ceil(batch_s / (step_s / 1.1))  # a batch each step's time, less the 10% that may be waited
    return {"gpu_step_ms": 1000 * step_s, "batch_ms_one_worker": 1000 * batch_s, "workers_for_10pct": workers}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=480, help="rendered pictures to train on")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", help="also save the figures here")
    parser.add_argument("--plain", metavar="DATA", help=argparse.SUPPRESS)  # the baseline's own process
    args = parser.parse_args()
    if args.plain:
        print(json.dumps(plain_loop(Path(args.plain), args.steps)))
        return
    data = dataset(args.count)
    rows = []
    for load in ("idle", "beside 2 busy processes"):
        busy = Busy() if load != "idle" else None
        with busy or open(os.devnull):
            plain = child(["--plain", str(data), "--steps", str(args.steps)])
            ours = finetune(data, args.steps, None)
            inline = finetune(data, args.steps, 0)
        rows.append({"load": load, "plain_samples_s": plain["samples_s"], "finetune_samples_s": ours["samples_s"],
                     "finetune_workers0_samples_s": inline["samples_s"], "data_wait_ms": ours["data_wait_ms"],
                     "step_ms": ours["step_ms"], "vs_plain": ours["samples_s"] / plain["samples_s"]})  # fmt: skip
    feed = gpu_feed()
    for r in rows:
        print(f"{r['load']:26s} plain {r['plain_samples_s']:6.1f}/s  finetune {r['finetune_samples_s']:6.1f}/s "
              f"({r['vs_plain']:.2f}x; --workers 0: {r['finetune_workers0_samples_s']:.1f}/s)  data wait "
              f"{r['data_wait_ms']:.1f} ms of a {r['step_ms']:.0f} ms step")  # fmt: skip
    idle, busy = rows
    print(f"beside two busy processes: plain {idle['plain_samples_s'] / busy['plain_samples_s']:.2f}x slower, "
          f"finetune {idle['finetune_samples_s'] / busy['finetune_samples_s']:.2f}x slower")  # fmt: skip
    print(f"Sapiens2-0.4b on an H200 (estimated): {feed['gpu_step_ms']:.0f} ms a step of {BATCH}; one worker makes "
          f"such a batch in {feed['batch_ms_one_worker']:.0f} ms here: {feed['workers_for_10pct']} workers keep "
          "the data wait under 10%")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "gpu_feed": feed}, indent=1))


if __name__ == "__main__":
    main()
