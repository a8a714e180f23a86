"""Angles over time: unwrapped (a person turning round never makes a 360-degree jump) and filtered as Sports2D
filters them (Butterworth, 4th order, 6 Hz by default). Offline the filter is zero-lag: half the order run forwards
and backwards over each unbroken stretch (Sports2D's and Pose2Sim's way). Live it can only look back: the full order
run forwards, which matches the offline curve's steepness and lags it by the filter's group delay (`lag_s`); where
an angle is null the live filter starts again at the next value."""

from __future__ import annotations

import numpy as np
from scipy import signal


def unwrap_to(previous, value, period=360.0):
    """`value` moved by whole periods to lie within half a period of `previous` (where `previous` is NaN: as it is);
    numbers or arrays alike."""
    turns = np.round((np.asarray(previous, np.float64) - value) / period)
    return value + period * np.nan_to_num(turns)


def unwrap_series(values: np.ndarray, period: float = 360.0) -> np.ndarray:
    """A series unwrapped as the live angles are: each value near the last one that was not null."""
    out = np.array(values, np.float64)
    last = np.nan
    for i, v in enumerate(out):
        out[i] = unwrap_to(last, v, period)
        if not np.isnan(out[i]):
            last = out[i]
    return out


def cutoff_for(cutoff_hz: float, fps: float) -> float:
    """The cut-off a frame rate allows (Sports2D lowers one at or above Nyquist to just under it)."""
    return min(cutoff_hz, fps / 2.001)


def design(order: int, cutoff_hz: float, fps: float):
    """A low-pass Butterworth filter as second-order sections."""
    return signal.butter(order, cutoff_for(cutoff_hz, fps), fs=fps, output="sos")


def lag_s(order: int, cutoff_hz: float, fps: float) -> float:
    """How far the live (causal) filter lags a slow change: its group delay at low frequencies, seconds."""
    b, a = signal.butter(order, cutoff_for(cutoff_hz, fps), fs=fps)
    _, delay = signal.group_delay((b, a), w=[cutoff_for(cutoff_hz, fps) / 20], fs=fps)
    return float(delay[0]) / fps


def zero_lag(values: np.ndarray, order: int, cutoff_hz: float, fps: float) -> np.ndarray:
    """The offline filter over a series with nulls: each unbroken stretch filtered forwards and backwards with half
    the order (stretches too short to pad are left as they are)."""
    out = np.array(values, np.float64)
    sos = design(order // 2, cutoff_hz, fps)
    pad = 3 * (2 * len(sos) + 1)
    valid = ~np.isnan(out)
    edges = np.flatnonzero(np.diff(np.r_[0, valid.astype(int), 0]))
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        if stop - start > pad:
            out[start:stop] = signal.sosfiltfilt(sos, out[start:stop], padlen=pad)
    return out


class LiveFilter:
    """The live filters of a track's angles, all at once: causal (scipy's `sosfilt`, transposed direct form II, one
    sample at a time), each angle started again after a null, steady at its first value (no ramp from zero)."""

    def __init__(self, sos: np.ndarray, width: int) -> None:
        self.sos = np.asarray(sos, np.float64)
        self.steady = signal.sosfilt_zi(self.sos)  # [sections, 2] per unit input
        self.state = np.zeros((len(self.sos), 2, width))
        self.running = np.zeros(width, bool)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        x = np.asarray(values, np.float64)
        valid = ~np.isnan(x)
        start = valid & ~self.running
        self.state[:, :, start] = self.steady[:, :, None] * x[start]
        self.running = valid
        out = x.copy()
        v, z = x[valid], self.state[:, :, valid]
        for s, (b0, b1, b2, _, a1, a2) in enumerate(self.sos):
            y = b0 * v + z[s, 0]
            z[s, 0] = b1 * v - a1 * y + z[s, 1]
            z[s, 1] = b2 * v - a2 * y
            v = y
        self.state[:, :, valid] = z
        out[valid] = v
        return out


def live_series(values: np.ndarray, order: int, cutoff_hz: float, fps: float) -> np.ndarray:
    """A series through the live filter, as a run computes it frame by frame."""
    f = LiveFilter(design(order, cutoff_hz, fps), 1)
    return np.array([f(np.array([v]))[0] for v in values])
