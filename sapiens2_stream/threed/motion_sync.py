"""Time offsets between the cameras of one take from the movement of the keypoints: the epipolar geometry.

Every camera saw the same body, so at the right offset two cameras' keypoints obey the epipolar geometry of the
pair (from the calibration when there is one, otherwise fitted: a fundamental matrix through thousands of
correspondences). For each candidate offset (a step of the reference camera's frame interval) the other camera's
keypoints are interpolated at the reference's frame times and the median epipolar distance measured; the offset
with the smallest one wins. Correlating speeds, as Pose2Sim does, matches any lag of a periodic motion such as a
steady gait; the epipolar distance does not, because one stride later the body is somewhere else in the room.
The same measure says which person in one camera is which in another (`calibrate people`): a wrong pairing obeys
no epipolar geometry at any offset.

An offset is the reference clock's time at the camera's own time 0: camera time t is reference time t + offset.
Confidence: 1 - best error / best error away from the winner (about 1 for a sharp, unique minimum, 0 for none).
Here, below the exports and calibration, so that both find offsets the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ..config import DEFAULT_FPS
from ..models.metadata import NUM_KEYPOINTS
from .calibration import Camera

BODY = (*range(21), 41, 62)  # Sapiens2 body and feet keypoints (wrists are 41 and 62): the points sync uses
MIN_SCORE = 0.3
TIE = 0.1  # offsets whose error is within 10 % of the smallest fit as well (the keypoints' noise)


@dataclass
class Track2D:
    """One camera's person over its own time: times [T] s, points [T, J, 2] px, scores [T, J]."""

    times: np.ndarray
    points: np.ndarray
    scores: np.ndarray

    @property
    def step(self) -> float:
        return float(np.median(np.diff(self.times))) if len(self.times) > 1 else 1 / DEFAULT_FPS

    def at(self, t: np.ndarray, exact_s: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
        """The points ([N, J, 2]) and scores ([N, J]) at times t: a frame's own where one falls on the time,
        otherwise linear interpolation between the two frames around it (at most 1.5 frame intervals apart) with
        the lower of their scores; score 0 where neither applies or the point was not seen."""
        idx = np.clip(np.searchsorted(self.times, t - exact_s), 0, len(self.times) - 1)
        exact = np.abs(self.times[idx] - t) <= exact_s
        hi = np.clip(np.searchsorted(self.times, t), 1, len(self.times) - 1)
        lo = hi - 1
        span = self.times[hi] - self.times[lo]
        w = np.clip((t - self.times[lo]) / np.maximum(span, 1e-9), 0, 1)[:, None, None]
        inside = (t >= self.times[lo]) & (t <= self.times[hi]) & (span <= 1.5 * self.step)
        points = np.where(exact[:, None, None], self.points[idx], (1 - w) * self.points[lo] + w * self.points[hi])
        between = np.where(inside[:, None], np.minimum(self.scores[lo], self.scores[hi]), 0.0)
        return points, np.where(exact[:, None], self.scores[idx], between)


def run_tracks(records: list) -> dict[int, Track2D]:
    """Every track of a run's records (its results.jsonl read back as `io.records.RecordedFrame`s) over the run's
    frame times, all 308 keypoints, scores 0 where the track is absent."""
    times = np.array([r.pts for r in records], np.float64)
    tracks: dict[int, Track2D] = {}
    for i, record in enumerate(records):
        for person in record.people:
            if person.keypoints is None or person.keypoint_scores is None:
                continue
            if person.track_id not in tracks:
                tracks[person.track_id] = Track2D(times, np.zeros((len(records), NUM_KEYPOINTS, 2)),
                                                  np.zeros((len(records), NUM_KEYPOINTS)))  # fmt: skip
            track = tracks[person.track_id]
            track.points[i], track.scores[i] = person.keypoints, person.keypoint_scores
    return tracks


@dataclass
class Offset:
    offset_s: float
    frames: int  # in the reference camera's frame intervals
    confidence: float
    method: str
    error: float | None = None  # the median epipolar distance (px) at the offset, for motion

    def as_dict(self) -> dict:
        out = {"offset_s": round(self.offset_s, 6), "offset_frames": self.frames,
               "confidence": round(self.confidence, 3), "method": self.method}  # fmt: skip
        if self.error is not None:
            out["epipolar_error_px"] = round(self.error, 3)
        return out


def fundamental(a: Camera, b: Camera) -> np.ndarray:
    """F with x_b^T F x_a = 0, for undistorted pixels, from the two cameras' calibration."""
    ra, rb = cv2.Rodrigues(a.rotation)[0], cv2.Rodrigues(b.rotation)[0]
    r = rb @ ra.T
    t = b.translation - r @ a.translation
    tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    return np.linalg.inv(b.matrix).T @ tx @ r @ np.linalg.inv(a.matrix)


def epipolar_distance(pa: np.ndarray, pb: np.ndarray, f: np.ndarray | None) -> float:
    """Median symmetric point-to-epipolar-line distance (px) of correspondences [N, 2]. F fitted when not given:
    least squares through all, then again through those within three times the median distance (a few keypoints
    anywhere in the picture, a model's confusion, would otherwise bend the fit by tens of pixels)."""
    if f is not None:
        return float(np.median(distances(pa, pb, f)))
    keep = np.ones(len(pa), bool)
    for _ in range(2):
        if keep.sum() < 16:
            return np.inf
        f, _ = cv2.findFundamentalMat(pa[keep], pb[keep], cv2.FM_8POINT)
        if f is None or f.shape != (3, 3):
            return np.inf
        d = distances(pa, pb, f)
        keep = d <= 3 * np.median(d)
    return float(np.median(d))


def distances(pa: np.ndarray, pb: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Each correspondence's symmetric point-to-epipolar-line distance (px) under F."""
    ha, hb = np.c_[pa, np.ones(len(pa))], np.c_[pb, np.ones(len(pb))]
    lb, la = ha @ f.T, hb @ f
    residual = np.abs(np.sum(hb * lb, axis=1))
    return 0.5 * residual * (1 / np.hypot(*lb[:, :2].T).clip(1e-12) + 1 / np.hypot(*la[:, :2].T).clip(1e-12))


def confidence(errors: np.ndarray, best: int, guard: int = 2) -> float:
    away = np.delete(errors, np.arange(max(0, best - guard), min(len(errors), best + guard + 1)))
    away = away[np.isfinite(away)]
    if not len(away) or not np.isfinite(errors[best]):
        return 0.0
    return float(np.clip(1 - errors[best] / away.min(), 0, 1))


def motion_offset(ref: Track2D, cam: Track2D, f: np.ndarray | None, moments: int | None = None,
                  within_s: float | None = None) -> Offset:  # fmt: skip
    """The offset of `cam` against `ref` that makes their keypoints agree with the epipolar geometry; `moments`:
    compare at most that many of the reference's frames, spread evenly (every offset is still tried, one frame
    interval apart); `within_s`: only offsets up to that many seconds either way."""
    step = ref.step
    if moments is not None and len(ref.times) > moments:
        every = int(np.ceil(len(ref.times) / moments))
        ref = Track2D(ref.times[::every], ref.points[::every], ref.scores[::every])
    min_overlap = max(20, int(0.3 * min(len(ref.times), len(cam.times))))
    first = int(np.floor((cam.times[0] - ref.times[-1]) / step))
    last = int(np.ceil((cam.times[-1] - ref.times[0]) / step))
    candidates = np.arange(-last, -first + 1)  # offsets in steps: reference time = camera time + k * step
    if within_s is not None:
        candidates = candidates[np.abs(candidates) * step <= within_s]
    errors = np.full(len(candidates), np.inf)
    for i, k in enumerate(candidates):
        points, scores = cam.at(ref.times - k * step)
        both = (scores >= MIN_SCORE) & (ref.scores >= MIN_SCORE)
        if both.any(axis=1).sum() < min_overlap:
            continue
        errors[i] = epipolar_distance(ref.points[both], points[both], f)
    if not np.isfinite(errors).any():
        return Offset(0.0, 0, 0.0, "motion")
    # a steady walk looks the same one stride later: of the offsets that fit about as well, the nearest to none
    near = np.flatnonzero(errors <= (1 + TIE) * errors.min())
    best = int(near[np.argmin(np.abs(candidates[near]))])
    k = int(candidates[best])
    return Offset(k * step, k, confidence(errors, best), "motion", float(errors[best]))


def motion_offsets(tracks: dict[str, Track2D], cameras: dict[str, Camera] | None) -> dict[str, Offset]:
    """Every camera's offset against the first one (the reference, offset 0)."""
    names = list(tracks)
    ref = names[0]
    out = {ref: Offset(0.0, 0, 1.0, "reference")}
    for name in names[1:]:
        f = fundamental(cameras[ref], cameras[name]) if cameras else None
        out[name] = motion_offset(tracks[ref], tracks[name], f)
    return out
