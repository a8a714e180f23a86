"""Keypoint smoothing: ours (vectorised over keypoints) against filterpy run one keypoint at a time, same model.

Run: `python -m benchmarks.smoothing [--plot docs/smoothing.png]`.
"""

from __future__ import annotations

import time

import numpy as np
from filterpy.common import Q_discrete_white_noise
from filterpy.kalman import KalmanFilter

from benchmarks.common import main_with_figure
from sapiens2_stream.track import OnlineSmoother, smooth_keypoints
from sapiens2_stream.track.smoothing import DEFAULTS

K = 308


def trajectory(t_len: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.uniform(1 / 40, 1 / 20, t_len))
    offsets = rng.uniform(0, 400, (K, 2))
    truth = offsets + 80 * np.stack([np.sin(np.pi * times), np.cos(0.7 * np.pi * times)], -1)[:, None]
    return times, truth, truth + rng.normal(0, 2.0, truth.shape)


def filterpy_filters(first: np.ndarray, q: float, r: float, v0: float) -> list[KalmanFilter]:
    filters = []
    for x, y in first:
        kf = KalmanFilter(dim_x=4, dim_z=2)  # (x, vx, y, vy): the same model as two independent axes
        kf.x = np.array([x, 0.0, y, 0.0])
        kf.P = np.diag([r, v0, r, v0])
        kf.H = np.array([[1.0, 0, 0, 0], [0, 0, 1.0, 0]])
        kf.R = np.eye(2) * r
        filters.append(kf)
    return filters


def online_per_frame(times, noisy) -> tuple[float, float]:
    p = DEFAULTS["kalman"]
    scores = np.ones(K)
    ours = OnlineSmoother("kalman")
    start = time.perf_counter()
    for t, z in zip(times, noisy, strict=True):
        ours(1, t, z, scores)
    ours_s = (time.perf_counter() - start) / len(times)
    filters = filterpy_filters(noisy[0], p["q"], p["r"], p["v0"])
    start = time.perf_counter()
    for i in range(1, len(times)):
        dt = times[i] - times[i - 1]
        f1 = np.array([[1.0, dt], [0.0, 1.0]])
        q1 = Q_discrete_white_noise(2, dt, p["q"])
        f, q = np.kron(np.eye(2), f1), np.kron(np.eye(2), q1)
        for kf, z in zip(filters, noisy[i], strict=True):
            kf.F, kf.Q = f, q
            kf.predict()
            kf.update(z)
    return ours_s, (time.perf_counter() - start) / (len(times) - 1)


def run() -> list[dict]:
    times, _, noisy = trajectory()
    ours_s, ref_s = online_per_frame(times, noisy)
    start = time.perf_counter()
    smooth_keypoints(noisy, None, times, "rts")
    rts_s = (time.perf_counter() - start) / len(times)
    return [
        dict(name="kalman, online, per 308-keypoint frame", ours_s=ours_s, baseline="filterpy, 308 filters",
             baseline_s=ref_s),
        dict(name="rts, offline, per 308-keypoint frame", ours_s=rts_s, baseline="filterpy kalman alone",
             baseline_s=ref_s),
    ]  # fmt: skip


def plot(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times, truth, noisy = trajectory(90, seed=1)
    scores = np.ones(noisy.shape[:2])
    noisy[40:43, 0] += 25  # three bad frames on keypoint 0...
    scores[40:43, 0] = 0.1  # ...that the model scored low
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    ax.plot(times, noisy[:, 0, 0], ".", color="0.6", label="raw keypoint x (2 px noise, 3 low-score outliers)")
    ax.plot(times, truth[:, 0, 0], "k-", lw=1, label="truth")
    for method, color in (("kalman", "tab:blue"), ("rts", "tab:red"), ("one_euro", "tab:green")):
        ax.plot(times, smooth_keypoints(noisy, scores, times, method)[:, 0, 0], color=color, lw=1.4, label=method)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("x (px)")
    ax.legend(fontsize=7, loc="upper center", ncol=3, bbox_to_anchor=(0.5, -0.2))
    ax.set_title("Raw vs smoothed keypoint track")
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main_with_figure(run, plot, "plot", "a plot of raw vs smoothed tracks")
