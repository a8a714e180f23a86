"""Where IK starts a frame from, when the last frame's pose may have led it astray, and the shoulder's two readings.

IK solves each frame from the pose the last one left: continuous, fast, and what OpenSim's IK tool does. Its one
failure is a wrong basin it then never leaves. The one this model has (issue 71): while an elbow is straight, the
upper arm's turn about its own axis (`arm_rot`) is not seen by any marker (the hand's three points barely, through
`pro_sup`), so it drifts, frame after frame, by up to half a turn. When the elbow then bends, it would have to
bend backwards: it stays at its 0 degree limit and the shoulder over-flexes instead (arms overhead: `arm_flex` 230
degrees, the elbow 0, the marker error four times its usual). From the last pose no small step helps; from the
arm turned back by half a turn, or from the model's default pose (Pose2Sim's first frame), IK finds the body again.

The shoulder is three rotations in a row (`arm_flex` about Z, `arm_add` about X, `arm_rot` about Y): every pose of
the upper arm has two readings, (flex, add, rot) and (flex + 180, 180 - add, rot + 180), and each angle is the
same again a whole turn on. Where the arm passes the readings' meeting point (adduction -90 degrees: arms out
sideways, as in a jumping jack), or after a fresh start, a solve may go on in the other reading: the same body,
its angles 180 degrees off. So every solve is read the one way (`Starts.reading`: the reading with the smaller
angles).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

SIDES = ("r", "l")
SHOULDER = ("arm_flex", "arm_add", "arm_rot")
FLEXION = (math.radians(-135), math.radians(225))  # the whole turn a shoulder's flexion is read within
AS_SMALL = math.radians(45)  # two readings whose angles' sizes differ by less: the nearer to the last frame's is read
PELVIS = 6  # the first coordinates: the pelvis's three rotations and three translations, kept where the person is


def wrapped(d):
    """Angles (or their differences) brought within half a turn of zero."""
    return (d + np.pi) % (2 * np.pi) - np.pi


def wrap(angle: float) -> float:
    """One angle brought within half a turn of zero."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


class Starts:
    """The fresh starts of one model's coordinates (in its coordinate set's order, radians and metres), and how
    its shoulders are read."""

    def __init__(self, names: list[str], default: np.ndarray, ranges: np.ndarray, rotational: np.ndarray) -> None:
        index = {n: i for i, n in enumerate(names)}
        self.rotational = np.asarray(rotational, bool)
        self.default = np.asarray(default, np.float64)
        self.ranges = np.asarray(ranges, np.float64)  # [C, 2]: each coordinate's range (min, max)
        self.shoulders = {side: tuple(index[f"{c}_{side}"] for c in SHOULDER) for side in SIDES
                          if all(f"{c}_{side}" in index for c in SHOULDER)}  # fmt: skip

    def fresh(self, last: np.ndarray, sides: tuple[str, ...] = SIDES,
              whole: bool = True) -> Iterator[tuple[str, np.ndarray]]:  # fmt: skip
        """(name, coordinates) of the starts other than the last pose, likeliest first: each of `sides`' arms
        turned half a turn about itself (`arm_r_turned`, `arm_l_turned`), both (`arms_turned`), and where the
        `whole` body is in doubt the model's default pose where the person stands (`default`: the pelvis as last
        solved; not where only an arm is, so that the legs are not moved to another of their equally good
        solutions)."""
        sides = tuple(side for side in sides if side in self.shoulders)
        for side in sides:
            yield f"arm_{side}_turned", self.turn(last, (side,))
        if len(sides) == 2:
            yield "arms_turned", self.turn(last, sides)
        if whole:
            default = self.default.copy()
            default[:PELVIS] = last[:PELVIS]
            yield "default", default

    def turn(self, q: np.ndarray, sides: tuple[str, ...]) -> np.ndarray:
        out = q.copy()
        for side in sides:
            rot = self.shoulders[side][2]
            out[rot] = wrapped(out[rot] + np.pi)
        return out

    def reading(self, q: np.ndarray, near: np.ndarray | None = None) -> np.ndarray:
        """The same pose as `q`, each shoulder in the reading that turns the arm least from the model's zero pose
        (the smaller sum of its three angles' sizes: arms down and turned about themselves read as turned, not as
        raised overhead and swung down again; arms out sideways as abducted), its flexion within `FLEXION` (a whole
        turn, from behind the back to past overhead). Where the two are about as small (within `AS_SMALL`: an arm
        near straight out sideways, where flexion and turn are about one axis and a near-straight elbow leaves the
        turn unseen), the one nearer the last frame's pose `near` (the arm goes on through, it does not swing back)."""
        out = q.copy()
        for flex, add, rot in self.shoulders.values():  # plain floats: a frame's few angles, numpy's cost is per call
            a, b, c = float(q[flex]), float(q[add]), float(q[rot])
            readings = [(wrap(a), wrap(b), wrap(c)), (wrap(a + math.pi), wrap(math.pi - b), wrap(c + math.pi))]
            sizes = [abs(r[0]) + abs(r[1]) + abs(r[2]) for r in readings]
            if near is not None and abs(sizes[0] - sizes[1]) < AS_SMALL:
                last = (float(near[flex]), float(near[add]), float(near[rot]))
                a, b, c = min(readings, key=lambda r: sum(abs(wrap(x - y)) for x, y in zip(r, last, strict=True)))
            else:
                a, b, c = readings[int(sizes[1] < sizes[0])]
            out[flex], out[add], out[rot] = FLEXION[0] + (a - FLEXION[0]) % (2 * math.pi), b, c
        return out

    def beyond(self, q: np.ndarray) -> dict[str, float]:
        """How far (radians) each shoulder of a pose read anatomically lies outside its ranges of adduction and
        turn: an upper arm turned about itself past what a body can is a wrong basin's sign, or the way into one
        (the flexion's range is not a body's, arms overhead pass it; the other coordinates are held within theirs)."""
        return {side: self.outside(add, q[add]) + self.outside(rot, q[rot])
                for side, (_, add, rot) in self.shoulders.items()}  # fmt: skip

    def distance(self, q: np.ndarray, last: np.ndarray) -> float:
        """How far a pose is from the last one: the angles' differences (radians, within half a turn) and the
        translations' (metres), squared and summed."""
        d = q - last
        d[self.rotational] = wrapped(d[self.rotational])
        return float(np.sum(d**2))

    def outside(self, i: int, value: float) -> float:
        """How far `value` lies outside coordinate `i`'s range (0 within it)."""
        low, high = self.ranges[i]
        return max(low - value, value - high, 0.0)
