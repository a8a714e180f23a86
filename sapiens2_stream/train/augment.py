"""Training batches, as upstream's recipe makes them: person crops (pose) or whole pictures (dense tasks) with
random scale, rotation, shift, horizontal flip and colour jitter, and their targets.

A flip mirrors the picture and swaps left and right in the truth: the keypoints through the 308 flip pairs, the
part labels through the 29 classes' left/right swaps, so the model learns sides from the body, not the picture.
Crops follow the pipeline's geometry (`processing.geometry.crop_windows`, UDP: the window's edges on the first
and last pixel), so a keypoint lands where the pipeline's decoder will look for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch

from ..models.metadata import pose_metadata, seg_metadata
from ..processing.dense import content_box
from ..processing.geometry import BOX_PADDING, IMAGENET_MEAN, IMAGENET_STD
from ..processing.targets import gaussian_heatmaps
from .data import IGNORE, DenseSet, PoseSet


@dataclass
class Jitter:
    scale: float = 0.25  # the crop's size times 1 +- this
    rotate_deg: float = 30.0  # std of the rotation (applied to 60% of samples, clipped at 2 std)
    shift: float = 0.08  # of the crop's size
    flip: float = 0.5  # probability
    colour: float = 0.25  # brightness, contrast and saturation +- this

    @classmethod
    def none(cls) -> Jitter:
        return cls(0.0, 0.0, 0.0, 0.0, 0.0)

    @classmethod
    def geometry(cls) -> Jitter:
        """For normal and pointmap: flips and colours only (a zoom or a turn would change what the camera's
        points and normals should be)."""
        return cls(0.0, 0.0, 0.0)

    @classmethod
    def whole_picture(cls) -> Jitter:
        """For seg and matting (upstream resizes 0.4-2x and crops): zoomed in up to 2x and panned, or out to 1.5x."""
        return cls(scale=0.5, shift=0.25)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> ImageNet-normalised float [B, 3, H, W], on the pictures' device."""
    x = images.float().permute(0, 3, 1, 2)
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1) * 255
    return (x - mean) / std


def colour_jitter(images: np.ndarray, rng: np.random.Generator, amount: float) -> np.ndarray:
    """A batch of uint8 pictures [B, H, W, 3], each with its own saturation s, contrast c and brightness b times
    1 +- `amount`. The three in one pass: towards its grey g by s, towards its mean m by c (a change of
    saturation keeps the mean), times b, is x b c s + g b c (1 - s) + m b (1 - c)."""
    if amount <= 0:
        return images
    s, c, b = (torch.from_numpy(f) for f in rng.uniform(1 - amount, 1 + amount, (3, len(images), 1, 1, 1)))
    x = torch.from_numpy(images).float()
    grey = x.mean(-1, keepdim=True)
    offset = (b * c * (1 - s)).float() * grey + (b * (1 - c)).float() * grey.mean((1, 2, 3), keepdim=True)
    return torch.addcmul(offset, x, (b * c * s).float()).clamp_(0, 255).to(torch.uint8).numpy()


def _window(box: np.ndarray, size: tuple[int, int], padding: float) -> tuple[np.ndarray, np.ndarray]:
    x, y, w, h = np.maximum(box, [box[0], box[1], 1, 1])
    pw, ph = w * padding, h * padding
    aspect = size[1] / size[0]
    sw, sh = (pw, pw / aspect) if pw > ph * aspect else (ph * aspect, ph)
    return np.array([x + w / 2, y + h / 2]), np.array([sw, sh])


def _affine(centre, window, size, rng, jitter: Jitter, flip: bool) -> np.ndarray:
    """The 2x3 map from picture pixels to crop pixels."""
    h, w = size
    s = 1 + rng.uniform(-jitter.scale, jitter.scale) if jitter.scale else 1.0
    angle = (
        np.clip(rng.normal(0, jitter.rotate_deg), -2 * jitter.rotate_deg, 2 * jitter.rotate_deg)
        if jitter.rotate_deg and rng.random() < 0.6
        else 0.0
    )
    shift = rng.uniform(-jitter.shift, jitter.shift, 2) * window if jitter.shift else np.zeros(2)
    c, sn = np.cos(np.radians(angle)), np.sin(np.radians(angle))
    scale = np.array([(w - 1) / (window[0] * s), (h - 1) / (window[1] * s)])
    m = np.diag(scale) @ np.array([[c, sn], [-sn, c]])
    if flip:
        m = np.diag([-1.0, 1.0]) @ m
    t = np.array([(w - 1) / 2, (h - 1) / 2]) - m @ (centre + shift)
    return np.concatenate([m, t[:, None]], 1)


