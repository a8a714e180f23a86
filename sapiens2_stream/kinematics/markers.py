"""The markers OpenSim's model is fitted to, from Sapiens2's 308 keypoints: Pose2Sim's COCO-133 marker set
(`Markers_Coco133.xml`: body, feet, and three points of each hand), each marker the COCO-WholeBody point of the same
place, as `export.skeletons.COCO_133` makes it from the 308 (the hands' thumb, index and little-finger base joints
turn the wrist, which 26-point sets cannot)."""

from __future__ import annotations

import numpy as np

from ..export.skeletons import COCO_133, Layout

MARKERS: dict[str, int] = {  # OpenSim marker -> COCO-WholeBody point (left hand from 91, right hand from 112)
    "Nose": 0, "LEye": 1, "REye": 2, "LShoulder": 5, "RShoulder": 6, "LElbow": 7, "RElbow": 8, "LWrist": 9,
    "RWrist": 10, "LHip": 11, "RHip": 12, "LKnee": 13, "RKnee": 14, "LAnkle": 15, "RAnkle": 16, "LBigToe": 17,
    "LSmallToe": 18, "LHeel": 19, "RBigToe": 20, "RSmallToe": 21, "RHeel": 22,
    "LThumb": 91 + 2, "LIndex": 91 + 5, "LPinky": 91 + 17, "RThumb": 112 + 2, "RIndex": 112 + 5, "RPinky": 112 + 17,
}  # fmt: skip
NAMES = tuple(MARKERS)
LAYOUT = Layout([COCO_133[i] for i in MARKERS.values()])


def markers(keypoints: np.ndarray, confidence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[..., 308, 3] keypoints (NaN where unknown) and [..., 308] confidence -> the markers [..., M, 3] and their
    sureness [..., M] (a marker's is its least sure keypoint's)."""
    out = LAYOUT.apply(np.nan_to_num(keypoints), np.where(np.isfinite(keypoints).all(-1), confidence, 0.0))
    points, sure = out[..., :3], out[..., 3]
    points[sure <= 0] = np.nan
    return points, sure
