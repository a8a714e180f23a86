"""Steady dense outputs over time: a causal stabiliser for mattes, part labels, normals and depth (no frame of delay).

Sapiens2 computes every frame on its own, so on video its dense outputs flicker where the model is unsure (hair,
edges, part boundaries). `DenseStabilizer` keeps one output of history and, for each new frame:

1. measures the motion from the previous frame to this one with optical flow (OpenCV DIS at its fastest preset, on
   a picture `flow_width` pixels wide) and warps the history onto the current frame;
2. trusts that warped history only where the warped previous picture looks like the current one
   (`exp(-(error / tau)**2)`): moving edges, occlusions and wrong flow follow the new output, static regions blend
   (the new output weighs `new_weight` where the history is trusted);
3. then per kind: alpha through an edge-preserving guided filter (the frame as guide; the history keeps the
   blend before it, so the filter does not compound from frame to frame); part-label probabilities
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
from collections.abc import Sequence

import cv2
import numpy as np

KINDS = ("alpha", "seg", "normal", "depth")
MIN_CORRELATION = 0.5  # below this between the warped previous picture and this one: another scene
GUIDE_RADIUS, GUIDE_EPS = 1, 1e-4  # the alpha's guided filter: 3x3 windows, edges of a 1% contrast kept


class Motion:
    """The motion from the previous frame to this one, measured once per frame: one per source, shared by that
    source's stabilisers (each `DenseStabilizer` makes its own when none is given).

    `update(frame)` measures it; `step` is then the warp and the trust for the frame, or None when the history must
    go (the first frame, a scene cut, a brightness jump, a move the flow cannot follow)."""

    def __init__(self, flow_width: int = 320, tau: float = 0.02, cut: float = 0.2, brightness: float = 0.1,
                 min_trust: float = 0.25) -> None:  # fmt: skip
        self.flow_width, self.tau, self.cut = flow_width, tau, cut
        self.brightness, self.min_trust = brightness, min_trust
        self.flow = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST)
        self.gray: np.ndarray | None = None  # the previous picture, small, 0-1
        self.frame_size: tuple[int, int] = (0, 0)
        self.step: Step | None = None
        self.count = 0  # frames measured: a stabiliser's history is usable when it is from the frame before

    def reset(self) -> None:
        self.gray, self.step = None, None

    def update(self, frame_rgb: np.ndarray, forget: Sequence[Sequence[float]] = ()) -> Step | None:
        """Measure the motion to `frame_rgb`. `forget`: boxes (x, y, w, h, frame pixels) where no history is
        trusted, such as a person who just appeared or was just lost."""
        gray = small_gray(frame_rgb, self.flow_width)
        previous, self.gray = self.gray, gray
        self.count += 1
        self.frame_size = frame_rgb.shape[:2]
        self.step = None
        if previous is None or previous.shape != gray.shape:
            return None
        if abs(float(gray.mean() - previous.mean())) > self.brightness or np.abs(gray - previous).mean() > self.cut:
            return None
        flow = self.flow.calc(to_u8(gray), to_u8(previous), None)  # each pixel here: where it was before
        gh, gw = gray.shape
        back = np.stack(np.meshgrid(np.arange(gw, dtype=np.float32), np.arange(gh, dtype=np.float32)), -1) + flow
        warped = cv2.remap(previous, back[..., 0], back[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        trust = np.exp(-(((warped - gray) / self.tau) ** 2)).astype(np.float32)
        if trust.mean() < self.min_trust or correlation(warped, gray) < MIN_CORRELATION:
            return None  # the motion does not explain this picture: a new scene or a move too fast
        sx, sy = gw / self.frame_size[1], gh / self.frame_size[0]
        for x, y, w, h in forget:
            top, left = max(0, int(y * sy)), max(0, int(x * sx))
            trust[top : int(np.ceil((y + h) * sy)), left : int(np.ceil((x + w) * sx))] = 0
        self.step = Step(trust, back)
        return self.step


class Step:
    """One frame's motion: the trust in the warped history and the map that warps the history onto the frame, at
    the flow's size, scaled to an output's size on request (once per size)."""

    def __init__(self, trust: np.ndarray, back: np.ndarray) -> None:
        self.trust, self.back = trust, back
        self.sized: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def at(self, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(trust [h, w], warp map [h, w, 2]) for an output of `size`."""
        if size not in self.sized:
            h, w = size
            gh, gw = self.trust.shape
            full = cv2.resize(self.back, (w, h), interpolation=cv2.INTER_LINEAR)
            full[..., 0] = (full[..., 0] + 0.5) * (w / gw) - 0.5
            full[..., 1] = (full[..., 1] + 0.5) * (h / gh) - 0.5
            self.sized[size] = cv2.resize(self.trust, (w, h), interpolation=cv2.INTER_LINEAR), full
        return self.sized[size]


