"""Angles over time: unwrapped (a person turning round never makes a 360-degree jump) and filtered as Sports2D
filters them (Butterworth, 4th order, 6 Hz by default). Offline the filter is zero-lag: half the order run forwards
and backwards over each unbroken stretch (Sports2D's and Pose2Sim's way). Live it can only look back: the full order
run forwards, which matches the offline curve's steepness and lags it by the filter's group delay (`lag_s`); where
an angle is null the live filter starts again at the next value."""

from __future__ import annotations

import numpy as np
from scipy import signal


def unwrap_to(previous: float, value: float, period: float = 360.0) -> float:
    """`value` moved by whole periods to lie within half a period of `previous` (NaN previous: as it is)."""
    if np.isnan(previous) or np.isnan(value):
        return value
    return value + period * np.round((previous - value) / period)


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
    """The live filter of one angle of one track: causal, started again after a null."""

    def __init__(self, sos) -> None:
        self.sos = sos
        self.state: np.ndarray | None = None

    def __call__(self, value: float) -> float:
        if np.isnan(value):
            self.state = None
            return value
        if self.state is None:
            self.state = signal.sosfilt_zi(self.sos) * value  # steady at the first value: no ramp from zero
        out, self.state = signal.sosfilt(self.sos, [value], zi=self.state)
        return float(out[0])


def live_series(values: np.ndarray, order: int, cutoff_hz: float, fps: float) -> np.ndarray:
    """A series through the live filter, as a run computes it frame by frame."""
    f = LiveFilter(design(order, cutoff_hz, fps))
    return np.array([f(v) for v in values])
