"""Gait events from a walking person's feet: heel strike where the heel is furthest ahead of the pelvis, toe-off
where the toes are furthest behind it (Zeni et al. 2008, the method markerless tools use), along the way the person
faces. Found live, a few frames late: an extreme counts once it stays the extreme for `CONFIRM_S` after it and stands
out from the stride by `PROMINENCE` of the leg's length; the same detector runs over a run's files, so live and
offline find the same events."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

CONFIRM_S = 0.1  # an extreme is confirmed when it stays one this long after it
PROMINENCE = 0.15  # ... and stands out by this share of the leg's length from the other end of the swing
MIN_GAP_S = 0.6  # the shortest time between two events of one kind on one foot: a stride (200 steps a minute)
WINDOW_S = 2 * MIN_GAP_S + 2 * CONFIRM_S  # what an extreme is judged against


@dataclass
class Extremes:
    """One signal's confirmed maxima (heel strikes) or minima (toe-offs), live."""

    sign: float  # +1: maxima, -1: minima
    window: deque = field(default_factory=deque)  # (time, frame, value*sign) of the last WINDOW_S
    last_s: float = -np.inf  # the latest extreme's time
    checked_s: float = -np.inf  # the latest sample looked at

    def __call__(self, time_s: float, frame: int, value: float, scale: float) -> tuple[float, int] | None:
        """The time and frame of an extreme confirmed by this sample, or None. (Plain Python: a few dozen samples,
        where NumPy's per-call cost would be most of the work.)"""
        if value != value:  # NaN: the foot is not seen; what came before says nothing of what comes after
            self.window.clear()
            return None
        window = self.window
        window.append((time_s, frame, self.sign * value))
        while window[0][0] < time_s - WINDOW_S:
            window.popleft()
        found = None
        ready = time_s - CONFIRM_S + 1e-9
        for t, f, v in [w for w in window if self.checked_s < w[0] <= ready]:
            self.checked_s = t  # each sample is looked at once, when it is old enough
            if t - self.last_s < MIN_GAP_S or v < max(w[2] for w in window if abs(w[0] - t) <= CONFIRM_S + 1e-9):
                continue
            before = [w[2] for w in window if t - 2 * MIN_GAP_S <= w[0] < t]
            if before and v - min(before) >= PROMINENCE * scale:
                self.last_s = t
                found = float(t), int(f)
        return found


@dataclass
class FootEvents:
    """A track's gait detectors (heel strike and toe-off, per foot) and what they found."""

    strikes: dict = field(default_factory=lambda: {"right": Extremes(1.0), "left": Extremes(1.0)})
    offs: dict = field(default_factory=lambda: {"right": Extremes(-1.0), "left": Extremes(-1.0)})
    leads: dict = field(default_factory=dict)  # frame -> {side: that heel's lead over the other, metres}, recent
    found: list = field(default_factory=list)  # (kind, side, time_s, frame, step_m or None)

    def __call__(self, time_s: float, frame: int, ahead: dict, scale: float, lead: dict | None = None) -> list:
        """New events from one frame: `ahead[side]` = (heel, toes) ahead of the pelvis along the way the person faces
        (pixels or metres), `scale` the leg's length in the same unit, `lead[side]` the heel's lead over the other
        heel (metres, 3-D only). Returns [(kind, side, time_s, frame, step_m or None)]: a heel strike's step length
        is its heel's lead at the strike."""
        if lead is not None:
            self.leads[frame] = lead
            for old in [f for f in self.leads if f < frame - 400]:
                del self.leads[old]
        new = []
        for side, (heel, toes) in ahead.items():
            hit = self.strikes[side](time_s, frame, heel, scale)
            if hit is not None:
                new.append(("heel_strike", side, *hit, self.leads.get(hit[1], {}).get(side)))
            off = self.offs[side](time_s, frame, toes, scale)
            if off is not None:
                new.append(("toe_off", side, *off, None))
        self.found += new
        return new

    def summary(self, speed_m_s: float | None = None) -> dict:
        """Cadence (steps a minute), stride time (s) and, in metres, step length and walking speed."""
        strikes = sorted((t, side, m) for kind, side, t, _, m in self.found if kind == "heel_strike")
        out: dict = {"heel_strikes": len(strikes), "toe_offs": sum(1 for e in self.found if e[0] == "toe_off")}
        if len(strikes) >= 2 and strikes[-1][0] > strikes[0][0]:
            out["cadence_steps_per_min"] = round(60 * (len(strikes) - 1) / (strikes[-1][0] - strikes[0][0]), 1)
        strides = [float(d) for side in ("right", "left") for d in np.diff([t for t, s, _ in strikes if s == side])]
        if strides:
            out["stride_time_s"] = round(float(np.median(strides)), 3)
        steps = [m for _, _, m in strikes if m is not None]
        if steps:
            out["step_length_m"] = round(float(np.median(steps)), 3)
        if speed_m_s is not None:
            out["speed_m_s"] = round(speed_m_s, 3)
        return out
