"""Scores against known truth, the same in `finetune`'s validation and `benchmarks.quality`: PCK and OKS AP for
keypoints, left/right swaps, mIoU for part labels, SAD / MSE / IoU for mattes, ID switches and IDF1 for tracks,
precision and recall for events.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
from scipy.optimize import linear_sum_assignment

from ..models.metadata import raw_metadata


def box_scale(boxes: np.ndarray) -> np.ndarray:
    """The length PCK is a fraction of: the box's longer side."""
    return np.maximum(boxes[:, 2], boxes[:, 3])


def pck(pred: np.ndarray, truth: np.ndarray, boxes: np.ndarray, threshold: float) -> float:
    """Share of labelled keypoints (truth visibility > 0) within `threshold` x the box's longer side.
    pred [N, K, 2], truth [N, K, 3], boxes [N, 4]."""
    labelled = truth[..., 2] > 0
    if not labelled.any():
        return float("nan")
    err = np.linalg.norm(pred[..., :2] - truth[..., :2], axis=-1) / box_scale(boxes)[:, None]
    return float((err[labelled] < threshold).mean())


def left_right_swaps(pred: np.ndarray, truth: np.ndarray, boxes: np.ndarray, pairs) -> float:
    """Share of left/right pairs, both labelled and apart by more than a tenth of the box (a clear case), whose
    prediction is nearer the swapped truth than the truth."""
    swaps, total = 0, 0
    scale = box_scale(boxes)
    for a, b in pairs:
        both = (truth[:, a, 2] > 0) & (truth[:, b, 2] > 0)
        both &= np.linalg.norm(truth[:, a, :2] - truth[:, b, :2], axis=-1) > 0.1 * scale
        if not both.any():
            continue
        p, t = pred[both], truth[both]
        right = np.linalg.norm(p[:, a] - t[:, a, :2], axis=-1) + np.linalg.norm(p[:, b] - t[:, b, :2], axis=-1)
        wrong = np.linalg.norm(p[:, a] - t[:, b, :2], axis=-1) + np.linalg.norm(p[:, b] - t[:, a, :2], axis=-1)
        swaps += int((wrong < right).sum())
        total += int(both.sum())
    return swaps / total if total else float("nan")


