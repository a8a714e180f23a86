"""A body whose joint angles are known: segments chained by rotations, posed by OpenSim-style coordinates
(`hip_flexion_r`, `knee_angle_r`, `pro_sup_r`, ... in degrees, as `angles.anatomical` names them), giving the 308
keypoints the angles are read from (hips, knees, ankles, heels, toes, shoulders, elbows, wrists, knuckles, face).

It is the truth the 3-D angles are measured against: this file composes rotations into points, the angles read
points back into rotations. Frame: X forward, Y up, Z to the right (OpenSim's), the pelvis's centre at `root`,
turned by `yaw` about Y. The left limbs are the right ones mirrored (their angles mean the same on both sides).
"""

from __future__ import annotations

import numpy as np

from ..models.metadata import pose_metadata

LENGTHS = {"pelvis": 0.18, "thigh": 0.45, "shank": 0.43, "trunk": 0.5, "shoulders": 0.36, "upper_arm": 0.29,
           "forearm": 0.26, "heel": 0.06, "toe": 0.16, "sole": 0.07, "hand": 0.085}  # fmt: skip


def rx(a: float) -> np.ndarray:
    c, s = np.cos(np.radians(a)), np.sin(np.radians(a))
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def ry(a: float) -> np.ndarray:
    c, s = np.cos(np.radians(a)), np.sin(np.radians(a))
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def rz(a: float) -> np.ndarray:
    c, s = np.cos(np.radians(a)), np.sin(np.radians(a))
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def _leg(q: dict, s: str, half_width: float, scale: float) -> dict[str, np.ndarray]:
    """A right leg's points in pelvis coordinates (the left's are the same, mirrored, with its own angles)."""
    hip = np.array([0.0, 0.0, half_width])
    thigh = rz(q.get(f"hip_flexion_{s}", 0)) @ rx(q.get(f"hip_adduction_{s}", 0)) @ ry(q.get(f"hip_rotation_{s}", 0))
    knee = hip + thigh @ [0, -LENGTHS["thigh"] * scale, 0]
    shank = thigh @ rz(-q.get(f"knee_angle_{s}", 0))
    ankle = knee + shank @ [0, -LENGTHS["shank"] * scale, 0]
    foot = shank @ rz(q.get(f"ankle_angle_{s}", 0))
    sole = LENGTHS["sole"] * scale
    return {"hip": hip, "knee": knee, "ankle": ankle, "heel": ankle + foot @ [-LENGTHS["heel"] * scale, -sole, 0],
            "big_toe": ankle + foot @ [LENGTHS["toe"] * scale, -sole, -0.03 * scale],
            "small_toe": ankle + foot @ [0.8 * LENGTHS["toe"] * scale, -sole, 0.03 * scale]}  # fmt: skip


def _arm(q: dict, s: str, shoulder: np.ndarray, scale: float) -> dict[str, np.ndarray]:
    """A right arm's points in thorax coordinates."""
    upper = rz(q.get(f"arm_flex_{s}", 0)) @ rx(q.get(f"arm_add_{s}", 0)) @ ry(q.get(f"arm_rot_{s}", 0))
    elbow = shoulder + upper @ [0, -LENGTHS["upper_arm"] * scale, 0]
    fore = upper @ rz(q.get(f"elbow_flex_{s}", 0))
    wrist = elbow + fore @ [0, -LENGTHS["forearm"] * scale, 0]
    hand = fore @ ry(q.get(f"pro_sup_{s}", 0)) @ rz(q.get(f"wrist_flex_{s}", 0)) @ rx(q.get(f"wrist_dev_{s}", 0))
    reach = LENGTHS["hand"] * scale
    return {"shoulder": shoulder, "elbow": elbow, "wrist": wrist,
            "forefinger_third_joint": wrist + hand @ [0, -reach, 0.025 * scale],
            "pinky_finger_third_joint": wrist + hand @ [0, -0.9 * reach, -0.025 * scale]}  # fmt: skip


def body_points(q: dict[str, float], root=(0.0, 0.95, 0.0), yaw: float = 0.0, scale: float = 1.0
                ) -> dict[str, np.ndarray]:  # fmt: skip
    """The named keypoints (308 names) of a body posed by coordinates `q` (degrees; missing ones 0), metres."""
    pelvis, origin = ry(yaw), np.asarray(root, np.float64)
    mirror = np.array([1.0, 1.0, -1.0])
    out: dict[str, np.ndarray] = {}
    for s, side in (("r", "right"), ("l", "left")):
        flip = mirror if s == "l" else np.ones(3)
        for name, p in _leg(q, s, LENGTHS["pelvis"] / 2 * scale, scale).items():
            out[f"{side}_{name}"] = origin + pelvis @ (p * flip)
    lumbar = rz(q.get("lumbar_extension", 0)) @ rx(q.get("lumbar_bending", 0)) @ ry(q.get("lumbar_rotation", 0))
    thorax = pelvis @ lumbar
    top = np.array([0.0, LENGTHS["trunk"] * scale, 0.0])
    for s, side in (("r", "right"), ("l", "left")):
        flip = mirror if s == "l" else np.ones(3)
        shoulder = top + [0, 0, LENGTHS["shoulders"] / 2 * scale]
        for name, p in _arm(q, s, shoulder, scale).items():
            out[f"{side}_{name}"] = origin + thorax @ (p * flip)
    head = {"nose": [0.1, 0.2, 0], "left_ear": [0, 0.18, -0.075], "right_ear": [0, 0.18, 0.075],
            "left_eye": [0.08, 0.22, -0.03], "right_eye": [0.08, 0.22, 0.03]}  # fmt: skip
    for name, p in head.items():
        out[name] = origin + thorax @ (top + np.asarray(p) * scale)
    return out


def keypoints_308(points: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Named points as the 308 layout: (keypoints [308, D], confidence [308]: 1 where named, else 0 and NaN)."""
    names = pose_metadata().names
    dim = len(next(iter(points.values())))
    kp = np.full((len(names), dim), np.nan)
    conf = np.zeros(len(names))
    for i, name in enumerate(names):
        if name in points:
            kp[i], conf[i] = points[name], 1.0
    return kp, conf
