"""2-D joint and segment angles exactly as Sports2D (0.8) and Pose2Sim compute them (`Pose2Sim.common.angle_dict`,
`points_to_angles`, `fixed_angles`; Sports2D's `compute_angles_for_person`): the same names, keypoints, offsets,
signs and ranges, from image coordinates (y down), so ours and theirs can be diffed on the same keypoints.

One deliberate difference: Sports2D lists the left wrist's points as LElbow, LIndex, LWrist (the angle is then
measured at the index knuckle), where the right wrist's are RElbow, RWrist, RIndex; ours measures both at the
wrist. And one choice of keypoint: `Head` (HALPE's head top, which the 308 lack) is the mid-point of the ears.

Which side the camera sees decides the sign of x: `right` as is, `left` mirrored, `front` / `back` mirrors the
right / left keypoints alone (Sports2D's conventions). `auto` decides per frame from where the toes point, as
Sports2D does, but where the feet point at the camera or away (toe and heel one above the other: Sports2D then
says `right` whatever the person faces) ours keeps the track's last side, else goes by where the nose points.
"""

from __future__ import annotations

import numpy as np

from ..models.metadata import pose_metadata
from .points import INDEX, NAMES, named_points

# name: (points, offset, scale), as Pose2Sim's angle_dict (the left wrist's order excepted, see above)
ANGLES_2D: dict[str, tuple[tuple[str, ...], float, float]] = {
    "right ankle": (("RKnee", "RAnkle", "RBigToe", "RHeel"), 90, 1),
    "left ankle": (("LKnee", "LAnkle", "LBigToe", "LHeel"), 90, 1),
    "right knee": (("RAnkle", "RKnee", "RHip"), -180, 1),
    "left knee": (("LAnkle", "LKnee", "LHip"), -180, 1),
    "right hip": (("RKnee", "RHip", "Hip", "Neck"), 0, -1),
    "left hip": (("LKnee", "LHip", "Hip", "Neck"), 0, -1),
    "right shoulder": (("RElbow", "RShoulder", "Hip", "Neck"), 0, -1),
    "left shoulder": (("LElbow", "LShoulder", "Hip", "Neck"), 0, -1),
    "right elbow": (("RWrist", "RElbow", "RShoulder"), 180, -1),
    "left elbow": (("LWrist", "LElbow", "LShoulder"), 180, -1),
    "right wrist": (("RElbow", "RWrist", "RIndex"), -180, 1),
    "left wrist": (("LElbow", "LWrist", "LIndex"), -180, 1),
    "right foot": (("RBigToe", "RHeel"), 0, -1),
    "left foot": (("LBigToe", "LHeel"), 0, -1),
    "right shank": (("RAnkle", "RKnee"), 0, -1),
    "left shank": (("LAnkle", "LKnee"), 0, -1),
    "right thigh": (("RKnee", "RHip"), 0, -1),
    "left thigh": (("LKnee", "LHip"), 0, -1),
    "pelvis": (("LHip", "RHip"), 0, -1),
    "trunk": (("Neck", "Hip"), 0, -1),
    "shoulders": (("LShoulder", "RShoulder"), 0, -1),
    "head": (("Head", "Neck"), 0, -1),
    "right arm": (("RElbow", "RShoulder"), 0, -1),
    "left arm": (("LElbow", "LShoulder"), 0, -1),
    "right forearm": (("RWrist", "RElbow"), 0, -1),
    "left forearm": (("LWrist", "LElbow"), 0, -1),
    "right hand": (("RIndex", "RWrist"), 0, -1),
    "left hand": (("LIndex", "LWrist"), 0, -1),
}
NAMES_2D = tuple(ANGLES_2D)
HALF_TURN = ("pelvis", "shoulders")  # wrapped to [-90, 90) (a line, not a direction); the others to [-180, 180)
SIDES = ("right", "left", "front", "back")
MIRRORED = {  # per side: which named points have x negated
    "right": np.zeros(len(NAMES), bool),
    "left": np.ones(len(NAMES), bool),
    "front": np.array([n.startswith("R") for n in NAMES]),
    "back": np.array([n.startswith("L") for n in NAMES]),
}
UNCLEAR_FEET = 0.25  # toes ahead of heels by less than this share of the feet's length: the feet say no side
UNCLEAR_FACE = 0.2  # the nose ahead of the ears by less than this share of the ears' distance: nor does the face
_KP = {n: i for i, n in enumerate(pose_metadata().names)}
FEET = ([_KP["right_big_toe"], _KP["left_big_toe"]], [_KP["right_heel"], _KP["left_heel"]])
FACE = (_KP["nose"], [_KP["left_ear"], _KP["right_ear"]])