class DenseStabilizer:
    def __init__(
        self, kind: str, new_weight: float = 0.4, tau: float = 0.02, margin: float = 0.1, flow_width: int = 320,
        cut: float = 0.2, brightness: float = 0.1, min_trust: float = 0.25, motion: Motion | None = None,
        refine: bool = True,
    ) -> None:  # fmt: skip
        """`cut`: a mean change of the (0-1) picture above this is a new scene; `brightness`: a change of the mean
        brightness above this drops the history too; `min_trust`: below this mean trust in the warped history the
        flow is taken to have failed (a fast camera move). `motion`: a source's shared `Motion`, which its owner
        updates once per frame before calling the stabilisers (then tau, flow_width, cut, brightness and min_trust
        are the motion's). `refine`: the alpha's guided filter (off: the caller refines, e.g. at another size)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        self.kind, self.new_weight, self.margin, self.refine = kind, new_weight, margin, refine
        self.own_motion = motion is None
        self.motion = motion or Motion(flow_width, tau, cut, brightness, min_trust)
        self.history: np.ndarray | None = None  # the previous output, float32, channels last
        self.labels: np.ndarray | None = None  # seg: the labels of the latest output
        self.seen = -1  # the motion's count at the history
        self.steadied = False  # whether the latest output used the history (False: it is the model's own)
        self.resets = 0
        self.frames = 0
        self.seconds = 0.0

    def reset(self) -> None:
        """Forget the history: the next output is the model's own."""
        self.history = self.labels = None
        if self.own_motion:
            self.motion.reset()

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
        step = self.motion.update(frame_rgb) if self.own_motion else self.motion.step
        current, logits = self._internal(value)
        h, w = current.shape[:2]
        usable = self.history is not None and self.history.shape == current.shape and self.seen == self.motion.count - 1
        self.steadied = step is not None and usable
        if not self.steadied:  # a cut, a jump, a move the flow cannot follow, or no history
            self.resets += self.history is not None
            self._keep(np.array(current, np.float32))  # a copy: the caller may reuse its array
            return value
        trust, warp_map = step.at((h, w))
        warped = cv2.remap(self.history, warp_map, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        warped = warped.reshape(current.shape)
        weight = ((1.0 - self.new_weight) * trust).reshape(h, w, *([1] * (current.ndim - 2)))
        if self.kind == "depth":
            warped = aligned(warped, current, trust)
        blended = current + weight * (warped - current)
        labels = None
        if self.kind == "seg":
            previous = cv2.remap(self.labels, warp_map, None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_REPLICATE)
            blended, labels = self._hysteresis(blended, previous.astype(np.int64))
        elif self.kind == "normal":
            blended = unit_vectors(blended)
        self._keep(blended, labels)  # the alpha's history is the blend, before the guided filter
        if self.kind == "alpha" and self.refine:
            blended = refined_alpha(frame_rgb, blended[..., 0])[..., None]
        return self._external(blended, value, logits)

    def _hysteresis(self, probabilities: np.ndarray, previous: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A pixel keeps its previous class unless the new winner beats it by `margin`; where it keeps it, the two
        probabilities trade places, so the returned probabilities say the class that was kept. Also the labels."""
        winner = probabilities.argmax(-1)
        p_win = np.take_along_axis(probabilities, winner[..., None], -1)[..., 0]
        p_prev = np.take_along_axis(probabilities, previous[..., None], -1)[..., 0]
        keep = (winner != previous) & (p_win - p_prev < self.margin)
        rows, cols = np.nonzero(keep)
        probabilities[rows, cols, winner[keep]], probabilities[rows, cols, previous[keep]] = p_prev[keep], p_win[keep]
        return probabilities, np.where(keep, previous, winner)

    def _keep(self, current: np.ndarray, labels: np.ndarray | None = None) -> None:
        self.history, self.seen = np.ascontiguousarray(current), self.motion.count
        if self.kind == "seg":
            self.labels = (current.argmax(-1) if labels is None else labels).astype(np.float32)

    # ------------------------------------------------------------------------------------------- the kinds

    def _internal(self, value: np.ndarray) -> tuple[np.ndarray, bool]:
        """The value as float32 HxWxC (never changed in place: it may be the caller's); seg: probabilities (and
        whether logits came)."""
        v = np.asarray(value, np.float32)
        if self.kind in ("alpha", "depth"):
            return v[..., None], False
        if self.kind == "normal":
            return v, False
        probabilities = np.array(np.moveaxis(v, 0, -1), order="C")  # a copy, made in place into probabilities
        sample = probabilities[::7, ::7]
        logits = bool(sample.min() < 0 or sample.max() > 1 or not np.allclose(sample.sum(-1), 1.0, atol=1e-3))
        if logits:
            probabilities -= probabilities.max(-1, keepdims=True)
            np.exp(probabilities, out=probabilities)
            probabilities /= probabilities.sum(-1, keepdims=True)
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


def unit_vectors(v: np.ndarray) -> np.ndarray:
    """HxWx3 vectors scaled to unit length, in place (numpy's norm over a last axis of three is several times
    slower than these three products)."""
    v /= np.maximum(np.sqrt(v[..., 0] ** 2 + v[..., 1] ** 2 + v[..., 2] ** 2), 1e-6)[..., None]
    return v


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised cross-correlation of two pictures (1: the same up to brightness and contrast)."""
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / max(np.sqrt((a * a).sum() * (b * b).sum()), 1e-12))


def to_u8(gray: np.ndarray) -> np.ndarray:
    return (gray * 255.0 + 0.5).astype(np.uint8)


def refined_alpha(frame_rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """The alpha through an edge-preserving guided filter, the frame's own edges (grey, at the alpha's size) as
    the guide: what blending softened at the person's edges comes back sharp."""
    h, w = alpha.shape
    guide = cv2.cvtColor(np.ascontiguousarray(frame_rgb), cv2.COLOR_RGB2GRAY)
    if guide.shape != (h, w):
        guide = cv2.resize(guide, (w, h), interpolation=cv2.INTER_AREA)
    refined = guided_filter(guide.astype(np.float32) / 255.0, alpha.astype(np.float32), GUIDE_RADIUS, GUIDE_EPS)
    return np.clip(refined, 0.0, 1.0)


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
