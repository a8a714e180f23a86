"""The temporal filter in a run: the `temporal:` section applied to each result of a source, in frame order, on
the source's writer thread, before anything is written (so the videos, the console, the virtual camera and the
maps all get the steady outputs, and no frame waits for a later one).

One `Motion` per source, measured once per frame and shared by that source's stabilisers (one per output). The
history is not trusted where a person just appeared or was just lost (their boxes, a little enlarged): the
stabiliser would otherwise blend a person into the background they left, or the reverse. Every dense output here
is of the whole frame, so the state is per source; no output is per person.

How each output is filtered (see `sapiens2_stream.temporal`): the matte as alpha, the foreground kept premultiplied
by the new alpha; part labels on class probabilities at `seg_width`, enlarged to the frame as the engine enlarges
logits; normals as unit vectors; the pointmap through its depth, each point moved along its ray. A matte, normals
or depth wider than `width` is filtered at that width and the change enlarged (the cost of a 1280x720 frame is
then that of 640x360).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import cv2
import numpy as np

from ..io.options import SourceConfig
from ..io.source_kinds import source_kind
from ..models import TaskSpec, pipeline_tasks
from ..processing.dense import reduced_size
from ..temporal import DenseStabilizer, Motion, refined_alpha, unit_vectors
from .results import FrameResult
from .task_sections import TemporalConfig, temporal_outputs

SEEN_ALPHA = 0.01  # below this the model's foreground colour is not trusted (the frame's colour is used)
FORGET_MARGIN = 0.1  # a new or lost person's box, enlarged by this share on each side
MAX_DEPTH_CHANGE = (0.5, 2.0)  # a point moves along its ray by at most this factor (its depth's steady / own)


def filtered_outputs(t: TemporalConfig, models: Iterable[str], source: SourceConfig) -> list[str]:
    """The outputs a source's temporal filter steadies, with these models running: `on`, or `auto` for anything
    but a folder of photos (separate pictures have no motion between them to follow)."""
    moving = source_kind(source).name != "images"
    return [out for out, model in temporal_outputs().items()
            if model in models and (getattr(t, out) == "on" or (getattr(t, out) == "auto" and moving))]  # fmt: skip


def filtered_tasks() -> dict[str, TaskSpec]:
    """Each temporal switch's task (the table's `temporal` entries): its stabiliser kind and result arrays."""
    return {spec.temporal.key: spec for spec in pipeline_tasks() if spec.temporal}


class TemporalFilter:
    """A source's temporal filters; `apply(result)` changes the result's dense outputs in place."""

    def __init__(self, cfg: TemporalConfig, outputs: list[str]) -> None:
        self.width = cfg.width
        self.motion = Motion(cfg.flow_width, cfg.tau)
        tasks = filtered_tasks()
        # the matte's guided filter runs here, at full size, after the working width's change is added
        self.stabilisers = {out: DenseStabilizer(tasks[out].temporal.kind, cfg.new_weight, margin=cfg.margin,
                                                 motion=self.motion, refine=False) for out in outputs}  # fmt: skip
        self.fields = {out: tasks[out].results for out in outputs}  # the result arrays each one steadies
        self.by_kind = {"alpha": self._alpha, "seg": self._seg, "normal": self._normal, "depth": self._depth}
        self.seconds = dict.fromkeys(["flow", *outputs], 0.0)
        self.frames = 0
        self.boxes: dict[int, np.ndarray] = {}  # each person's latest box
        self.small_frame: np.ndarray | None = None  # this frame at the working width

    def apply(self, result: FrameResult) -> None:
        start = time.perf_counter()
        self.motion.update(result.frame.rgb, self._people_changed(result))
        self.small_frame = None
        self.frames += 1
        self.seconds["flow"] += time.perf_counter() - start
        for out, stab in self.stabilisers.items():
            start = time.perf_counter()
            self.by_kind[stab.kind](stab, result, *self.fields[out])
            self.seconds[out] += time.perf_counter() - start

    def _people_changed(self, result: FrameResult) -> list[np.ndarray]:
        """The enlarged boxes of the people who appeared in this result and of those whose tracks ended."""
        changed = [self.boxes.pop(t) for t in result.ended_tracks if t in self.boxes]
        for p in result.people:
            if p.track_id not in self.boxes:
                changed.append(np.asarray(p.box, np.float32))
            self.boxes[p.track_id] = np.asarray(p.box, np.float32)
        return [b + FORGET_MARGIN * np.array([-b[2], -b[3], 2 * b[2], 2 * b[3]], np.float32) for b in changed]

    def _steady(self, stab: DenseStabilizer, frame: np.ndarray, value: np.ndarray) -> np.ndarray:
        """`stab` applied to an HxW or HxWxC `value`; one wider than `width` is filtered at that width, and what the
        filter changed there, enlarged, is added to it (its own detail kept; the cost no longer grows with the
        frame). Unchanged where the filter had no history to use."""
        h, w = value.shape[:2]
        if w <= self.width:
            return stab(frame, value)
        size = reduced_size((h, w), self.width)[::-1]  # (w, h), as OpenCV takes sizes
        if self.small_frame is None:
            self.small_frame = cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
        small = cv2.resize(value, size, interpolation=cv2.INTER_AREA)
        steady = stab(self.small_frame, small)
        if not stab.steadied:
            return value
        return value + cv2.resize(steady - small, (w, h), interpolation=cv2.INTER_LINEAR)

    # ------------------------------------------------------------------------------------------- the outputs

    def _alpha(self, stab: DenseStabilizer, result: FrameResult, alpha: str, foreground: str | None = None) -> None:
        """A matte (`alpha`, HxW in 0-1) and its premultiplied colour (`foreground`), when the task gives one."""
        before = getattr(result, alpha, None)
        if before is None:
            return
        steady = self._steady(stab, result.frame.rgb, before)
        after = refined_alpha(result.frame.rgb, steady) if stab.steadied else before
        setattr(result, alpha, after)
        colour = getattr(result, foreground, None) if foreground else None
        if colour is not None:  # premultiplied: its colour kept, scaled to the steady alpha
            seen = before > SEEN_ALPHA
            ratio = np.divide(after, before, out=np.zeros_like(before), where=seen)
            colour = colour * ratio[..., None]
            unseen = ~seen & (after > SEEN_ALPHA)  # the history put alpha where the model saw none
            if unseen.any():
                colour[unseen] = result.frame.rgb[unseen] * (after[unseen, None] / np.float32(255))
            setattr(result, foreground, colour)

    def _seg(self, stab: DenseStabilizer, result: FrameResult, labels: str, probabilities: str) -> None:
        """Part labels (`labels`, HxW) steadied on the class probabilities the engine gives at `seg_width`."""
        small = getattr(result, probabilities, None)
        setattr(result, probabilities, None)  # no output needs them after this
        full = getattr(result, labels, None)
        if small is None or full is None:
            return
        steady = np.moveaxis(stab(result.frame.rgb, small), 0, -1)
        if stab.steadied:  # else the model's own labels at full size stay
            setattr(result, labels, upsampled_labels(steady, stab.labels.astype(np.uint8), full.shape))

    def _normal(self, stab: DenseStabilizer, result: FrameResult, field: str) -> None:
        """Unit vectors (HxWx3)."""
        normals = getattr(result, field, None)
        if normals is not None:
            normals = self._steady(stab, result.frame.rgb, normals)
            if stab.steadied and normals.shape[1] > self.width:  # the change was enlarged: unit length again
                normals = unit_vectors(normals)  # (at the working width or below the stabiliser renormalised)
            setattr(result, field, normals)

    def _depth(self, stab: DenseStabilizer, result: FrameResult, field: str) -> None:
        """A pointmap (HxWx3) steadied through its depth, each point moved along its ray."""
        pointmap = getattr(result, field, None)
        if pointmap is None:
            return
        depth = pointmap[..., 2]
        steady = self._steady(stab, result.frame.rgb, depth)
        if not stab.steadied:
            return  # the model's own points
        ahead = depth > 1e-6  # points behind the camera (a model's mistake) are left as they are
        ratio = np.clip(np.where(ahead, steady / np.where(ahead, depth, 1.0), 1.0), *MAX_DEPTH_CHANGE)
        setattr(result, field, (pointmap * ratio[..., None]).astype(np.float32))

    # ------------------------------------------------------------------------------------------- numbers

    def summary(self) -> dict:
        """Per output the cost per frame and how often the history was dropped; the shared flow's cost."""
        per_frame = {k: round(1e3 * s / max(self.frames, 1), 2) for k, s in self.seconds.items()}
        return {
            "flow_ms_per_frame": per_frame["flow"],
            **{out: {"ms_per_frame": per_frame[out], "resets": stab.resets} for out, stab in self.stabilisers.items()},
        }


