"""The keypoints the angles use, by the names Sports2D gives them, found among the 308 (or made from them: its
`Neck` and `Hip` are the mid-shoulder and mid-hip points, as Sports2D makes them when a model lacks them)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..models.metadata import pose_metadata

# Sports2D's name: the 308 names it is the mean of. `Head` is the one we choose: Sports2D's body models have a head
# top (HALPE's `Head`), which the 308 lack; the mid-point of the ears lies on the same line up from the neck.
NAMED: dict[str, tuple[str, ...]] = {
    "Hip": ("left_hip", "right_hip"), "Neck": ("left_shoulder", "right_shoulder"), "Head": ("left_ear", "right_ear"),
    "RHip": ("right_hip",), "RKnee": ("right_knee",), "RAnkle": ("right_ankle",), "RBigToe": ("right_big_toe",),
    "RSmallToe": ("right_small_toe",), "RHeel": ("right_heel",), "RShoulder": ("right_shoulder",),
    "RElbow": ("right_elbow",), "RWrist": ("right_wrist",), "RIndex": ("right_forefinger_third_joint",),
    "RPinky": ("right_pinky_finger_third_joint",),
    "LHip": ("left_hip",), "LKnee": ("left_knee",), "LAnkle": ("left_ankle",), "LBigToe": ("left_big_toe",),
    "LSmallToe": ("left_small_toe",), "LHeel": ("left_heel",), "LShoulder": ("left_shoulder",),
    "LElbow": ("left_elbow",), "LWrist": ("left_wrist",), "LIndex": ("left_forefinger_third_joint",),
    "LPinky": ("left_pinky_finger_third_joint",),
}  # fmt: skip
NAMES = tuple(NAMED)
INDEX = {name: i for i, name in enumerate(NAMES)}


@lru_cache(maxsize=1)
def ends() -> tuple[np.ndarray, np.ndarray]:
    """Each named point's two keypoints (the same one twice for a keypoint of its own): it is their mid-point."""
    ids = {n: i for i, n in enumerate(pose_metadata().names)}
    pairs = np.array([[ids[parts[0]], ids[parts[-1]]] for parts in NAMED.values()])
    return pairs[:, 0], pairs[:, 1]


def named_points(keypoints: np.ndarray, scores: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """People's named points and their scores: keypoints [..., 308, D] -> [..., len(NAMES), D]; scores [..., 308]
    -> [..., len(NAMES)] (the least of the keypoints each is made of; ones when not given)."""
    a, b = ends()
    kp = np.asarray(keypoints, np.float64)
    points = (kp[..., a, :] + kp[..., b, :]) / 2
    if scores is None:
        return points, np.ones(points.shape[:-1])
    sc = np.asarray(scores, np.float64)
    return points, np.minimum(sc[..., a], sc[..., b])
