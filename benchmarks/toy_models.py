"""Train the toy models that ship with the package, the one command for each: `python -m benchmarks.toy_models
pose` (seg, matting, normal, pointmap; or all). It renders the synthetic training and held-out sets
(`sapiens2-stream synth dataset`, kept in --work for the next task), trains with `sapiens2-stream finetune` (pose
from a fresh tiny model; the others from the toy pose model's backbone, so make pose first), and
copies `best/` into sapiens2_stream/models/data/toy/<task>/ with a PROVENANCE.json: the commands, the minutes
they took on this machine, the model's size and its held-out scores.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

TOY = Path(__file__).resolve().parents[1] / "sapiens2_stream" / "models" / "data" / "toy"
POSE = str(TOY / "pose")
RECIPES = {  # the finetune runs, one after another (a later one starts from the one before's best/)
    "pose": [
        "--input-size 128x96 --steps 4000 --batch-size 32".split(),
        "--steps 5000 --batch-size 32 --lr 5e-4".split(),  # sides are the last thing it learns
        "--steps 5000 --batch-size 32 --lr 3e-4".split(),
    ],
    # the others start from the toy pose model's backbone (it knows where bodies are), under a fresh head; seg's
    # head is 4x the tiny width (8 channels cannot carry 29 classes, left and right among them); normals and
    # points at the frames' own aspect (the pipeline fits them in): 96x128 for 4:3
    "seg": [f"--from {POSE} --input-size 128x160 --head-width 4 --steps 3000 --batch-size 16 --lr 2e-3".split()],
    "matting": [f"--from {POSE} --input-size 128x160 --steps 1000 --batch-size 16 --lr 2e-3".split()],
    "normal": [f"--from {POSE} --input-size 96x128 --head-width 2 --steps 1500 --batch-size 16 --lr 2e-3".split()],
    "pointmap": [f"--from {POSE} --input-size 96x128 --head-width 2 --steps 2000 --batch-size 16 --lr 2e-3".split()],
}
NOT_SCORES = ("loss", "seconds", "step_ms", "data_wait_ms", "threads")  # metrics.jsonl's other columns
TRAIN, HELD_OUT = ("--count", "2400", "--seed", "11"), ("--count", "200", "--seed", "12")


def cli(*args: str) -> tuple[list[str], float]:
    command = [sys.executable, "-m", "sapiens2_stream.cli", *args]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return ["sapiens2-stream", *args], time.perf_counter() - start


def datasets(work: Path) -> tuple[Path, Path, list]:
    """The training and held-out sets (rendered once: each remembers its command and minutes in made.json)."""
    made = []
    for name, args in (("train", TRAIN), ("val", HELD_OUT)):
        record = work / name / "made.json"
        if not record.exists():
            command, seconds = cli("synth", "dataset", str(work / name), *args, "--no-progress")
            record.write_text(json.dumps({"command": command, "seconds": seconds}))
        made.append(json.loads(record.read_text()))
    return work / "train", work / "val", [(m["command"], m["seconds"]) for m in made]


def train(task: str, work: Path) -> dict:
    train_dir, val_dir, made = datasets(work)
    data = (
        (str(train_dir / "keypoints.json"), str(val_dir / "keypoints.json"))
        if task == "pose"
        else (str(train_dir), str(val_dir))
    )
    commands, seconds, start = [], 0.0, []
    for i, recipe in enumerate(RECIPES[task]):
        run = work / f"run-{task}-{i + 1}"
        shutil.rmtree(run, ignore_errors=True)
        command, took = cli(
            "finetune",
            task,
            "--data",
            data[0],
            "--val",
            data[1],
            "--output",
            str(run),
            *start,
            *recipe,
            "--device",
            "cpu",
            "--no-progress",
        )
        commands.append(command)
        seconds += took
        start = ["--from", str(run / "best")]
    return ship(task, run, made + [(c, 0.0) for c in commands], seconds)


def ship(task: str, run: Path, commands: list, training_s: float) -> dict:
    """Copy `run`'s best/ into the package with its PROVENANCE.json."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    from sapiens2_stream.train.evaluate import primary

    key, sign = primary(task)
    best = max(lines, key=lambda line: sign * line[key])
    target = TOY / task
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(run / "best", target)
    weights = next(target.glob("*.safetensors"))
    from safetensors.torch import load_file

    parameters = sum(t.numel() for k, t in load_file(str(weights)).items() if not k.endswith("periods"))
    provenance = {
        "task": task,
        "reproduce": "python -m benchmarks.toy_models " + task,
        "commands": [" ".join(c) for c, _ in commands],
        "data_minutes": round(sum(s for _, s in commands) / 60, 1),
        "training_minutes": round(training_s / 60, 1),
        "parameters": parameters,
        "bytes": weights.stat().st_size,
        "held_out": {k: v for k, v in best.items() if k not in NOT_SCORES},
        "held_out_set": "200 rendered pictures (seed 12), never trained on",
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}",
        "note": "trained on drawn capsule figures: these scores measure the pipeline, not Sapiens2",
    }
    (target / "PROVENANCE.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return provenance


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=[*RECIPES, "all"])
    parser.add_argument("--work", default="/tmp/sapiens2-toy", help="datasets and runs (default %(default)s)")
    args = parser.parse_args()
    for task in RECIPES if args.task == "all" else [args.task]:
        print(json.dumps(train(task, Path(args.work)), indent=1))


if __name__ == "__main__":
    main()
