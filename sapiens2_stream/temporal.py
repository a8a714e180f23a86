"""Steady dense outputs over time: a causal stabiliser for mattes, part labels, normals and depth (no frame of delay).

Sapiens2 computes every frame on its own, so on video its dense outputs flicker where the model is unsure (hair,
edges, part boundaries). `DenseStabilizer` keeps one output of history and, for each new frame:

1. measures the motion from the previous frame to this one with optical flow (OpenCV DIS at its fastest preset, on
   a picture `flow_width` pixels wide) and warps the history onto the current frame;
2. trusts that warped history only where the warped previous picture looks like the current one
   (`exp(-(error / tau)**2)`): moving edges, occlusions and wrong flow follow the new output, static regions blend
   (the new output weighs `new_weight` where the history is trusted);
3. then per kind: alpha through an edge-preserving guided filter (the frame as guide); part-label probabilities
   with hysteresis (a pixel changes class only when the new class wins by `margin`); normals renormalised; depth
   aligned in scale and shift to the current frame before blending (per-frame depth has its own scale).

The history is dropped (the output is the new one, unchanged) on a scene cut, a brightness jump, and a camera move
the flow cannot follow; a caller drops it itself (`reset()`) when the person it follows is new or lost.

    from sapiens2_stream.temporal import DenseStabilizer
    stab = DenseStabilizer("alpha")        # or "seg" (CxHxW probabilities or logits), "normal" (HxWx3), "depth"
    steady = stab(frame_rgb, alpha)        # same shape and dtype as alpha
"""

from __future__ import annotations

import time

import cv2
import numpy as np

KINDS = ("alpha", "seg", "normal", "depth")
MIN_CORRELATION = 0.5  # below this between the warped previous picture and this one: another scene
GUIDE_RADIUS, GUIDE_EPS = 1, 1e-4  # the alpha's guided filter: 3x3 windows, edges of a 1% contrast kept


