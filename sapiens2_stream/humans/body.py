"""An articulated body made of capsules: a pose's joints in the world (metres, Z up, the floor at Z = 0) and the
capsules around them, each labelled with the body part (one of the 29 segmentation classes) it shows.

The body stands on the floor whatever it does: after the limbs are placed and the whole body is tipped over (a
fall, lying down), it is lifted or lowered so its lowest surface touches the floor. The keypoints it defines are
COCO's 17 and the six foot points, by their names in the 308 layout; the others stay unlabelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..models.metadata import seg_metadata

UP = np.array([0.0, 0.0, 1.0])
THIGH, SHIN, UPPER_ARM, FOREARM, SPINE = 0.45, 0.43, 0.29, 0.26, 0.5
HEAD_R, SOLE = 0.11, 0.055
STATURE = 1.75  # scale 1: an adult this tall, floor to crown (the lengths above are in a unit of Pose.size metres)
KEYPOINTS = (
    "nose",
    "left_eye",
    "right_eye",
    "left_ear",
    "right_ear",
    "left_shoulder",
    "right_shoulder",
    "left_elbow",
    "right_elbow",
    "left_wrist",
    "right_wrist",
    "left_hip",
    "right_hip",
    "left_knee",
    "right_knee",
    "left_ankle",
    "right_ankle",
    "left_big_toe",
    "left_small_toe",
    "left_heel",
    "right_big_toe",
    "right_small_toe",
    "right_heel",
)
"""The keypoints a body defines (names of the 308 layout)."""

JOINT_RADIUS = {
    "shoulder": 0.05,
    "elbow": 0.04,
    "wrist": 0.035,
    "hip": 0.08,
    "knee": 0.055,
    "ankle": 0.045,
}
"""How far inside the skin each body joint lies (metres): a joint hidden by more than this is occluded."""


@dataclass
class Pose:
    """Where a body stands and faces, and its limbs' angles (radians; left then right)."""

    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0  # 0: facing -Y (towards a camera in front)
    crouch: float = 0.0  # 0 standing .. 1 deep squat
    sit: float = 0.0  # 0 standing .. 1 seated (thighs level; on a stool nobody sees)
    bend: float = 0.0  # the trunk's forward lean at the hips
    thigh: tuple[float, float] = (0.0, 0.0)  # forward swing
    knee: tuple[float, float] = (0.0, 0.0)  # flexion
    arm: tuple[float, float] = (0.0, 0.0)  # forward swing
    elbow: tuple[float, float] = (0.2, 0.2)  # flexion
    raise_arms: tuple[float, float] = (0.0, 0.0)  # sideways: 0 hanging .. pi overhead
    tilt: float = 0.0  # the whole body tipped over: 0 upright .. pi/2 lying
    tilt_dir: float = 0.0  # which way it tips, from its facing: 0 forward, pi backward, pi/2 to its left
    scale: float = 1.0  # 1: an adult STATURE (1.75 m) tall, floor to crown

    @property
    def size(self) -> float:
        """What every length of the body is multiplied by: `scale` in units that make scale 1 STATURE tall."""
        return self.scale * _size_per_scale()


@lru_cache(maxsize=1)
def part_ids() -> dict[str, int]:
    """The 29 segmentation classes by name."""
    return {name: i for i, name in enumerate(seg_metadata().names)}


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-9)


def _bend_towards(d: np.ndarray, towards: np.ndarray, angle: float) -> np.ndarray:
    """`d` turned by `angle` towards `towards` (in the plane of the two)."""
    g = towards - (towards @ d) * d
    g = _unit(g) if np.linalg.norm(g) > 1e-6 else _unit(np.cross(d, [1.0, 0.0, 0.0]))
    return np.cos(angle) * d + np.sin(angle) * g


def joints(pose: Pose) -> dict[str, np.ndarray]:
    """World positions of the keypoints, plus the points the capsules need (pelvis, neck, head, hands, soles)."""
    return _placed(pose, pose.size)


