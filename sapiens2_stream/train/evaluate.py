"""Scoring a model on held-out truth through the pipeline's own path (its crops, heatmap decoder, resizing and
post-processing), so a score here means the same as in a run."""

from __future__ import annotations

import numpy as np
import torch

from ..models.metadata import NUM_SEG_CLASSES, pose_metadata
from ..models.tasks import task_spec
from ..processing.crops import crop_persons
from ..processing.dense import prepare_frames
from ..processing.heatmaps import decode_heatmaps
from .data import DenseSet, PoseSet
from .metrics import depth_scores, left_right_swaps, matte_scores, miou, normal_scores, oks_ap, pck

BATCH = 32


@torch.no_grad()
def predict_keypoints(model, data: PoseSet, size: tuple[int, int], flip: bool = False) -> tuple[np.ndarray, ...]:
    """Keypoints [N, 308, 2] and scores [N, 308] of every person of `data`, from its truth box."""
    device = next(model.parameters()).device
    order = pose_metadata().flip_indices
    keypoints, scores = [], []
    for start in range(0, len(data), BATCH):
        items = range(start, min(start + BATCH, len(data)))
        frames = [data.images[data.image_of[i]] for i in items]
        crops = crop_persons(frames, [data.boxes[i : i + 1] for i in items], size, device=device)
        heatmaps = model.flip_tta(crops.pixel_values, order) if flip else model(crops.pixel_values).heatmaps
        kp, sc = decode_heatmaps(heatmaps, crops.boxes, size)
        keypoints.append(kp.cpu().numpy())
        scores.append(sc.cpu().numpy())
    return np.concatenate(keypoints), np.concatenate(scores)


def pose_scores(model, data: PoseSet, size: tuple[int, int], flip: bool = False) -> dict[str, float]:
    kp, sc = predict_keypoints(model, data, size, flip)
    truth = data.keypoints
    return {
        "pck@0.05": pck(kp, truth, data.boxes, 0.05),
        "pck@0.1": pck(kp, truth, data.boxes, 0.1),
        "ap": oks_ap(kp, sc, truth, data.boxes, data.image_of),
        "lr_swaps": left_right_swaps(kp, truth, data.boxes, pose_metadata().flip_pairs),
    }


@torch.no_grad()
def predict_dense(model, images: list[np.ndarray], task: str, size: tuple[int, int]) -> list[dict]:
    """The task's result arrays per picture (numpy), exactly as a run's post-processing gives them."""
    device = next(model.parameters()).device
    spec = task_spec(task)
    out = []
    for start in range(0, len(images), BATCH // 4):
        frames = prepare_frames(images[start : start + BATCH // 4], size, spec.keep_aspect, device=device)
        result = model(frames.pixel_values)
        outputs = {name: getattr(result, name) for name in spec.flips}
        out += [
            {k: v.float().cpu().numpy() for k, v in item.items()} for item in spec.frame_post(outputs, frames, None)
        ]
    return out


def dense_scores(model, data: DenseSet, task: str, size: tuple[int, int]) -> dict[str, float]:
    results = predict_dense(model, data.images, task, size)
    kind = task_spec(task).truth
    if kind == "classes":
        return {"miou": miou([r["seg"].astype(np.int64) for r in results], data.targets, NUM_SEG_CLASSES)}
    if kind == "normals":
        return normal_scores([r["normals"] for r in results], data.targets)
    if kind == "points":
        return depth_scores([r["pointmap"][..., 2] for r in results], [t[..., 2] for t in data.targets])
    return matte_scores([r["alpha"] for r in results], data.targets)


PRIMARY = {"keypoints": ("pck@0.1", 1), "classes": ("miou", 1), "alpha": ("sad", -1), "normals": ("angle_deg", -1),
           "points": ("abs_rel", -1)}  # fmt: skip
"""By the kind of truth a task learns from: the score that picks `best/`, and whether higher is better."""


def primary(task: str) -> tuple[str, int]:
    """The score that picks a task's `best/`, and whether higher is better."""
    return PRIMARY[task_spec(task).truth]


def scores(model, data, task: str, size: tuple[int, int]) -> dict[str, float]:
    was_training = model.training
    model.eval()
    try:
        if task_spec(task).truth == "keypoints":
            return pose_scores(model, data, size)
        return dense_scores(model, data, task, size)
    finally:
        model.train(was_training)