def oks_ap(pred: np.ndarray, scores: np.ndarray, truth: np.ndarray, boxes: np.ndarray, image_ids: np.ndarray) -> float:
    """COCO OKS AP (pycocotools) over the keypoints the truth labels, with their sigmas of the 308.
    pred [N, 308, 2], scores [N, 308], truth [N, 308, 3]."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    used = np.nonzero((truth[..., 2] > 0).any(0))[0]
    sigmas = np.asarray(raw_metadata()["sigmas"])[used]
    gt = COCO()
    gt.dataset = {
        "images": [{"id": int(i)} for i in np.unique(image_ids)],
        "categories": [{"id": 1, "name": "person"}],
        "annotations": [
            {
                "id": n + 1,
                "image_id": int(image_ids[n]),
                "category_id": 1,
                "iscrowd": 0,
                "bbox": boxes[n].tolist(),
                "area": float(boxes[n, 2] * boxes[n, 3]),
                "keypoints": truth[n, used].ravel().tolist(),
                "num_keypoints": int((truth[n, used, 2] > 0).sum()),
            }
            for n in range(len(truth))
        ],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        kp = np.concatenate([pred[:, used], np.ones((len(pred), len(used), 1))], -1)
        dt = gt.loadRes(
            [
                {
                    "image_id": int(image_ids[n]),
                    "category_id": 1,
                    "keypoints": kp[n].ravel().tolist(),
                    "score": float(scores[n, used].mean()),
                }
                for n in range(len(pred))
            ]
        )
        ev = COCOeval(gt, dt, "keypoints")
        ev.params.kpt_oks_sigmas = sigmas
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0])


def miou(pred: list[np.ndarray], truth: list[np.ndarray], classes: int, ignore: int = 255) -> float:
    """Mean IoU over the classes that appear in the truth or the prediction (background included)."""
    inter, union = np.zeros(classes), np.zeros(classes)
    for p, t in zip(pred, truth, strict=True):
        keep = t != ignore
        p, t = p[keep].astype(np.int64), t[keep].astype(np.int64)
        inter += np.bincount(t[p == t], minlength=classes)[:classes]
        union += np.bincount(p, minlength=classes)[:classes] + np.bincount(t, minlength=classes)[:classes]
    union -= inter
    seen = union > 0
    return float((inter[seen] / union[seen]).mean())


def matte_scores(pred: list[np.ndarray], truth: list[np.ndarray]) -> dict[str, float]:
    """SAD (/1000, per picture), MSE (x1e-3) and IoU of alpha > 0.5."""
    sad = np.mean([np.abs(p - t).sum() / 1000 for p, t in zip(pred, truth, strict=True)])
    mse = np.mean([((p - t) ** 2).mean() * 1e3 for p, t in zip(pred, truth, strict=True)])
    i = sum(((p > 0.5) & (t > 0.5)).sum() for p, t in zip(pred, truth, strict=True))
    u = sum(((p > 0.5) | (t > 0.5)).sum() for p, t in zip(pred, truth, strict=True))
    return {"sad": float(sad), "mse": float(mse), "iou": float(i / max(u, 1))}


def identity_scores(frames: list[tuple[dict, dict]], max_px: float) -> dict[str, float]:
    """ID switches and IDF1 of tracks against truth. `frames`: per frame ({truth id: (x, y)}, {track id: (x, y)});
    a track matches a truth person within `max_px` (Hungarian on distance)."""
    matches: list[dict] = []
    for truth, tracks in frames:
        t_ids, k_ids = list(truth), list(tracks)
        found = {}
        if t_ids and k_ids:
            d = np.array([[np.hypot(*np.subtract(truth[a], tracks[b])) for b in k_ids] for a in t_ids])
            for r, c in zip(*linear_sum_assignment(d), strict=True):
                if d[r, c] <= max_px:
                    found[t_ids[r]] = k_ids[c]
        matches.append(found)
    switches, last = 0, {}
    for found in matches:
        for person, track in found.items():
            if person in last and last[person] != track:
                switches += 1
            last[person] = track
    # IDF1: the best one-to-one truth <-> track assignment over the whole clip
    t_all = sorted({p for truth, _ in frames for p in truth})
    k_all = sorted({k for _, tracks in frames for k in tracks})
    together = np.zeros((len(t_all), len(k_all)))
    for found in matches:
        for person, track in found.items():
            together[t_all.index(person), k_all.index(track)] += 1
    idtp = together[linear_sum_assignment(-together)].sum() if together.size else 0.0
    n_truth = sum(len(t) for t, _ in frames)
    n_tracks = sum(len(k) for _, k in frames)
    return {"id_switches": float(switches), "idf1": float(2 * idtp / max(n_truth + n_tracks, 1))}


def event_scores(found: list[float], truth: list[float], tolerance_s: float) -> dict[str, float]:
    """Precision, recall and hits of event times, each truth matched at most once within `tolerance_s`."""
    left = list(truth)
    hits = 0
    for t in sorted(found):
        near = [x for x in left if abs(x - t) <= tolerance_s]
        if near:
            left.remove(min(near, key=lambda x: abs(x - t)))
            hits += 1
    precision = hits / len(found) if found else float("nan") if not truth else 0.0
    recall = hits / len(truth) if truth else float("nan")
    return {"precision": precision, "recall": recall, "hits": hits}


def normal_scores(pred: list[np.ndarray], truth: list[np.ndarray]) -> dict[str, float]:
    """Mean angle (degrees) between predicted and true unit normals [H, W, 3], and the share within 11.25
    degrees (the usual threshold), over the pixels with truth (NaN marks none)."""
    angles = []
    for p, t in zip(pred, truth, strict=True):
        known = np.isfinite(t).all(-1)
        cos = (p[known] * t[known]).sum(-1) / np.maximum(np.linalg.norm(p[known], axis=-1), 1e-9)
        angles.append(np.degrees(np.arccos(np.clip(cos, -1, 1))))
    a = np.concatenate(angles)
    return {"angle_deg": float(a.mean()), "within_11.25": float((a < 11.25).mean())}


def depth_scores(pred: list[np.ndarray], truth: list[np.ndarray]) -> dict[str, float]:
    """Absolute relative depth error (mean |z - z*| / z*) and the share of pixels within 1.25x of the truth
    (delta < 1.25), over the pixels with truth."""
    rel, ratio = [], []
    for p, t in zip(pred, truth, strict=True):
        known = np.isfinite(t) & (t > 0)
        rel.append(np.abs(p[known] - t[known]) / t[known])
        ratio.append(np.maximum(p[known] / t[known], t[known] / np.maximum(p[known], 1e-6)))
    return {"abs_rel": float(np.concatenate(rel).mean()), "delta1": float((np.concatenate(ratio) < 1.25).mean())}
