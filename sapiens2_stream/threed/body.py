"""What the lifter knows about bodies: which of the 308 keypoints are joints inside the body and how far behind the
visible skin each one lies, the bones whose lengths stay constant, and which joint anchors the other keypoints.

The pointmap sees the skin that faces the camera. A joint centre sits inside the limb, behind that skin by about
the limb's radius seen along the ray: the priors below are adult half-thicknesses (metres) at each joint, from the
usual anthropometric girths (upper arm ~30 cm, forearm ~25 cm, wrist ~17 cm, thigh ~55 cm at the hip, knee ~37 cm,
ankle ~24 cm around). Face, hand and foot keypoints, the acromion, olecranon and cubital fossa are marked on the
skin itself: they stay on the surface (prior 0).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..models.metadata import NUM_KEYPOINTS, keypoint_index, pose_metadata

JOINT_DEPTH_M = {
    "left_shoulder": 0.05, "right_shoulder": 0.05,
    "left_elbow": 0.04, "right_elbow": 0.04,
    "left_wrist": 0.03, "right_wrist": 0.03,
    "left_hip": 0.08, "right_hip": 0.08,
    "left_knee": 0.055, "right_knee": 0.055,
    "left_ankle": 0.04, "right_ankle": 0.04,
}  # fmt: skip
BODY_JOINTS = tuple(JOINT_DEPTH_M)

BONE_LENGTH_M = {
    ("left_shoulder", "left_elbow"): 0.29, ("left_elbow", "left_wrist"): 0.26,
    ("right_shoulder", "right_elbow"): 0.29, ("right_elbow", "right_wrist"): 0.26,
    ("left_hip", "left_knee"): 0.44, ("left_knee", "left_ankle"): 0.42,
    ("right_hip", "right_knee"): 0.44, ("right_knee", "right_ankle"): 0.42,
    ("left_shoulder", "right_shoulder"): 0.36, ("left_hip", "right_hip"): 0.18,
    ("left_shoulder", "left_hip"): 0.52, ("right_shoulder", "right_hip"): 0.52,
}  # fmt: skip
"""Constant-length bones and an adult's typical lengths (metres): a track's own lengths are learned over time; the
typical ones, scaled to the person, only say which joints disagree before the track has learned its own."""
BONES = tuple(BONE_LENGTH_M)


index = keypoint_index  # the keypoints' positions by name


@lru_cache(maxsize=1)
def depth_priors() -> np.ndarray:
    """[308] metres behind the visible surface, per keypoint."""
    out = np.zeros(NUM_KEYPOINTS)
    for name, metres in JOINT_DEPTH_M.items():
        out[index()[name]] = metres
    return out


@lru_cache(maxsize=1)
def joint_ids() -> np.ndarray:
    return np.array([index()[n] for n in BODY_JOINTS])


@lru_cache(maxsize=1)
def bone_index() -> np.ndarray:
    """[B, 2] the bones' ends as positions in `BODY_JOINTS`."""
    return np.array([(BODY_JOINTS.index(a), BODY_JOINTS.index(b)) for a, b in BONES])


TORSO_HALF_WIDTH_M, TORSO_HALF_DEPTH_M = 0.17, 0.11  # the trunk's cross-section, side to side and front to back
PARENTS = {
    "left_elbow": "left_shoulder", "left_wrist": "left_elbow", "right_elbow": "right_shoulder",
    "right_wrist": "right_elbow", "left_knee": "left_hip", "left_ankle": "left_knee", "right_knee": "right_hip",
    "right_ankle": "right_knee",
}  # fmt: skip


@lru_cache(maxsize=1)
def parent_index() -> np.ndarray:
    """[8, 2] (limb joint, its parent) as positions in `BODY_JOINTS`."""
    return np.array([(BODY_JOINTS.index(c), BODY_JOINTS.index(p)) for c, p in PARENTS.items()])


@lru_cache(maxsize=1)
def limb_index() -> np.ndarray:
    return parent_index()[:, 0]


@lru_cache(maxsize=1)
def torso_index() -> np.ndarray:
    """Left shoulder, right shoulder, right hip, left hip (an outline's order) as positions in `BODY_JOINTS`."""
    return np.array([BODY_JOINTS.index(n) for n in ("left_shoulder", "right_shoulder", "right_hip", "left_hip")])


def other_side(side: str | None) -> str | None:
    return {"left": "right", "right": "left"}.get(side)


def side_torso(side: str | None) -> list[int]:
    """The keypoint indices of that side's shoulder and hip (none for None)."""
    return [] if side is None else [index()[f"{side}_shoulder"], index()[f"{side}_hip"]]


def side_mask(side: str | None) -> np.ndarray:
    """[J] the body joints of that side (all False for None)."""
    return np.array([side is not None and name.startswith(side) for name in BODY_JOINTS])


@lru_cache(maxsize=1)
def bone_ids() -> np.ndarray:
    """[B, 2] keypoint indices of the constant-length bones."""
    return np.array([(index()[a], index()[b]) for a, b in BONES])


@lru_cache(maxsize=1)
def anchors() -> np.ndarray:
    """[308] for each keypoint, the body joint whose depth it takes when its own pixel shows something else: a hand
    keypoint its wrist, a foot keypoint its ankle, an elbow or shoulder landmark that joint, a face keypoint the
    nose; a body joint itself."""
    ids, meta = index(), pose_metadata()
    out = np.arange(NUM_KEYPOINTS)
    for i, name in enumerate(meta.names):
        if name in JOINT_DEPTH_M:
            continue
        side = "left" if name.startswith("left") else "right" if name.startswith("right") else None
        if i in meta.groups["left_hand_20"] or i in meta.groups["right_hand_20"]:
            out[i] = ids[f"{side}_wrist"]
        elif name.endswith(("toe", "heel")):
            out[i] = ids[f"{side}_ankle"]
        elif name.endswith(("olecranon", "cubital_fossa")):
            out[i] = ids[f"{side}_elbow"]
        elif name.endswith("acromion"):
            out[i] = ids[f"{side}_shoulder"]
        elif name == "neck":
            out[i] = ids["left_shoulder"]
        else:
            out[i] = ids["nose"]
    return out
