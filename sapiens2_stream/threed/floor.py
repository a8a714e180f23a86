"""The floor under the people, and a world frame standing on it, from where their feet rest over time.

Without a calibration there are no extrinsics, but people stand on the floor: over a few seconds their heels and
toes (in metres, from the lifter) sample the floor's plane many times, and the foot in the air lies above it. A
RANSAC search over those points keeps the plane that most of them touch (within `INLIER_M`) with the fewest
below it (nothing stands under the floor), facing the camera's up side. Its tilt comes from a least-squares fit on
its inliers when they spread over the floor; when they lie along one line (someone walking across the view) they
cannot tell the tilt across that line, and the floor is taken square to the people's mean up direction (hips to
shoulders: people stand upright, and their lean averages out over a walk). The heel and toe keypoints sit on the
foot's skin a few centimetres above the sole (`FOOT_KEYPOINT_HEIGHT_M`), so the floor is that much lower than the
plane through them.

The world frame: Z up (the floor's normal, towards the camera), the floor at Z = 0, the origin under the camera,
X along the camera's view projected on the floor (away from the camera), Y = Z x X (to the camera's left). A
calibration's extrinsics replace all of this with its own world frame.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .body import index

FOOT_KEYPOINT_HEIGHT_M = 0.03  # heel and toe keypoints above the sole
INLIER_M = 0.02
MAX_POINTS = 4000  # the latest foot points kept (about 2 minutes of one person at 10 frames/s)
MIN_POINTS = 60
MIN_SPREAD_M = 0.4  # the feet's spread across their main direction that determines the floor's tilt by itself
MAX_TILT_DEG = 60.0  # the floor's normal within this of the camera's up (-y): not a wall
FEET = ("left_heel", "right_heel", "left_big_toe", "right_big_toe", "left_small_toe", "right_small_toe")


def foot_ids() -> np.ndarray:
    return np.array([index()[n] for n in FEET])


def trunk_ids() -> list[tuple[int, int]]:
    return [(index()[f"{side}_shoulder"], index()[f"{side}_hip"]) for side in ("left", "right")]


class FloorFinder:
    def __init__(self, seed: int = 0) -> None:
        self.points: deque[np.ndarray] = deque(maxlen=MAX_POINTS)
        self.ups: deque[np.ndarray] = deque(maxlen=MAX_POINTS)
        self.rng = np.random.default_rng(seed)
        self.plane: tuple[np.ndarray, float] | None = None  # (unit normal n, offset c): n . x + c = 0 on the floor

    def add(self, xyz: np.ndarray, confidence: np.ndarray, min_confidence: float = 0.5) -> None:
        """The foot keypoints of [P, 308, 3] camera-frame keypoints that are confident (not hidden), and the
        people's up directions (hip to shoulder on each side seen, square to the line between the sides)."""
        feet = xyz[:, foot_ids()].reshape(-1, 3)
        keep = (confidence[:, foot_ids()].reshape(-1) >= min_confidence) & np.isfinite(feet).all(1)
        self.points.extend(feet[keep])
        (left_shoulder, left_hip), (right_shoulder, right_hip) = trunk_ids()
        lateral = xyz[:, left_shoulder] + xyz[:, left_hip] - xyz[:, right_shoulder] - xyz[:, right_hip]
        lateral /= np.linalg.norm(lateral, axis=1, keepdims=True)
        for shoulder, hip in trunk_ids():  # each side of the trunk seen, less its lean in towards the spine
            up = xyz[:, shoulder] - xyz[:, hip]
            up -= np.einsum("pk,pk->p", up, lateral)[:, None] * lateral
            length = np.linalg.norm(up, axis=1)
            seen = (confidence[:, shoulder] >= min_confidence) & (confidence[:, hip] >= min_confidence)
            good = np.isfinite(length) & (length > 0.2) & seen
            self.ups.extend(up[good] / length[good, None])

    def fit(self, tries: int = 300) -> tuple[np.ndarray, float] | None:
        """The floor plane (n, c) in the camera frame, n pointing up (towards the camera), or None (too few points)."""
        if len(self.points) < MIN_POINTS:
            return None
        points = np.array(self.points)
        best, best_score = None, -np.inf
        up = np.array([0.0, -1.0, 0.0])
        for _ in range(tries):
            sample = points[self.rng.choice(len(points), 3, replace=False)]
            normal = np.cross(sample[1] - sample[0], sample[2] - sample[0])
            norm = np.linalg.norm(normal)
            if norm < 1e-9:
                continue
            normal /= norm
            if normal @ up < 0:
                normal = -normal
            if normal @ up < np.cos(np.radians(MAX_TILT_DEG)):
                continue
            height = points @ normal - sample[0] @ normal  # above the candidate plane: positive
            score = (np.abs(height) <= INLIER_M).sum() - 3 * (height < -2 * INLIER_M).sum()
            if score > best_score:
                best, best_score = (normal, height), score
        if best is None:
            return None
        normal, height = best
        inliers = points[np.abs(height) <= INLIER_M]
        if len(inliers) < 3:
            return None
        centre = inliers.mean(0)
        spread = np.linalg.svd(inliers - centre, full_matrices=False)
        if spread[1][1] / np.sqrt(len(inliers)) >= MIN_SPREAD_M:  # feet all over the floor: its own normal
            normal = spread[2][-1]
            normal = normal if normal @ up > 0 else -normal
        elif self.ups:  # feet along one line (a walk across): people stand upright, the floor is square to them
            normal = np.median(np.array(self.ups), axis=0)
            normal /= np.linalg.norm(normal)
        level = normal @ centre
        for _ in range(5):  # the band around the floor's points, centred on them (the search above favours low)
            heights = points @ normal
            band = heights[np.abs(heights - level) <= INLIER_M]
            if not len(band):
                break
            level = float(np.median(band))
        offset = -level + FOOT_KEYPOINT_HEIGHT_M  # the sole is below the keypoints
        self.plane = (normal, float(offset))
        return self.plane


def world_from_camera(normal: np.ndarray, offset: float) -> np.ndarray:
    """4x4: camera-frame points to the world frame on the floor `normal . x + offset = 0` (see the module)."""
    z = normal / np.linalg.norm(normal)
    forward = np.array([0.0, 0.0, 1.0])
    x = forward - (forward @ z) * z
    if np.linalg.norm(x) < 1e-6:  # looking straight down: the camera's down in the picture is forward
        x = np.array([0.0, 1.0, 0.0]) - z[1] * z
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    rotation = np.stack([x, y, z])
    origin = -offset * z  # the camera's foot on the floor, in the camera frame (n . origin + offset = 0)
    out = np.eye(4)
    out[:3, :3] = rotation
    out[:3, 3] = -rotation @ origin
    return out


def transform(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """[..., 3] points through a 4x4 transform."""
    return points @ matrix[:3, :3].T + matrix[:3, 3]
