"""Users' labelled data, read and checked before any training: a COCO keypoints JSON for pose (its keypoints
mapped onto the 308 by name), a folder of images with PNG label maps for seg, with alpha PNGs for matting, with
normal-map PNGs or pointmap .npy files for normal and pointmap.

Everything that would make training fail or learn nothing is found here, once, as one clear line: unknown
keypoint names, missing or unreadable images, no annotations, masks of another size than their image, class ids
outside the 29. Images are decoded once and kept (the sets people fine-tune on are hundreds, not millions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from ..models.metadata import NUM_KEYPOINTS, NUM_SEG_CLASSES, keypoint_index
from ..models.tasks import task_spec

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
IGNORE = 255  # a label map's "not labelled" value


def read_rgb(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise Sapiens2StreamError(f"{path}: missing or unreadable image")
    return np.ascontiguousarray(image[..., ::-1])


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise Sapiens2StreamError(f"{path}: no such {what} file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise Sapiens2StreamError(f"{path}: not valid JSON ({e})") from None


@dataclass
class PoseSet:
    """People to train or score on: per person its image (index into `images`), COCO xywh box and [308, 3]
    keypoints (x, y, visibility; 0 for the keypoints the data does not label)."""

    images: list[np.ndarray]
    image_of: np.ndarray  # [N]
    boxes: np.ndarray  # [N, 4]
    keypoints: np.ndarray  # [N, 308, 3]
    labelled: np.ndarray  # [308] bool: keypoints the data labels at all
    files: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.boxes)


def keypoint_map(names: list[str], mapping_file: str | Path | None) -> list[int]:
    """Each dataset keypoint's index among the 308: by its own name, or through `mapping_file` ({"theirs":
    "one of the 308"}), which wins."""
    index = keypoint_index()
    mapping = read_json(Path(mapping_file), "keypoint map") if mapping_file else {}
    out, unknown = [], []
    for name in names:
        target = mapping.get(name, name)
        if target not in index:
            unknown.append(name if target == name else f"{name} -> {target}")
        out.append(index.get(target, -1))
    if unknown:
        hint = "" if mapping_file else "; map them onto the 308 names with --keypoints MAP.json"
        raise Sapiens2StreamError(
            f"unknown keypoint names: {', '.join(unknown[:6])}{' ...' if len(unknown) > 6 else ''}{hint}"
        )
    if len(set(out)) != len(out):
        raise Sapiens2StreamError("two keypoints of the data map onto the same one of the 308; check --keypoints")
    return out


def read_pose_set(
    json_path: str | Path, images_dir: str | Path | None = None, mapping_file: str | Path | None = None
) -> PoseSet:
    """A COCO keypoints JSON (images beside it, or in `images_dir`)."""
    path = Path(json_path)
    coco = read_json(path, "COCO keypoints")
    if not isinstance(coco, dict) or not {"images", "annotations", "categories"} <= set(coco):
        raise Sapiens2StreamError(f"{path}: not a COCO keypoints file (it needs images, annotations, categories)")
    people_cat = [c for c in coco["categories"] if c.get("keypoints")]
    if not people_cat:
        raise Sapiens2StreamError(f"{path}: no category lists its keypoints (categories[].keypoints)")
    cat = people_cat[0]
    to308 = keypoint_map(list(cat["keypoints"]), mapping_file)
    folder = Path(images_dir) if images_dir else path.parent
    anns = [
        a
        for a in coco["annotations"]
        if a.get("category_id") == cat["id"]
        and not a.get("iscrowd")
        and sum(1 for v in a.get("keypoints", [])[2::3] if v > 0) > 0
    ]
    if not anns:
        raise Sapiens2StreamError(f"{path}: no annotations with labelled keypoints (category {cat['name']!r})")
    by_id = {im["id"]: im for im in coco["images"]}
    used = sorted({a["image_id"] for a in anns})
    missing = [i for i in used if i not in by_id]
    if missing:
        raise Sapiens2StreamError(f"{path}: annotations name image ids that images[] lacks: {missing[:5]}")
    images, slot = [], {}
    for i in used:
        file = folder / by_id[i]["file_name"]
        if not file.exists():
            raise Sapiens2StreamError(
                f"{file}: missing image (named by {path.name}; pass --images DIR if they are elsewhere)"
            )
        slot[i] = len(images)
        images.append(read_rgb(file))
    k = len(to308)
    keypoints = np.zeros((len(anns), NUM_KEYPOINTS, 3), np.float32)
    boxes = np.zeros((len(anns), 4), np.float32)
    for n, a in enumerate(anns):
        flat = np.asarray(a["keypoints"], np.float32)
        if flat.size != 3 * k:
            raise Sapiens2StreamError(
                f"{path}: annotation {a.get('id')} has {flat.size // 3} keypoints, the category {k}"
            )
        keypoints[n, to308] = flat.reshape(k, 3)
        boxes[n] = a.get("bbox") or box_around(keypoints[n])
    labelled = np.zeros(NUM_KEYPOINTS, bool)
    labelled[to308] = True
    return PoseSet(
        images,
        np.array([slot[a["image_id"]] for a in anns]),
        boxes,
        keypoints,
        labelled,
        [by_id[i]["file_name"] for i in used],
    )


def box_around(keypoints: np.ndarray) -> np.ndarray:
    xy = keypoints[keypoints[:, 2] > 0, :2]
    lo, hi = xy.min(0), xy.max(0)
    return np.array([*(lo - 0.1 * (hi - lo)), *(1.2 * (hi - lo) + 1)], np.float32)


@dataclass
class DenseSet:
    """Whole pictures and their per-pixel truth: class ids (seg), alpha 0-1 (matting), unit normals or
    camera-frame points (normal, pointmap)."""

    images: list[np.ndarray]
    targets: list[np.ndarray]
    files: list[str]

    def __len__(self) -> int:
        return len(self.images)


TRUTH_FOLDERS = {"classes": "labels", "alpha": "alpha", "normals": "normals", "points": "pointmap"}
TRUTH_KINDS = {"classes": "PNG class ids", "alpha": "PNG alpha", "normals": "RGB PNG normal maps",
               "points": ".npy [H, W, 3] camera-frame metres"}  # fmt: skip
MAX_DEPTH = 100.0  # pointmap points further than this (m) are the sky, not truth


def read_dense_set(folder: str | Path, task: str, mapping_file: str | Path | None = None) -> DenseSet:
    """`folder/images/*` with, per image of the same stem, `labels/*.png` (seg), `alpha/*.png` (matting),
    `normals/*.png` (normal: (n + 1) / 2 of 255 in RGB) or `pointmap/*.npy` (pointmap)."""
    root = Path(folder)
    kind = task_spec(task).truth
    sub = TRUTH_FOLDERS[kind]
    if not (root / "images").is_dir() or not (root / sub).is_dir():
        raise Sapiens2StreamError(
            f"{root}: expected images/ and {sub}/ inside ({TRUTH_KINDS[kind]} named as the images)"
        )
    files = sorted(p for p in (root / "images").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise Sapiens2StreamError(f"{root / 'images'}: no images")
    lut = class_lut(mapping_file) if kind == "classes" else None
    images, targets = [], []
    for file in files:
        image = read_rgb(file)
        path, target = read_truth(root / sub, file.stem, kind)
        if target.shape[:2] != image.shape[:2]:
            raise Sapiens2StreamError(
                f"{path}: {target.shape[1]}x{target.shape[0]}, but its image is {image.shape[1]}x{image.shape[0]}"
            )
        if kind == "classes":
            target = lut[target]
            bad = np.setdiff1d(np.unique(target), [*range(NUM_SEG_CLASSES), IGNORE])
            if len(bad):
                raise Sapiens2StreamError(
                    f"{path}: class ids {bad[:5].tolist()} are not among the 29 (0-28, "
                    "255 ignored); map them with --classes MAP.json"
                )
            target = target.astype(np.uint8)
        targets.append(target)
        images.append(image)
    return DenseSet(images, targets, [f.name for f in files])


def read_truth(folder: Path, stem: str, kind: str) -> tuple[Path, np.ndarray]:
    """One picture's truth of the `kind` a task learns from: class ids [H, W], alpha 0-1 [H, W], unit normals or
    points [H, W, 3] (NaN where a point is missing or too far)."""
    path = folder / (f"{stem}.npy" if kind == "points" else f"{stem}.png")
    if kind == "points":
        try:
            points = np.load(path, allow_pickle=False).astype(np.float32)
        except (OSError, ValueError):
            raise Sapiens2StreamError(f"{path}: missing or unreadable pointmap for {stem}") from None
        if points.ndim != 3 or points.shape[2] != 3:
            raise Sapiens2StreamError(f"{path}: a pointmap is [H, W, 3], not {list(points.shape)}")
        points[~((points[..., 2] > 0) & (points[..., 2] < MAX_DEPTH))] = np.nan
        return path, points
    mask = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if mask is None:
        raise Sapiens2StreamError(f"{path}: missing or unreadable {folder.name} PNG for {stem}")
    if kind == "normals":
        if mask.ndim != 3:
            raise Sapiens2StreamError(f"{path}: a normal map is an RGB PNG")
        n = mask[..., 2::-1].astype(np.float32) / full_scale(mask) * 2 - 1
        return path, n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-6)
    if mask.ndim == 3:
        mask = mask[..., 0]
    if kind == "classes":
        return path, mask
    return path, mask.astype(np.float32) / full_scale(mask)


def full_scale(mask: np.ndarray) -> float:
    """The value of "all": 255 in an 8-bit PNG, 65535 in a 16-bit one."""
    return 65535.0 if mask.dtype == np.uint16 else 255.0


def class_lut(mapping_file: str | Path | None) -> np.ndarray:
    """A lookup table for a label PNG's values: the identity, or `{"their id": one of 0-28 or 255}`."""
    lut = np.arange(65536, dtype=np.int64)
    if mapping_file:
        for theirs, ours in read_json(Path(mapping_file), "class map").items():
            lut[int(theirs)] = int(ours)
    return lut
