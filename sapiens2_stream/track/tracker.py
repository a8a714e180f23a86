"""Person identities across frames: IoU plus motion association in the ByteTrack style.

Each track predicts its box forward with a constant velocity of its centre, keeping its size. The velocity is
the slope of a straight line through the centres of the last `VELOCITY_WINDOW_S` (real times): a walking
person's box edges jitter with the arms and legs every frame, and one frame's difference, carried over the gap of
a live source's dropped frames, misses the person by more than their width. Confident detections are matched
first, the remaining tracks then try the weak detections (people partly hidden keep their id), unmatched
confident detections start tracks, and tracks unseen for `max_lost_s` end. Between detector runs the predicted
boxes carry the ids forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from .options import TrackerConfig

VELOCITY_WINDOW_S = 0.6  # a track's velocity: the straight line through its centres of this long


@dataclass
class Track:
    track_id: int
    box: np.ndarray  # xywh at last_t
    score: float
    last_t: float
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(2, np.float32))  # d(centre)/dt, pixels/s
    hits: int = 1
    seen: list = field(init=False)  # (t, centre x, centre y) of the latest detections, from the first

    def __post_init__(self) -> None:
        self.seen = [(self.last_t, *(self.box[:2] + self.box[2:] / 2))]

    def predicted(self, t: float) -> np.ndarray:
        box = self.box.copy()
        box[:2] += self.velocity * (t - self.last_t)
        return box


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xywh boxes [n, 4] x [m, 4]."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), np.float32)
    ax0, ay0, ax1, ay1 = a[:, 0, None], a[:, 1, None], (a[:, 0] + a[:, 2])[:, None], (a[:, 1] + a[:, 3])[:, None]
    bx0, by0, bx1, by1 = b[None, :, 0], b[None, :, 1], b[None, :, 0] + b[None, :, 2], b[None, :, 1] + b[None, :, 3]
    iw = np.clip(np.minimum(ax1, bx1) - np.maximum(ax0, bx0), 0, None)
    ih = np.clip(np.minimum(ay1, by1) - np.maximum(ay0, by0), 0, None)
    inter = iw * ih
    union = a[:, 2, None] * a[:, 3, None] + b[None, :, 2] * b[None, :, 3] - inter
    return inter / np.maximum(union, 1e-9)


def match(cost_iou: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    if cost_iou.size == 0:
        return []
    rows, cols = linear_sum_assignment(-cost_iou)
    return [(r, c) for r, c in zip(rows, cols, strict=True) if cost_iou[r, c] >= threshold]


class Tracker:
    """Assigns a stable id to every person box; `update` for detector frames, `carry` for the frames between."""

    def __init__(self, cfg: TrackerConfig | None = None) -> None:
        self.cfg = cfg or TrackerConfig()
        self.tracks: list[Track] = []
        self.next_id = 1
        self.ended: list[int] = []  # ids that ended since the last call (their smoother state can go)

    def update(self, detections: np.ndarray, t: float) -> list[tuple[int, np.ndarray, float]]:
        """Detections [n, 5] (xywh, score) at time t -> (track id, box, score) for each reported person."""
        cfg = self.cfg
        dets = np.asarray(detections, np.float32).reshape(-1, 5)
        high = np.flatnonzero(dets[:, 4] >= cfg.high_score)
        low = np.flatnonzero(dets[:, 4] < cfg.high_score)
        predicted = np.array([tr.predicted(t) for tr in self.tracks], np.float32).reshape(-1, 4)
        matched: dict[int, int] = {}  # track index -> detection index
        pending = list(range(len(self.tracks)))
        for group in (high, low):
            ious = iou_matrix(predicted[pending], dets[group, :4])
            for r, c in match(ious, cfg.iou):
                matched[pending[r]] = int(group[c])
            pending = [i for i in pending if i not in matched]
        for ti, di in matched.items():
            self._observe(self.tracks[ti], dets[di], t)
        used = set(matched.values())
        for di in high:
            if int(di) not in used:
                self.tracks.append(Track(self.next_id, dets[di, :4].copy(), float(dets[di, 4]), t))
                self.next_id += 1
        self._expire(t)
        return [
            (tr.track_id, tr.box.copy(), tr.score) for tr in self.tracks if tr.last_t == t and tr.hits >= cfg.min_hits
        ]

    def carry(self, t: float) -> list[tuple[int, np.ndarray, float]]:
        """Frames without detection: every live track at its predicted box."""
        self._expire(t)
        return [(tr.track_id, tr.predicted(t), tr.score) for tr in self.tracks if tr.hits >= self.cfg.min_hits]

    def replay_detected(self, people: list[tuple[int, list[float], float]], t: float) -> None:
        """Re-apply a detector frame's reported people (track id, xywh box, score), as `--resume` does to carry
        the ids and velocities of an interrupted run across the cut."""
        by_id = {tr.track_id: tr for tr in self.tracks}
        for track_id, box, score in people:
            det = np.array([*box, score], np.float32)
            if track_id in by_id:
                self._observe(by_id[track_id], det, t)
            else:
                self.tracks.append(Track(track_id, det[:4].copy(), float(score), t))
            self.next_id = max(self.next_id, track_id + 1)
        self._expire(t)

    def _observe(self, track: Track, det: np.ndarray, t: float) -> None:
        track.seen = [s for s in track.seen if t - s[0] <= VELOCITY_WINDOW_S and s[0] < t]
        track.seen.append((t, *(det[:2] + det[2:4] / 2)))
        if len(track.seen) > 1:  # the slope of a straight line through the recent centres
            seen = np.array(track.seen)
            times, centres = seen[:, 0] - seen[:, 0].mean(), seen[:, 1:] - seen[:, 1:].mean(0)
            track.velocity = ((times[:, None] * centres).sum(0) / (times**2).sum()).astype(np.float32)
        track.box = det[:4].copy()
        track.score = float(det[4])
        track.last_t = t
        track.hits += 1

    def _expire(self, t: float) -> None:
        alive = [tr for tr in self.tracks if t - tr.last_t <= self.cfg.max_lost_s]
        self.ended.extend(tr.track_id for tr in self.tracks if tr not in alive)
        self.tracks = alive

    def pop_ended(self) -> list[int]:
        ended, self.ended = self.ended, []
        return ended