def upsampled_labels(probabilities: np.ndarray, labels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The labels of `probabilities` ([h, w, C]) bilinearly enlarged to `size` (half-pixel centres, as the engine
    enlarges the model's logits), argmax taken: enlarging 29 classes to a whole frame would cost too much, so the
    class is computed only where the four nearest small pixels disagree (part boundaries), among their classes (a
    class that wins none of the four and yet wins their blend is missed: rare); elsewhere it is their common
    `labels` ([h, w]) class, which is exact."""
    (h, w), (H, W) = labels.shape, size
    (y0, y1, fy), (x0, x1, fx) = neighbours(h, H), neighbours(w, W)
    out = labels[y0][:, x0]
    differs = (out != labels[y0][:, x1]) | (out != labels[y1][:, x0]) | (out != labels[y1][:, x1])
    rows, cols = np.nonzero(differs)
    if rows.size:
        classes = probabilities.shape[-1]
        flat, flat_labels = probabilities.reshape(-1), labels.reshape(-1)
        corners = [(y0[rows] * w + x0[cols]), (y0[rows] * w + x1[cols]), (y1[rows] * w + x0[cols]),
                   (y1[rows] * w + x1[cols])]  # fmt: skip
        wy, wx = fy[rows], fx[cols]
        weights = [(1 - wy) * (1 - wx), (1 - wy) * wx, wy * (1 - wx), wy * wx]
        candidates = [flat_labels.take(corner) for corner in corners]
        scores = [sum(weight * flat.take(corner * classes + c) for weight, corner in zip(weights, corners, strict=True))
                  for c in candidates]  # fmt: skip
        best = np.argmax(np.stack(scores), axis=0)
        out[rows, cols] = np.stack(candidates)[best, np.arange(rows.size)]
    return out


def neighbours(small: int, large: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each of `large` positions: the two nearest of `small` positions and the second's weight, as bilinear
    resizing with half-pixel centres places them (edges clamped)."""
    position = np.clip((np.arange(large) + 0.5) * small / large - 0.5, 0, small - 1)
    first = np.floor(position).astype(np.int64)
    return first, np.minimum(first + 1, small - 1), (position - first).astype(np.float32)
