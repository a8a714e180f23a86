"""What a teacher is sure of: the keypoints `label` keeps. A pseudo-label the teacher got wrong teaches the student
the teacher's mistake, so a keypoint is kept only where three independent signs agree that the teacher saw it:

- its score (the heatmap's peak) is high enough on both the plain and the mirrored forward;
- the two forwards put it in the same place (a model that sees a point clearly finds it mirrored too; where it
  guesses, as with a hidden wrist or left and right on a side view, the two guesses part);
- it moves steadily: the run put it, in the track's neighbouring frames, where the midpoint of those frames says
  (a keypoint that jumps to another limb for one frame fails this, one that follows the body passes).

Distances are shares of the box's longer side, as PCK measures them, so one rule fits near and far people."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from ..io.records import RecordedFrame

NEIGHBOUR_FRAMES = 2  # a neighbour is at most this many frames away in the track (a dropped frame is allowed)


@dataclass(frozen=True)
class Sureness:
    min_score: float = 0.5  # the lower of the two forwards' heatmap peaks
    max_flip_gap: float = 0.05  # plain against mirrored forward, of the box's longer side
    max_jump: float = 0.05  # off the neighbouring frames' midpoint, of the box's longer side
    min_keypoints: int = 4  # a person with fewer sure keypoints is left out


def box_side(box) -> float:
    """A COCO xywh box's longer side (px)."""
    return float(max(box[2], box[3], 1.0))


def sure_keypoints(scores: np.ndarray, flip_gap: np.ndarray, jump: np.ndarray, box, wanted: np.ndarray,
                   rules: Sureness) -> np.ndarray:  # fmt: skip
    """[308] bool: the `wanted` keypoints that pass every rule (all arrays [308]; `jump` inf where the neighbours
    are not known)."""
    side = box_side(box)
    return wanted & (scores >= rules.min_score) & (flip_gap <= rules.max_flip_gap * side) & (
        jump <= rules.max_jump * side)  # fmt: skip


class TrackSteadiness:
    """Each track's keypoints over a run (frame, time, [308, 2]), to ask how far a frame's keypoints are from where
    the track's neighbouring frames put them."""

    def __init__(self, records: list[RecordedFrame]) -> None:
        self.tracks: dict[int, list[tuple[int, float, np.ndarray]]] = {}
        for r in records:
            for p in r.people:
                if p.keypoints is not None:
                    self.tracks.setdefault(p.track_id, []).append((r.frame, r.pts, p.keypoints.astype(np.float32)))
        for seen in self.tracks.values():
            seen.sort(key=lambda item: item[0])

    def jump(self, track_id: int, frame: int) -> np.ndarray:
        """[308] px between the track's keypoints at `frame` and the line through its neighbours before and after
        (at its time between them); inf where a neighbour is missing."""
        seen = self.tracks.get(track_id, [])
        frames = [f for f, _, _ in seen]
        i = bisect_left(frames, frame)
        if not (0 < i < len(seen) - 1) or frames[i] != frame:
            return np.full(308, np.inf, np.float32)
        (f0, t0, k0), (_, t, k), (f1, t1, k1) = seen[i - 1], seen[i], seen[i + 1]
        if frame - f0 > NEIGHBOUR_FRAMES or f1 - frame > NEIGHBOUR_FRAMES or t1 <= t0:
            return np.full(308, np.inf, np.float32)
        expected = k0 + (k1 - k0) * ((t - t0) / (t1 - t0))
        distance = np.linalg.norm(k - expected, axis=-1)
        return np.where(np.isfinite(distance), distance, np.inf).astype(np.float32)
