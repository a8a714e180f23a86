"""Sapiens2's 308 keypoints as Pose2Sim's 2-D skeletons, defined by keypoint names (resolved against the released
models' metadata, so a wrong name fails at import rather than silently picking the wrong point).

- HALPE_26 (Pose2Sim's `Body_with_feet`, what its OpenSim models use): 24 direct points; Hip is the mid-point of
  the hips; Head (the top of the head, which Sapiens2 has no keypoint for) is the mid-point of the ears plus 1.1
  times the chin-to-glabella vector (a proxy; OpenSim's HALPE_26 marker set weighs it 0.1).
- The COCO-WholeBody 133 layout, for `COCO_133_WRIST` (its 26 markers are all direct points, thumbs, index and
  little fingers included) and `COCO_133` (`Whole_body`): body, feet and both hands direct (65 points); of the 68
  face points, 20 are the Sapiens2 landmark of the same name (chin, eyebrow ends, nose root, tip and corners, eye
  corners, mouth corners, lip centres) and 4 mid-points of two named landmarks (eyebrow inner ends, nostril
  sides); the jaw contour (16) and the other 28 face points have no counterpart whose order could be verified and
  are left empty (Pose2Sim treats them as missing).

Scores of derived points are the lowest of their sources'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models.metadata import keypoint_index


@dataclass(frozen=True)
class Point:
    """An output keypoint: a weighted sum of Sapiens2 keypoints (by name)."""

    sources: tuple[tuple[str, float], ...]


def direct(name: str) -> Point:
    return Point(((name, 1.0),))


def mid(a: str, b: str) -> Point:
    return Point(((a, 0.5), (b, 0.5)))


HEAD_TOP = Point((("left_ear", 0.5), ("right_ear", 0.5), ("center_of_glabella", 1.1), ("tip_of_chin", -1.1)))
COCO17 = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
          "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
          "right_ankle")  # fmt: skip

HALPE_26 = [
    *(direct(n) for n in COCO17), HEAD_TOP, direct("neck"), mid("left_hip", "right_hip"),
    direct("left_big_toe"), direct("right_big_toe"), direct("left_small_toe"), direct("right_small_toe"),
    direct("left_heel"), direct("right_heel"),
]  # fmt: skip

FACE_133 = {  # COCO-WholeBody face index (23-90, the iBUG-68 order) -> Sapiens2 landmark
    31: direct("tip_of_chin"), 40: direct("end_of_r_eyebrow"),
    44: mid("upper_startpoint_of_r_eyebrow", "lower_startpoint_of_r_eyebrow"),
    45: mid("upper_startpoint_of_l_eyebrow", "lower_startpoint_of_l_eyebrow"), 49: direct("end_of_l_eyebrow"),
    50: direct("center_of_nose_root"), 53: direct("tip_of_nose"), 54: direct("r_outer_corner_of_nose"),
    55: mid("r_outer_corner_of_nose", "bottom_center_of_nose"), 56: direct("bottom_center_of_nose"),
    57: mid("l_outer_corner_of_nose", "bottom_center_of_nose"), 58: direct("l_outer_corner_of_nose"),
    59: direct("r_outer_end_of_upper_lash_line"), 62: direct("r_inner_end_of_upper_lash_line"),
    65: direct("l_inner_end_of_upper_lash_line"), 68: direct("l_outer_end_of_upper_lash_line"),
    71: direct("r_outer_corner_of_mouth"), 74: direct("center_of_cupid_bow"), 77: direct("l_outer_corner_of_mouth"),
    80: direct("center_of_lower_outer_lip"), 83: direct("r_inner_corner_of_mouth"),
    85: direct("center_of_upper_inner_lip"), 87: direct("l_inner_corner_of_mouth"),
    89: direct("center_of_lower_inner_lip"),
}  # fmt: skip
FINGERS = ("thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger")


def hand(side: str) -> list[Point]:
    """COCO-WholeBody hand order: the wrist, then each finger from its base joint to its tip."""
    points = [direct(f"{side}_wrist")]
    for finger in FINGERS:
        points += [direct(f"{side}_{finger}_third_joint"), *(direct(f"{side}_{finger}{k}") for k in (2, 3, 4))]
    return points


COCO_133 = [
    *(direct(n) for n in COCO17),
    *(direct(n) for n in ("left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe",
                          "right_heel")),  # fmt: skip
    *(FACE_133.get(i) for i in range(23, 91)),
    *hand("left"), *hand("right"),
]  # fmt: skip

SKELETONS = {"HALPE_26": HALPE_26, "COCO_133_WRIST": COCO_133, "COCO_133": COCO_133}  # pose_model -> layout


class Layout:
    """A skeleton layout as a matrix over the 308 keypoints: xy = W @ keypoints, score = min over the sources."""

    def __init__(self, points: list[Point | None]) -> None:
        index = keypoint_index()
        n = len(index)
        self.weights = np.zeros((len(points), n))
        self.uses = np.zeros((len(points), n), bool)
        for row, point in enumerate(points):
            for name, weight in point.sources if point is not None else ():
                self.weights[row, index[name]] = weight  # a KeyError here is a wrong name
                self.uses[row, index[name]] = True
        self.filled = self.uses.any(axis=1)

    def __len__(self) -> int:
        return len(self.weights)

    def apply(self, keypoints: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """[..., 308, 2] keypoints, [..., 308] scores -> [..., n, 3] (x, y, score in [0, 1]; empty points 0)."""
        xy = np.einsum("os,...sc->...oc", self.weights, keypoints)
        used = np.where(self.uses, np.clip(scores, 0, 1)[..., None, :], np.inf)
        score = np.where(self.filled, used.min(axis=-1), 0.0)
        out = np.concatenate([xy, score[..., None]], axis=-1)
        out[..., ~self.filled, :] = 0.0
        return out


def layout(skeleton: str) -> Layout:
    return Layout(SKELETONS[skeleton])