def _ids(names: tuple[str, ...]) -> list[int]:
    return [INDEX[n] for n in names]


def _by_points(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The angles measured from `count` points: their columns and their points' ids [A, count]."""
    columns = [j for j, (names, _, _) in enumerate(ANGLES_2D.values()) if len(names) == count]
    return np.array(columns), np.array([_ids(list(ANGLES_2D.values())[j][0]) for j in columns])


GROUPS = {count: _by_points(count) for count in (2, 3, 4)}
OFFSET = np.array([offset for _, offset, _ in ANGLES_2D.values()], np.float64)
SCALE = np.array([scale for _, _, scale in ANGLES_2D.values()], np.float64)
HALF = np.array([name in HALF_TURN for name in ANGLES_2D])
NEEDS_2D = np.array([(_ids(names) * 2)[:4] for names, _, _ in ANGLES_2D.values()])  # padded to four by repeats
SIGNS = {side: np.where(mirrored, -1.0, 1.0) for side, mirrored in MIRRORED.items()}


def raw_angles(points: np.ndarray) -> np.ndarray:
    """Every angle of `ANGLES_2D` from named points [P, len(NAMES), 2] already mirrored for the side: [P, A]
    degrees (Pose2Sim's `points_to_angles` and `fixed_angles`: a segment's direction from the horizontal; the
    angle from one vector to another, at a joint of three points or between two lines of two)."""
    out = np.empty((points.shape[0], len(ANGLES_2D)))
    columns, ids = GROUPS[2]
    u = points[:, ids[:, 0]] - points[:, ids[:, 1]]
    out[:, columns] = np.degrees(np.arctan2(u[..., 1], u[..., 0]))
    for count, (u_from, u_to, v_from, v_to) in ((3, (1, 0, 1, 2)), (4, (0, 1, 2, 3))):
        columns, ids = GROUPS[count]
        u = points[:, ids[:, u_to]] - points[:, ids[:, u_from]]
        v = points[:, ids[:, v_to]] - points[:, ids[:, v_from]]
        turn = u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]
        out[:, columns] = -np.degrees(np.arctan2(turn, (u * v).sum(-1)))
    out = (out + OFFSET) * SCALE
    return np.where(HALF, (out + 90) % 180 - 90, (out + 180) % 360 - 180)


def facing(keypoints: np.ndarray, scores: np.ndarray, min_score: float, last: str | None = None) -> str:
    """The side the camera sees of one person (keypoints [308, 2], scores [308]): where the toes point (Sports2D's
    rule), unless the feet are unsure or point at the camera or away; then the track's `last` side, else where the
    nose points past the ears' mid-point, else `right` (Sports2D's default)."""
    toes, heels = FEET
    if (scores[toes + heels] >= min_score).all():
        ahead = (keypoints[toes, 0] - keypoints[heels, 0]).sum()
        feet = np.linalg.norm(keypoints[toes] - keypoints[heels], axis=1).sum()
        if abs(ahead) >= UNCLEAR_FEET * feet:
            return "right" if ahead >= 0 else "left"
    if last is not None:
        return last
    nose, ears = FACE
    if (scores[[nose, *ears]] >= min_score).all():
        ahead = keypoints[nose, 0] - keypoints[ears, 0].mean()
        spread = abs(keypoints[ears[0], 0] - keypoints[ears[1], 0])
        if abs(ahead) > max(UNCLEAR_FACE * spread, 1.0):  # seen from the side: ears together, the nose ahead
            return "right" if ahead > 0 else "left"
    return "right"


def planar_angles(keypoints: np.ndarray, scores: np.ndarray, sides: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """People's 2-D angles: keypoints [P, 308, 2] (image pixels, y down), scores [P, 308], each person's side.
    Returns (angles [P, A] degrees in `NAMES_2D` order, confidence [P, A]: the least score of the keypoints each
    angle uses)."""
    points, point_scores = named_points(keypoints, scores)
    points[..., 0] *= np.stack([SIGNS[side] for side in sides])
    return raw_angles(points), point_scores[:, NEEDS_2D].min(-1)


def weakest(scores: np.ndarray, name: str) -> tuple[str, float]:
    """The least sure named point of a 2-D angle (named point scores [len(NAMES)]): its name and score."""
    names = ANGLES_2D[name][0]
    values = scores[_ids(names)]
    return names[int(values.argmin())], float(values.min())
