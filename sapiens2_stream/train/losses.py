"""The training losses, one per task, on a batch from `augment` (pixels first, then the task's targets).

Pose: squared error of the labelled keypoints' heatmaps. Seg: class-weighted cross-entropy plus Dice (upstream's
pair). Matting: L1 and squared error of alpha, and L1 of the foreground where the person is. Normal: one minus
the cosine to the true normal. Pointmap: the points' L1 relative to their depth, in the model's canonical
camera (focal = the input's width), plus the focal-scale branch's relative error: the pipeline's metric points
are the canonical ones divided by that scale, so both are trained against what the truth implies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.tasks import task_spec
from ..processing.geometry import normalization
from .data import IGNORE


def heatmap_loss(heatmaps: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Squared error averaged over the labelled keypoints' heatmaps only (x1000 to keep it readable): those the
    data labels (the targets' channels) where the picture shows them (weights)."""
    err = (heatmaps.float() - targets).square().mean((-2, -1)) * weights
    return 1000 * err.sum() / weights.sum().clamp(min=1)


def dice_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """1 - soft Dice, averaged over the classes the batch shows (upstream adds it to the cross-entropy: small
    parts count as much as the background)."""
    keep = (labels != IGNORE)[:, None]
    probs = logits.float().softmax(1) * keep
    classes = torch.arange(logits.shape[1], device=labels.device)[None, :, None, None]
    onehot = labels[:, None] == classes  # bool: the ignored pixels match no class
    inter = (probs * onehot).sum((0, 2, 3))
    counts = onehot.sum((0, 2, 3))
    total = probs.sum((0, 2, 3)) + counts
    present = counts > 0
    return (1 - (2 * inter + 1) / (total + 1))[present].mean()


def loss_of(model, task: str, batch: tuple) -> torch.Tensor:
    pixels = batch[0]
    kind = task_spec(task).truth
    if kind == "keypoints":  # the labelled keypoints' heatmaps only (batch[3]: which)
        return heatmap_loss(model.head_outputs(pixels, batch[3]), batch[1], batch[2])
    out = model(pixels)
    if kind == "classes":
        logits = at_size(out.logits, batch[1].shape[-2:])
        coarse = F.avg_pool2d(logits, 2), batch[1][:, ::2, ::2]  # Dice at half size: a quarter of the work
        weights = torch.ones(logits.shape[1], device=logits.device)
        weights[0] = 0.1  # the background, most of every picture, weighs a tenth (as upstream's class weights)
        ce = F.cross_entropy(logits, batch[1], weight=weights, ignore_index=IGNORE)
        return ce + dice_loss(*coarse)
    if kind == "normals":
        return normal_loss(at_size(out.normals, batch[1].shape[1:3]), batch[1])
    if kind == "points":
        return pointmap_loss(at_size(out.pointmaps, batch[1].shape[1:3]), out.scales, batch[1])
    size = batch[1].shape[-2:]
    alpha, foreground = at_size(out.alphas, size)[:, 0], at_size(out.foregrounds, size)
    mean, std = normalization(pixels.device)
    seen = (pixels * std + mean) / 255  # the picture is the foreground where there is a person
    fg_error = ((foreground - seen).abs().mean(1) * batch[1]).sum() / batch[1].sum().clamp(min=1)
    return (alpha - batch[1]).abs().mean() + 4 * (alpha - batch[1]).square().mean() + 0.5 * fg_error


def at_size(maps: torch.Tensor, size) -> torch.Tensor:
    """[B, C, h, w] maps as float32 at the targets' (H, W), resized bilinearly where they differ."""
    maps = maps.float()
    return maps if maps.shape[-2:] == size else F.interpolate(maps, size=size, mode="bilinear", align_corners=False)


def normal_loss(normals: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """1 - cos between [B, 3, H, W] predictions and [B, H, W, 3] unit truth, over the pixels with truth."""
    truth = truth.permute(0, 3, 1, 2)
    known = truth.isfinite().all(1)
    cos = (F.normalize(normals, dim=1, eps=1e-6) * truth.nan_to_num()).sum(1)
    return (1 - cos)[known].mean()


def canonical_scale(points: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
    """Per picture [B]: the input's width over the focal length its truth points [B, 3, H, W] imply (a least-squares
    fit of the pixels' offsets from the centre against x/z and y/z)."""
    _, _, h, w = points.shape
    v, u = torch.meshgrid(
        torch.arange(h, device=points.device) - (h - 1) / 2, torch.arange(w, device=points.device) - (w - 1) / 2,
        indexing="ij",
    )  # fmt: skip
    z = points[:, 2].clamp(min=1e-3)
    bx, by = (points[:, 0] / z).nan_to_num(), (points[:, 1] / z).nan_to_num()
    k = known.float()
    focal = ((u * bx + v * by) * k).sum((1, 2)) / ((bx * bx + by * by) * k).sum((1, 2)).clamp(min=1e-9)
    return w / focal.clamp(min=1.0)


def pointmap_loss(pointmaps: torch.Tensor, scales: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    truth = truth.permute(0, 3, 1, 2)
    known = truth.isfinite().all(1) & (truth[:, 2] > 0.1)
    scale = canonical_scale(truth, known)
    want = truth.nan_to_num() * scale[:, None, None, None]
    error = (pointmaps - want).abs().sum(1) / want[:, 2].clamp(min=1e-3)
    return error[known].mean() + ((scales.float().view(-1) - scale).abs() / scale).mean()
