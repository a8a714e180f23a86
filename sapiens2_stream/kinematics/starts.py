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

from collections.abc import Iterator

import numpy as np

SIDES = ("r", "l")
ARM = ("arm_flex", "arm_add", "arm_rot", "elbow_flex", "pro_sup", "wrist_flex", "wrist_dev")
FLEXION = (np.radians(-135), np.radians(225))  # the whole turn a shoulder's flexion is read within
PELVIS = 6  # the first coordinates: the pelvis's three rotations and three translations, kept where the person is


def turned(angle: float) -> float:
    """`angle` (radians) turned by half a turn, kept within a half turn of zero."""
    return float((angle + 2 * np.pi) % (2 * np.pi) - np.pi)


class Starts:
    """The fresh starts of one model's coordinates (in its coordinate set's order, radians and metres)."""

    def __init__(self, names: list[str], default: np.ndarray, ranges: np.ndarray, rotational: np.ndarray) -> None:
        self.index = {n: i for i, n in enumerate(names)}
        self.rotational = np.asarray(rotational, bool)
        self.default = np.asarray(default, np.float64)
        self.ranges = np.asarray(ranges, np.float64)  # [C, 2]: each coordinate's range (min, max)
        self.shoulders = [tuple(self.index[f"{c}_{s}"] for c in ARM[:3]) for s in SIDES if f"arm_rot_{s}" in self.index]

    def fresh(self, last: np.ndarray, arms_only: bool = False) -> Iterator[tuple[str, np.ndarray]]:
        """(name, coordinates) of each start other than the last pose: the model's default pose where the person
        stands (the pelvis as last solved; not where only an arm is in doubt, so that the legs are not moved to
        another of their equally good solutions), each arm turned half a turn about itself, and both."""
        if not arms_only:
            default = self.default.copy()
            default[:PELVIS] = last[:PELVIS]
            yield "default", default
        for side in SIDES:
            if f"arm_rot_{side}" in self.index:
                yield f"arm_{side}_turned", self.turn(last, (side,))
        if len(self.shoulders) == 2:
            yield "arms_turned", self.turn(last, SIDES)

    def turn(self, q: np.ndarray, sides: tuple[str, ...]) -> np.ndarray:
        out = q.copy()
        for side in sides:
            i = self.index[f"arm_rot_{side}"]
            out[i] = turned(out[i])
        return out

    def reading(self, q: np.ndarray) -> np.ndarray:
        """The same pose as `q`, each shoulder in the reading that turns the arm least from the model's zero pose
        (the smaller sum of its three angles' sizes: arms down and turned about themselves read as turned, not as
        raised overhead and swung down again; arms out sideways as abducted), its flexion within `FLEXION` (a whole
        turn, from behind the back to past overhead)."""
        out = q.copy()
        for joint in self.shoulders:
            a, b, c = q[list(joint)]
            readings = [np.array([a, b, c]), np.array([a + np.pi, np.pi - b, c + np.pi])]
            a, b, c = min((wrapped(r) for r in readings), key=lambda r: float(np.abs(r).sum()))
            out[list(joint)] = FLEXION[0] + (a - FLEXION[0]) % (2 * np.pi), b, c
        return out

    def beyond(self, q: np.ndarray) -> float:
        """How far (radians) the shoulder furthest outside its ranges of adduction and turn lies outside them, in
        a pose read anatomically: an upper arm turned about itself past what a body can is a wrong basin's sign, or
        the way into one (the flexion's range is not a body's, arms overhead pass it; the other coordinates are
        held within theirs)."""
        return max((self.outside(add, q[add]) + self.outside(rot, q[rot]) for _, add, rot in self.shoulders),
                   default=0.0)  # fmt: skip

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


def wrapped(d):
    """Angles (or their differences) brought within half a turn of zero."""
    return (d + np.pi) % (2 * np.pi) - np.pi
