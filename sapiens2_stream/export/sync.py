"""Time offsets between the cameras of one take, from the movement of the keypoints or from the soundtracks.

Motion: every camera saw the same body, so at the right offset two cameras' keypoints obey the epipolar geometry
of the pair (from the calibration when there is one, otherwise fitted: a fundamental matrix through thousands of
correspondences). For each candidate offset (a step of the reference camera's frame interval) the other camera's
keypoints are interpolated at the reference's frame times and the median epipolar distance measured; the offset
with the smallest one wins. Correlating speeds, as Pose2Sim does, matches any lag of a periodic motion such as a
steady gait; the epipolar distance does not, because one stride later the body is somewhere else in the room.

Audio: the onset envelope of each soundtrack (where the sound gets louder, e.g. a clap), cross-correlated with the
reference camera's.

An offset is the reference clock's time at the camera's own time 0: camera time t is reference time t + offset.
Confidence: 1 - best error / best error away from the winner (about 1 for a sharp, unique minimum, 0 for none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..config import DEFAULT_FPS
from ..io.pyav import av
from ..threed.calibration import Camera

BODY = (*range(21), 41, 62)  # Sapiens2 body and feet keypoints (wrists are 41 and 62): the points sync uses
MIN_SCORE = 0.3
AUDIO_RATE = 8000
AUDIO_CONFIDENCE = 0.5  # `auto` takes the soundtracks only when every camera's onset is at least this clear
ENVELOPE_HOP = 32  # samples: a 4 ms envelope


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
    """Median symmetric point-to-epipolar-line distance (px) of correspondences [N, 2]; F fitted when not given."""
    if f is None:
        if len(pa) < 16:
            return np.inf
        f, _ = cv2.findFundamentalMat(pa, pb, cv2.FM_8POINT)
        if f is None or f.shape != (3, 3):
            return np.inf
    ha, hb = np.c_[pa, np.ones(len(pa))], np.c_[pb, np.ones(len(pb))]
    lb, la = ha @ f.T, hb @ f
    residual = np.abs(np.sum(hb * lb, axis=1))
    d = 0.5 * residual * (1 / np.hypot(lb[:, 0], lb[:, 1]).clip(1e-12) + 1 / np.hypot(la[:, 0], la[:, 1]).clip(1e-12))
    return float(np.median(d))


def confidence(errors: np.ndarray, best: int, guard: int = 2) -> float:
    away = np.delete(errors, np.arange(max(0, best - guard), min(len(errors), best + guard + 1)))
    away = away[np.isfinite(away)]
    if not len(away) or not np.isfinite(errors[best]):
        return 0.0
    return float(np.clip(1 - errors[best] / away.min(), 0, 1))


def motion_offset(ref: Track2D, cam: Track2D, f: np.ndarray | None) -> Offset:
    """The offset of `cam` against `ref` that makes their keypoints agree with the epipolar geometry."""
    step = ref.step
    min_overlap = max(20, int(0.3 * min(len(ref.times), len(cam.times))))
    first = int(np.floor((cam.times[0] - ref.times[-1]) / step))
    last = int(np.ceil((cam.times[-1] - ref.times[0]) / step))
    candidates = np.arange(-last, -first + 1)  # offsets in steps: reference time = camera time + k * step
    errors = np.full(len(candidates), np.inf)
    for i, k in enumerate(candidates):
        points, scores = cam.at(ref.times - k * step)
        both = (scores >= MIN_SCORE) & (ref.scores >= MIN_SCORE)
        if both.any(axis=1).sum() < min_overlap:
            continue
        errors[i] = epipolar_distance(ref.points[both], points[both], f)
    if not np.isfinite(errors).any():
        return Offset(0.0, 0, 0.0, "motion")
    best = int(np.argmin(errors))
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


def soundtrack(path: Path) -> tuple[np.ndarray, float] | None:
    """A file's audio as mono samples at AUDIO_RATE and the time of the first one; None without audio."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                return None
            resampler = av.AudioResampler(format="flt", layout="mono", rate=AUDIO_RATE)
            chunks, start = [], None
            for frame in container.decode(audio=0):
                if start is None and frame.time is not None:
                    start = float(frame.time)
                chunks += [r.to_ndarray().reshape(-1) for r in resampler.resample(frame)]
            chunks += [r.to_ndarray().reshape(-1) for r in resampler.resample(None)]
    except (av.FFmpegError, OSError):
        return None
    if not chunks:
        return None
    return np.concatenate(chunks), start or 0.0


def onsets(samples: np.ndarray) -> np.ndarray:
    """Where the sound gets suddenly louder (a clap): the rise of a 4 ms loudness envelope on a log scale, kept only
    where it stands out from the soundtrack's own fluctuations (the noise floor has small rises everywhere)."""
    n = len(samples) // ENVELOPE_HOP
    envelope = np.sqrt((samples[: n * ENVELOPE_HOP].reshape(n, ENVELOPE_HOP) ** 2).mean(axis=1))
    loud = np.log10(envelope + 1e-5)
    rise = np.maximum(np.diff(loud, prepend=loud[0]), 0)
    return np.where(rise > rise.mean() + 4 * rise.std(), rise, 0.0)


def audio_offsets(sounds: dict[str, tuple[np.ndarray, float]], step: float) -> dict[str, Offset]:
    """Every camera's offset against the first one, from the cross-correlation of their onset envelopes."""
    names = list(sounds)
    ref = names[0]
    ref_onsets, ref_start = onsets(sounds[ref][0]), sounds[ref][1]
    out = {ref: Offset(0.0, 0, 1.0, "reference")}
    hop_s = ENVELOPE_HOP / AUDIO_RATE
    for name in names[1:]:
        cam_onsets, cam_start = onsets(sounds[name][0]), sounds[name][1]
        from scipy.signal import correlate  # here: scipy.signal takes 1.4 s to import, and most runs never sync

        xc = correlate(ref_onsets, cam_onsets, mode="full", method="fft")
        best = int(np.argmax(xc))
        vertex = 0.0
        if 0 < best < len(xc) - 1:  # a parabola through the peak: finer than one envelope hop
            a, b, c = xc[best - 1], xc[best], xc[best + 1]
            vertex = 0.5 * (a - c) / (a - 2 * b + c) if a - 2 * b + c < 0 else 0.0
        lag = (best + vertex - (len(cam_onsets) - 1)) * hop_s  # the camera's sound sits this much later in the ref
        offset = float(lag + ref_start - cam_start)
        guard = max(1, int(0.05 / hop_s))
        away = np.delete(xc, np.arange(max(0, best - guard), best + guard + 1))
        conf = float(np.clip(1 - away.max() / xc[best], 0, 1)) if xc[best] > 0 and len(away) else 0.0
        out[name] = Offset(offset, round(offset / step), conf, "audio")
    return out


def sound_offsets(sounds: dict[str, tuple[np.ndarray, float] | None], step: float, method: str) -> dict[str, Offset]:
    """Every camera's offset from its soundtrack (`soundtrack`'s answer, None without one), or {} when they cannot
    say: `auto` wants every camera's soundtrack and each offset at least AUDIO_CONFIDENCE clear; `audio` takes
    whatever they give and names the cameras without one (ValueError)."""
    missing = [name for name, sound in sounds.items() if sound is None]
    if missing:
        if method == "audio":
            raise ValueError(f"no soundtrack for {', '.join(missing)}")
        return {}
    offsets = audio_offsets(sounds, step)
    clear = min(o.confidence for o in offsets.values()) >= AUDIO_CONFIDENCE
    return offsets if method == "audio" or clear else {}
