"""Distillation measured on renders: `python -m benchmarks.distil` (also a section of `benchmarks.quality`).

The teacher is the shipped toy pose, part and matte models; the footage two rendered clips (`everything`, `fall`)
whose truth the teacher never sees. `sapiens2-stream label` keeps what the teacher is sure of; the kept labels are
scored against the renders' truth, beside every label the teacher gave (the same command with its rules off).
Then a fresh tiny student is trained on each (`finetune pose --data DATA`), and on a held-out clip (`crossing`)
both students and the teacher are scored against the truth and the students against the teacher (PCK@0.1 of the
box; boxes from the truth, flip TTA on).

The student has the teacher's tiny architecture (there is no smaller model here): what this measures is the path
(labels, their filter, the split, finetune on them), not the gain of a smaller model, which is what Sapiens2-1b
teaching 0.4b on a GPU would give.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

import sapiens2_stream as s2
from sapiens2_stream.humans.body import KEYPOINTS
from sapiens2_stream.humans.clips import SCENES, write_clip
from sapiens2_stream.models.metadata import keypoint_index
from sapiens2_stream.models.toy import toy_model
from sapiens2_stream.train.metrics import pck

FPS = 15
SIZE = (240, 320)
TRAIN_SCENES = ("everything", "fall")
HELD_OUT = "crossing"
BODY = [keypoint_index()[n] for n in KEYPOINTS]  # what `label --keypoints body` lists, in its order
LOOSE = ["--min-score=-inf", "--max-flip-gap", "inf", "--max-jump", "inf", "--min-keypoints", "0"]


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", *args], check=True, stderr=subprocess.DEVNULL)


def teacher_yaml(folder: Path, truth: str) -> Path:
    path = folder / f"teacher_{Path(truth).stem}.yaml"
    path.write_text(yaml.safe_dump({
        "detector": {"type": "file", "path": truth},
        "models": {t: {"source": str(toy_model(t))} for t in ("pose", "seg", "matting")},
        "runtime": {"device": "cpu"},
    }))  # fmt: skip
    return path


def label_clips(folder: Path, clips: dict, out: Path, extra: list[str]) -> float:
    """`label` every training clip (one teacher YAML per clip: its truth is its detector) into `out`; seconds."""
    start = time.perf_counter()
    runs = []
    for name, clip in clips.items():
        run = folder / f"runs_{out.name}" / name
        video = clip["path"].replace(".truth.json", ".mp4")
        cli("run", str(teacher_yaml(folder, clip["path"])), "--source", video, "--output", str(run), "--no-progress",
            "--set", "outputs.video.enabled=false")  # fmt: skip
        runs.append(str(run))
    cli("label", *runs, "--output", str(out), "--keypoints", "body", "--no-progress", *extra)
    return time.perf_counter() - start


def label_accuracy(data: Path, clips: dict) -> dict:
    """The dataset's labels against the renders' truth: PCK@0.1 of the labelled keypoints, how many there are."""
    preds, truths, boxes = [], [], []
    for side in ("train", "val"):
        coco = json.loads((data / side / "keypoints.json").read_text())
        stems = {im["id"]: Path(im["file_name"]).stem for im in coco["images"]}
        for a in coco["annotations"]:
            run, frame = stems[a["image_id"]].rsplit("_", 1)
            truth = clips[run]["frames"][int(frame)]["people"]
            box = np.array(a["bbox"])
            t = min(truth, key=lambda p: np.abs(np.array(p["box"]) - box).sum())
            preds.append(np.array(a["keypoints"]).reshape(-1, 3))
            truths.append(np.array(t["keypoints"])[BODY])
            boxes.append(t["box"])
    pred, truth = np.array(preds), np.array(truths)
    labelled = (pred[..., 2] > 0) & (truth[..., 2] > 0)
    truth = np.concatenate([truth[..., :2], labelled[..., None]], -1)
    return {"people": len(preds), "keypoints": int(labelled.sum()), "pck@0.1": pck(pred, truth, np.array(boxes), 0.1)}


def held_out_keypoints(model: str, clip: dict) -> dict:
    """(frame, truth person) -> keypoints [308, 2] of `model` on the held-out clip, truth boxes."""
    out = {}
    for r in s2.stream(clip["path"].replace(".truth.json", ".mp4"), models={"pose": model}, device="cpu",
                       detector={"type": "file", "path": clip["path"]}, flip="on", smoothing="none"):  # fmt: skip
        for p in r.people:
            truth = clip["frames"][r.frame_index]["people"]
            i = int(np.argmin([np.abs(np.array(t["box"]) - p.box).sum() for t in truth]))
            out[(r.frame_index, i)] = p.keypoints
    return out


def scores(pred: dict, reference: dict, clip: dict) -> float:
    """PCK@0.1 of `pred` against `reference` keypoints (or the truth: reference None) where the truth labels them."""
    keys = sorted(set(pred) & set(reference))
    truth = np.array([clip["frames"][f]["people"][i]["keypoints"] for f, i in keys])
    boxes = np.array([clip["frames"][f]["people"][i]["box"] for f, i in keys])
    ref = np.concatenate([np.array([reference[k] for k in keys]), truth[..., 2:] > 0], -1)
    return pck(np.array([pred[k] for k in keys]), ref, boxes, 0.1)


def distil_rows(folder: Path, steps: int = 1500) -> list[dict]:
    clips = {name: write_clip(folder / f"{name}.mp4", SCENES[name](), FPS, SIZE) for name in TRAIN_SCENES}
    held = write_clip(folder / f"{HELD_OUT}.mp4", SCENES[HELD_OUT](), FPS, SIZE)
    truth = {(f, i): np.array(p["keypoints"])[:, :2] for f, frame in enumerate(held["frames"])
             for i, p in enumerate(frame["people"])}  # fmt: skip
    teacher = held_out_keypoints(str(toy_model("pose")), held)
    rows = [{"model": "teacher (toy pose)", "pck_truth": scores(teacher, truth, held)}]
    for kind, extra in (("sure", []), ("all", LOOSE)):
        data = folder / f"data_{kind}"
        seconds = label_clips(folder, clips, data, extra)
        accuracy = label_accuracy(data, clips)
        start = time.perf_counter()
        cli("finetune", "pose", "--data", str(data), "--output", str(folder / f"student_{kind}"), "--steps",
            str(steps), "--batch-size", "32", "--input-size", "128x96", "--device", "cpu", "--no-progress")  # fmt: skip
        train_s = time.perf_counter() - start
        student = held_out_keypoints(str(folder / f"student_{kind}" / "best"), held)
        rows.append({"model": f"student on {kind} labels", "labels": accuracy["people"],
                     "labelled_keypoints": accuracy["keypoints"], "labels_pck_truth": accuracy["pck@0.1"],
                     "label_s": round(seconds, 1), "finetune_s": round(train_s, 1),
                     "pck_truth": scores(student, truth, held),
                     "pck_teacher": scores(student, teacher, held)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--json", default="benchmarks/results/distil.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = distil_rows(Path(tmp), args.steps)
    for row in rows:
        print("  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