class DenseStabilizer:
    def __init__(
        self, kind: str, new_weight: float = 0.4, tau: float = 0.02, margin: float = 0.1, flow_width: int = 320,
        cut: float = 0.2, brightness: float = 0.1, min_trust: float = 0.25,
    ) -> None:  # fmt: skip
        """`cut`: a mean change of the (0-1) picture above this is a new scene; `brightness`: a change of the mean
        brightness above this drops the history too; `min_trust`: below this mean trust in the warped history the
        flow is taken to have failed (a fast camera move)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        self.kind, self.new_weight, self.tau, self.margin = kind, new_weight, tau, margin
        self.flow_width, self.cut, self.brightness, self.min_trust = flow_width, cut, brightness, min_trust
        self.flow = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST)
        self.gray: np.ndarray | None = None  # the previous picture, small, 0-1
        self.history: np.ndarray | None = None  # the previous output, float32, channels last
        self.labels: np.ndarray | None = None  # seg: the previous labels
        self.resets = 0
        self.frames = 0
        self.seconds = 0.0

    def reset(self) -> None:
        """Forget the history: the next output is the model's own."""
        self.gray = self.history = self.labels = None

    @property
    def ms_per_frame(self) -> float:
        return 1e3 * self.seconds / max(self.frames, 1)

    def __call__(self, frame_rgb: np.ndarray, value: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        try:
            return self._stabilise(frame_rgb, value)
        finally:
            self.frames += 1
            self.seconds += time.perf_counter() - start

    # ------------------------------------------------------------------------------------------- the steps

    def _stabilise(self, frame_rgb: np.ndarray, value: np.ndarray) -> np.ndarray:
        gray = small_gray(frame_rgb, self.flow_width)
        current, logits = self._internal(value)
        h, w = current.shape[:2]
        trust = None
        if self.history is not None and self.history.shape == current.shape and self.gray.shape == gray.shape:
            trust, warp_map = self._motion(gray, (h, w))
        if trust is None:  # no history, a cut, a jump or a move the flow cannot follow: the new output as it is
            self.resets += self.history is not None
            self._keep(gray, current)
            return value
        warped = cv2.remap(self.history, warp_map, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        warped = warped.reshape(current.shape)
        weight = ((1.0 - self.new_weight) * trust).reshape(h, w, *([1] * (current.ndim - 2)))
        if self.kind == "depth":
            warped = aligned(warped, current, trust)
        blended = weight * warped + (1.0 - weight) * current
        if self.kind == "seg":
            previous = cv2.remap(self.labels, warp_map, None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_REPLICATE)
            blended = self._hysteresis(blended, previous)
        elif self.kind == "normal":
            blended /= np.maximum(np.linalg.norm(blended, axis=-1, keepdims=True), 1e-6)
        elif self.kind == "alpha":  # the frame's own edges, at the matte's size, as the guide
            guide = cv2.cvtColor(np.ascontiguousarray(frame_rgb), cv2.COLOR_RGB2GRAY)
            if guide.shape != (h, w):
                guide = cv2.resize(guide, (w, h), interpolation=cv2.INTER_AREA)
            refined = guided_filter(guide.astype(np.float32) / 255.0, blended[..., 0], GUIDE_RADIUS, GUIDE_EPS)
            blended = np.clip(refined, 0.0, 1.0)[..., None]
        self._keep(gray, blended)
        return self._external(blended, value, logits)

    def _motion(self, gray: np.ndarray, size: tuple[int, int]):
        """(trust [H, W] in the warped history, the map that warps the history onto this frame), or (None, None)
        when the history must go."""
        previous = self.gray
        if abs(float(gray.mean() - previous.mean())) > self.brightness or np.abs(gray - previous).mean() > self.cut:
            return None, None
        flow = self.flow.calc(to_u8(gray), to_u8(previous), None)  # each pixel here: where it was before
        gh, gw = gray.shape
        grid = np.stack(np.meshgrid(np.arange(gw, dtype=np.float32), np.arange(gh, dtype=np.float32)), -1)
        back = grid + flow
        warped_gray = cv2.remap(previous, back[..., 0], back[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        trust = np.exp(-((warped_gray - gray) / self.tau) ** 2).astype(np.float32)
        if trust.mean() < self.min_trust or correlation(warped_gray, gray) < MIN_CORRELATION:
            return None, None  # the motion does not explain this picture: a new scene or a move too fast
        h, w = size
        sx, sy = w / gw, h / gh
        full = cv2.resize(back, (w, h), interpolation=cv2.INTER_LINEAR)
        full[..., 0] = (full[..., 0] + 0.5) * sx - 0.5
        full[..., 1] = (full[..., 1] + 0.5) * sy - 0.5
        return cv2.resize(trust, (w, h), interpolation=cv2.INTER_LINEAR), full

    def _hysteresis(self, probabilities: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """A pixel keeps its previous class unless the new winner beats it by `margin`; where it keeps it, the two
        probabilities trade places, so the returned probabilities say the class that was kept."""
        winner, previous = probabilities.argmax(-1), previous.astype(np.int64)
        p_win = np.take_along_axis(probabilities, winner[..., None], -1)[..., 0]
        p_prev = np.take_along_axis(probabilities, previous[..., None], -1)[..., 0]
        keep = (winner != previous) & (p_win - p_prev < self.margin)
        out = probabilities.copy()
        rows, cols = np.nonzero(keep)
        out[rows, cols, winner[keep]], out[rows, cols, previous[keep]] = p_prev[keep], p_win[keep]
        return out

    def _keep(self, gray: np.ndarray, current: np.ndarray) -> None:
        self.gray, self.history = gray, np.ascontiguousarray(current, np.float32)
        if self.kind == "seg":
            self.labels = current.argmax(-1).astype(np.float32)

    # ------------------------------------------------------------------------------------------- the kinds

    def _internal(self, value: np.ndarray) -> tuple[np.ndarray, bool]:
        """The value as float32 HxWxC; seg: probabilities (and whether logits came)."""
        v = np.asarray(value, np.float32)
        if self.kind in ("alpha", "depth"):
            return v[..., None], False
        if self.kind == "normal":
            return v, False
        probabilities = np.moveaxis(v, 0, -1)
        logits = bool(probabilities.min() < 0 or probabilities.max() > 1
                      or not np.allclose(probabilities.sum(-1), 1.0, atol=1e-3))  # fmt: skip
        if logits:
            e = np.exp(probabilities - probabilities.max(-1, keepdims=True))
            probabilities = e / e.sum(-1, keepdims=True)
        return probabilities, logits

    def _external(self, result: np.ndarray, value: np.ndarray, logits: bool) -> np.ndarray:
        """Back to the caller's layout and dtype (seg: logits if logits came)."""
        if self.kind in ("alpha", "depth"):
            result = result[..., 0]
        elif self.kind == "seg":
            result = np.moveaxis(np.log(np.maximum(result, 1e-12)) if logits else result, -1, 0)
        return result.astype(value.dtype, copy=False)


def small_gray(frame_rgb: np.ndarray, width: int) -> np.ndarray:
    """The frame in grey, 0-1, `width` pixels wide (never enlarged)."""
    h, w = frame_rgb.shape[:2]
    gray = cv2.cvtColor(np.ascontiguousarray(frame_rgb), cv2.COLOR_RGB2GRAY)
    if w > width:
        gray = cv2.resize(gray, (width, max(1, round(h * width / w))), interpolation=cv2.INTER_AREA)
    return gray.astype(np.float32) / 255.0


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised cross-correlation of two pictures (1: the same up to brightness and contrast)."""
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / max(np.sqrt((a * a).sum() * (b * b).sum()), 1e-12))


def to_u8(gray: np.ndarray) -> np.ndarray:
    return (gray * 255.0 + 0.5).astype(np.uint8)


def guided_filter(guide: np.ndarray, src: np.ndarray, radius: int, eps: float) -> np.ndarray:
    """He et al.'s guided filter with box means (edges of `guide` kept in the smoothed `src`)."""
    size = (2 * radius + 1, 2 * radius + 1)

    def mean(a):
        return cv2.boxFilter(a, cv2.CV_32F, size, borderType=cv2.BORDER_REFLECT)

    mean_i, mean_p = mean(guide), mean(src)
    cov = mean(guide * src) - mean_i * mean_p
    var = mean(guide * guide) - mean_i * mean_i
    a = cov / (var + eps)
    b = mean_p - a * mean_i
    return mean(a) * guide + mean(b)


def aligned(history: np.ndarray, current: np.ndarray, trust: np.ndarray) -> np.ndarray:
    """The history in the current frame's depth scale: s * history + b fitted (weighted by trust) to the current."""
    x, y, w = history.reshape(-1), current.reshape(-1), trust.reshape(-1) + 1e-6
    mx, my = np.average(x, weights=w), np.average(y, weights=w)
    var = np.average((x - mx) ** 2, weights=w)
    scale = np.average((x - mx) * (y - my), weights=w) / var if var > 1e-12 else 1.0
    return (scale * (history - mx) + my).astype(np.float32)