@lru_cache(maxsize=1)
def _size_per_scale() -> float:
    """The factor that stands a body of scale 1 STATURE tall to the crown (the top of its head sphere)."""
    return STATURE / float(_placed(Pose(), 1.0)["head"][2] + HEAD_R)


def _placed(pose: Pose, s: float) -> dict[str, np.ndarray]:
    """`joints` with every length multiplied by `s`."""
    f = np.array([-np.sin(pose.yaw), -np.cos(pose.yaw), 0.0])
    left = np.array([-f[1], f[0], 0.0])
    j: dict[str, np.ndarray] = {}
    legs = []
    for k, (side, sign) in enumerate((("left", 1), ("right", -1))):
        swing = pose.thigh[k] + 1.3 * pose.crouch + np.pi / 2 * pose.sit
        flex = pose.knee[k] + 2.2 * pose.crouch + np.pi / 2 * pose.sit
        legs.append(
            (side, sign, np.sin(swing) * f - np.cos(swing) * UP, np.sin(swing - flex) * f - np.cos(swing - flex) * UP)
        )
    pelvis = np.zeros(3)
    for side, sign, thigh, shin in legs:
        j[f"{side}_hip"] = pelvis + sign * 0.09 * s * left - 0.03 * s * UP
        j[f"{side}_knee"] = j[f"{side}_hip"] + THIGH * s * thigh
        j[f"{side}_ankle"] = j[f"{side}_knee"] + SHIN * s * shin
        sole = j[f"{side}_ankle"] - SOLE * s * UP
        j[f"{side}_sole"] = sole
        j[f"{side}_heel"] = sole - 0.05 * s * f
        j[f"{side}_big_toe"] = sole + 0.16 * s * f - sign * 0.02 * s * left
        j[f"{side}_small_toe"] = sole + 0.13 * s * f + sign * 0.04 * s * left
    lean = pose.bend + 0.35 * pose.crouch + 0.1 * pose.sit
    spine = np.cos(lean) * UP + np.sin(lean) * f
    front = np.cos(lean) * f - np.sin(lean) * UP  # the chest's forward, square to the spine
    neck = pelvis + SPINE * s * spine
    j["pelvis"], j["neck"] = pelvis, neck
    for k, (side, sign) in enumerate((("left", 1), ("right", -1))):
        j[f"{side}_shoulder"] = neck + sign * 0.18 * s * left - 0.03 * s * spine
        hang = np.sin(pose.arm[k]) * front - np.cos(pose.arm[k]) * spine
        upper = np.cos(pose.raise_arms[k]) * hang + np.sin(pose.raise_arms[k]) * sign * left
        if pose.raise_arms[k] > np.pi / 2:  # past level the arm goes on up over the head
            upper = _unit(
                np.cos(pose.raise_arms[k]) * -spine
                + np.sin(pose.raise_arms[k]) * sign * left
                + 0.3 * front * np.sin(pose.arm[k])
            )
        upper = _unit(upper)
        fore = _unit(_bend_towards(upper, front if pose.raise_arms[k] < np.pi / 2 else spine, pose.elbow[k]))
        j[f"{side}_elbow"] = j[f"{side}_shoulder"] + UPPER_ARM * s * upper
        j[f"{side}_wrist"] = j[f"{side}_elbow"] + FOREARM * s * fore
        j[f"{side}_hand"] = j[f"{side}_wrist"] + 0.06 * s * fore
    head = neck + 0.2 * s * spine
    j["head"] = head
    j["nose"] = head + (HEAD_R + 0.01) * s * front - 0.03 * s * spine  # the tip, below the eyes
    for side, sign in (("left", 1), ("right", -1)):  # the eyes on the head's equator: 93.9 % of the stature up
        j[f"{side}_eye"] = head + HEAD_R * s * _unit(0.94 * front + 0.35 * sign * left)  # (adults': 93.6 %)
        j[f"{side}_ear"] = head + HEAD_R * s * sign * left
    j["front"], j["spine"] = front, spine  # directions, not points: the renderer's face and shirt cues
    _tip_over(j, pose, s)
    return j