def pose_batch(
    data: PoseSet,
    items: np.ndarray,
    size: tuple[int, int],
    rng: np.random.Generator,
    jitter: Jitter,
    downscale: int = 4,
    padding: float = BOX_PADDING,
) -> tuple[torch.Tensor, ...]:
    """(crops uint8 [B, H, W, 3], keypoints [B, 308, 2] in heatmap pixels, visible [B, 308]) for the people
    `items`: small to send between processes; `heatmap_batch` makes the targets where the model is."""
    h, w = size
    hh, hw = h // downscale, w // downscale
    order = np.asarray(pose_metadata().flip_indices)
    crops = np.zeros((len(items), h, w, 3), np.uint8)
    mus = np.zeros((len(items), len(order), 2), np.float32)
    visible = np.zeros((len(items), len(order)), bool)
    for n, i in enumerate(items):
        flip = rng.random() < jitter.flip
        centre, window = _window(data.boxes[i], size, padding)
        m = _affine(centre, window, size, rng, jitter, flip)
        image = data.images[data.image_of[i]]
        crops[n] = cv2.warpAffine(image, m, (w, h), flags=cv2.INTER_LINEAR)
        kp = data.keypoints[i]
        uv = kp[:, :2] @ m[:, :2].T + m[:, 2]
        vis = kp[:, 2] > 0
        if flip:
            uv, vis = uv[order], vis[order]
        mus[n] = uv * [(hw - 1) / (w - 1), (hh - 1) / (h - 1)]
        visible[n] = vis
    crops = colour_jitter(crops, rng, jitter.colour)
    return torch.from_numpy(crops), torch.from_numpy(mus), torch.from_numpy(visible)


def heatmap_batch(
    crops: torch.Tensor,
    mus: torch.Tensor,
    visible: torch.Tensor,
    channels: torch.Tensor,
    sigma: float,
    downscale: int = 4,
) -> tuple[torch.Tensor, ...]:
    """`pose_batch`'s output as the pose loss (`losses.loss_of`) takes it, less the channels it adds: (pixels
    [B, 3, H, W], heatmaps [B, L, h, w] and weights [B, L] of the L keypoints `channels` the data labels; never
    `channels` itself, which a worker keeps for its next batch and must not send). The others weigh
    nothing in the loss, so they are neither drawn nor compared: a COCO set labels 17 of the 308, and drawing all
    308 made most of a batch's work. Made on the crops' device (heatmaps are far more to copy than keypoints)."""
    h, w = crops.shape[1] // downscale, crops.shape[2] // downscale
    heatmaps, inside = gaussian_heatmaps(mus[:, channels], (h, w), sigma)
    weights = (visible[:, channels] & inside).float()
    return normalise(crops), heatmaps * weights[..., None, None], weights


def dense_batch(
    data: DenseSet, items: np.ndarray, kind: str, size: tuple[int, int], rng: np.random.Generator, jitter: Jitter
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pixels uint8 [B, H, W, 3], targets) for the pictures `items`, each fed as the pipeline feeds its task: seg
    and matting stretched to the input size (targets [B, H, W]: class ids, long, or alpha), normal and pointmap
    fitted into it and centre-padded (targets [B, H, W, 3], NaN on the padding and where truth is missing).
    A flip swaps the part labels' sides, and mirrors the normals' and points' x. `kind` is the task's `truth`
    (a worker process knows no task registered at run time, so it is given the kind, not the task's name)."""
    h, w = size
    vectors = kind in ("normals", "points")
    swap = np.asarray(seg_metadata().flip_indices)
    pixels = np.zeros((len(items), h, w, 3), np.uint8)
    shape = (len(items), h, w, 3) if vectors else (len(items), h, w)
    targets = np.zeros(shape, np.int64 if kind == "classes" else np.float32)
    for n, i in enumerate(items):
        image, target = data.images[i], data.targets[i]
        ih, iw = image.shape[:2]
        flip = rng.random() < jitter.flip
        _, _, ch, cw = content_box((ih, iw), size, keep_aspect=vectors)
        window = np.array([iw * (w - 1) / cw, ih * (h - 1) / ch])  # scale cw / iw about the centre, as a resize
        m = _affine(np.array([(iw - 1) / 2, (ih - 1) / 2]), window, size, rng, jitter, flip)
        pixels[n] = cv2.warpAffine(image, m, (w, h), flags=cv2.INTER_LINEAR)
        if kind == "classes":
            t = cv2.warpAffine(target, m, (w, h), flags=cv2.INTER_NEAREST, borderValue=0)
            targets[n] = np.where(t == IGNORE, IGNORE, swap[np.minimum(t, len(swap) - 1)] if flip else t)
        elif vectors:  # nearest: a point between a person and the wall behind is neither
            nan = (np.nan,) * 3
            targets[n] = cv2.warpAffine(target, m, (w, h), flags=cv2.INTER_NEAREST, borderValue=nan)
            if flip:
                targets[n, ..., 0] *= -1
        else:
            targets[n] = cv2.warpAffine(target, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=0)
    pixels = colour_jitter(pixels, rng, jitter.colour)
    return torch.from_numpy(pixels), torch.from_numpy(targets)
