"""Motion clips for the capsule bodies, and scripts that chain them: a person walks, turns, crouches, raises
the arms, sits down, bends, falls, lies down and lies still, each picking up where the last one left off.

A script is a list of `(motion, seconds)` steps (`walk` takes a speed, `turn` an angle); `script.pose(t)` is
the body at time t, and `script.falls()` the times at which a fall truly happens (the trunk reaching the floor),
the truth the events are scored against.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .body import Pose

MOTIONS = ("walk", "turn", "stand", "crouch", "arms_up", "sit_down", "bend", "fall", "lie_down", "lie_still")
STRIDE_HZ = 0.9


def _ease(u: float) -> float:
    return 0.5 - 0.5 * np.cos(np.pi * float(np.clip(u, 0, 1)))


def _gait(t: float, amount: float = 1.0) -> dict:
    """Legs and arms of a walk at time t (amount 0: standing)."""
    phase = 2 * np.pi * STRIDE_HZ * t
    swing = 0.4 * amount * np.sin(phase)
    lift = 0.5 * amount
    return dict(
        thigh=(swing, -swing),
        knee=(lift * max(0.0, np.sin(phase + 1.2)), lift * max(0.0, -np.sin(phase + 1.2))),
        arm=(-0.6 * swing, 0.6 * swing),
        elbow=(0.2 + 0.2 * amount, 0.2 + 0.2 * amount),
    )


@dataclass
class Step:
    motion: str
    seconds: float
    speed: float = 1.1  # walk: metres a second, along the facing
    angle: float = np.pi  # turn: radians, to the left


def _move(start: Pose, step: Step, t: float) -> Pose:
    """The body `t` seconds into `step`, from the pose it started in."""
    u = t / step.seconds if step.seconds > 0 else 1.0
    m = step.motion
    rest = dict(thigh=(0.0, 0.0), knee=(0.0, 0.0), arm=(0.0, 0.0), elbow=(0.2, 0.2))
    if m == "walk":
        f = np.array([-np.sin(start.yaw), -np.cos(start.yaw)])
        x, y = np.array([start.x, start.y]) + f * step.speed * t
        return replace(start, x=float(x), y=float(y), crouch=0.0, sit=0.0, bend=0.0, **_gait(t))
    if m == "turn":
        return replace(start, yaw=start.yaw + step.angle * _ease(u), **_gait(t, 0.4))
    if m == "stand":
        return replace(start, **rest)
    if m == "crouch":
        return replace(start, crouch=float(np.sin(np.pi * min(u, 1.0))) * 0.9, arm=(0.6, 0.6), elbow=(0.5, 0.5))
    if m == "arms_up":
        up = float(np.sin(np.pi * min(u, 1.0)) ** 0.3) * 2.9
        return replace(start, raise_arms=(up, up), elbow=(0.1, 0.1))
    if m == "sit_down":
        return replace(start, sit=_ease(2 * u), **rest)
    if m == "bend":
        return replace(start, bend=1.2 * float(np.sin(np.pi * min(u, 1.0))), arm=(0.3, 0.3))
    if m == "fall":  # over in 0.7 s, accelerating, arms flung out; then on the floor
        down = min(t / 0.7, 1.0) ** 2
        return replace(
            start,
            tilt=np.pi / 2 * down,
            tilt_dir=start.tilt_dir,
            raise_arms=(1.2 * down, 1.0 * down),
            knee=(0.4 * down, 0.1 * down),
            sit=0.0,
            crouch=0.0,
            bend=0.0,
        )
    if m == "lie_down":  # kneel, then roll over onto the back over the whole step
        kneel = _ease(2 * u)
        over = _ease(2 * u - 1)
        return replace(start, crouch=0.7 * kneel * (1 - over), tilt=np.pi / 2 * over, tilt_dir=np.pi, **rest)
    if m == "lie_still":
        breath = 0.02 * np.sin(2 * np.pi * 0.25 * t)
        return replace(start, tilt=np.pi / 2, arm=(breath, -breath))
    raise ValueError(f"unknown motion {m!r}; choose one of {', '.join(MOTIONS)}")


@dataclass
class Script:
    """A person's motions, one after another, from `start`."""

    start: Pose
    steps: list[Step]

    def _starts(self) -> list[tuple[float, Pose]]:
        out, pose, t0 = [], self.start, 0.0
        for step in self.steps:
            out.append((t0, pose))
            pose = _move(pose, step, step.seconds)
            if step.motion == "walk":
                pose = replace(pose, **_gait(0.0, 0.0))
            t0 += step.seconds
        out.append((t0, pose))
        return out

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    def pose(self, t: float) -> Pose:
        starts = self._starts()
        for (t0, pose), step in zip(starts, self.steps, strict=False):
            if t < t0 + step.seconds:
                return _move(pose, step, t - t0)
        return starts[-1][1]

    def falls(self) -> list[float]:
        """When each fall's trunk reaches the floor (seconds)."""
        return [
            t0 + min(0.7, step.seconds)
            for (t0, _), step in zip(self._starts(), self.steps, strict=False)
            if step.motion == "fall"
        ]


def script(*steps: tuple, **start) -> Script:
    """`script(("walk", 3), ("turn", 1, 0, np.pi), ("fall", 2), x=-2, yaw=-np.pi / 2)`."""
    return Script(Pose(**start), [Step(*s) for s in steps])