DIRECTIONS = ("front", "spine")


def _tip_over(j: dict[str, np.ndarray], pose: Pose, size: float) -> None:
    """Tip the body by `tilt` towards `tilt_dir` about its base, then put its lowest surface on the floor."""
    f = np.array([-np.sin(pose.yaw), -np.cos(pose.yaw), 0.0])
    left = np.array([-f[1], f[0], 0.0])
    tip = np.cos(pose.tilt_dir) * f + np.sin(pose.tilt_dir) * left
    c, s = np.cos(pose.tilt), np.sin(pose.tilt)

    def rotate(v: np.ndarray) -> np.ndarray:  # u -> u cos + tip sin; the axis (up x tip) is unmoved
        up_part, tip_part = v @ UP, v @ tip
        rest = v - up_part * UP - tip_part * tip
        return rest + (up_part * c - tip_part * s) * UP + (up_part * s + tip_part * c) * tip

    for name, v in j.items():
        j[name] = rotate(v)
    lowest = min(float(a[2] - r) for a, b, r, _ in capsules(j, size) for a in (a, b))
    shift = np.array([pose.x, pose.y, -lowest])
    for name in j:
        if name not in DIRECTIONS:
            j[name] = j[name] + shift


LIMBS = (
    ("shoulder", "elbow", "Upper_Arm", 0.045),
    ("elbow", "wrist", "Lower_Arm", 0.037),
    ("hip", "knee", "Upper_Leg", 0.07),
    ("knee", "ankle", "Lower_Leg", 0.05),
)


def capsules(j: dict[str, np.ndarray], size: float) -> list[tuple[np.ndarray, np.ndarray, float, str]]:
    """(start, end, radius, part) of each capsule. Parts are class names of the 29, and "head" (face in front,
    hair behind: the renderer decides per pixel); `size`: the body's (`Pose.size`)."""
    s = size
    side = _unit(j["left_shoulder"] - j["right_shoulder"])
    top = j["neck"] - 0.06 * s * j["spine"]
    out = [
        (
            j["pelvis"] + k * 0.07 * s * side + 0.06 * s * j["spine"],
            top + k * 0.07 * s * side,
            0.11 * s,
            "Upper_Clothing",
        )
        for k in (1, -1)
    ]
    out.append((j["left_hip"], j["right_hip"], 0.1 * s, "Lower_Clothing"))
    out.append((j["neck"] - 0.04 * s * j["spine"], j["head"] - 0.06 * s * j["spine"], 0.05 * s, "Face_Neck"))
    out.append((j["head"], j["head"], HEAD_R * s, "head"))
    out.append((j["nose"] - 0.012 * s * j["front"], j["nose"] - 0.012 * s * j["front"], 0.02 * s, "Face_Neck"))
    for name in ("left", "right"):
        title = name.capitalize()
        for a, b, part, r in LIMBS:
            out.append((j[f"{name}_{a}"], j[f"{name}_{b}"], r * s, f"{title}_{part}"))
        out.append((j[f"{name}_hand"], j[f"{name}_hand"], 0.045 * s, f"{title}_Hand"))
        toe = (j[f"{name}_big_toe"] + j[f"{name}_small_toe"]) / 2
        lift = j[f"{name}_ankle"] - j[f"{name}_sole"]
        out.append((j[f"{name}_heel"] + 0.6 * lift, toe + 0.45 * lift, 0.04 * s, f"{title}_Shoe"))
    return out


def joint_radius(name: str, size: float) -> float:
    """How deep a keypoint lies under the skin (0 for those marked on the skin: face, feet), for a body of `size`."""
    kind = name.split("_", 1)[-1]
    return JOINT_RADIUS.get(kind, 0.0) * size
