"""A camera's intrinsics from its views of a board: OpenCV's full model, the principal point free, outliers named.

1. Every view solved together (`calibrateCamera`, k1 k2 p1 p2); a view whose own RMS is over three times the
   median (a board bent, a corner misplaced, motion blur) is dropped and named, and the rest solved again.
2. k3 only when views held out ask for it: the views split in folds, each fold's views reprojected with the
   intrinsics solved without them, with and without k3; k3 is kept when it lowers that held-out RMS by more than
   2 % (a free k3 fits the seen views always, and may bend wildly beyond them).
3. The final solve (`calibrateCameraExtended`) gives the true RMS (the root of the mean square over every corner,
   not Pose2Sim's root of the sum), each view's RMS and the parameters' standard deviations.

Fixing the principal point (aniposelib) or the focal length's aspect (stereo_calib.cpp) biases the extrinsics that
follow (measured on OpenCV's stereo set: +1.9 degrees of relative rotation with the principal point fixed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from .boards import Board
from .views import View

OUTLIER_FACTOR = 3.0  # a view over this many times the median view RMS is dropped
K3_GAIN = 0.02  # k3 is kept when it lowers the held-out RMS by more than this share
FOLDS = 5
MIN_VIEWS = 3
CRITERIA = (cv2.TERM_CRITERIA_COUNT + cv2.TERM_CRITERIA_EPS, 100, 1e-9)
MODELS = {"k1 k2 p1 p2": cv2.CALIB_FIX_K3, "k1 k2 p1 p2 k3": 0}


@dataclass
class Intrinsics:
    """A camera's solved intrinsics and how well they hold: `rms_px` over every corner of the views kept,
    `view_rms_px` per view, `dropped` the views left out and why, `sigma` the standard deviations of fx, fy, cx, cy
    and the distortion coefficients, `heldout_rms_px` per model tried."""

    name: str
    size: tuple[int, int]
    matrix: np.ndarray
    distortions: np.ndarray
    model: str
    rms_px: float
    view_rms_px: dict[str, float]
    sigma: dict[str, float]
    heldout_rms_px: dict[str, float]
    dropped: dict[str, str] = field(default_factory=dict)

    def report(self) -> dict:
        k, d = self.matrix, self.distortions
        return {
            "size": list(self.size), "model": self.model, "rms_px": round(self.rms_px, 4),
            "fx": k[0, 0], "fy": k[1, 1], "cx": k[0, 2], "cy": k[1, 2], "distortions": d.tolist(),
            "sigma": self.sigma, "heldout_rms_px": self.heldout_rms_px, "views": len(self.view_rms_px),
            "view_rms_px": self.view_rms_px, "dropped": self.dropped,
        }  # fmt: skip


def solve(views: list[View], board: Board, size: tuple[int, int], flags: int) -> tuple:
    """calibrateCamera over `views`: (rms, K, dist, rvecs, tvecs)."""
    objects = [v.found.object_points(board).astype(np.float32) for v in views]
    images = [v.found.image.astype(np.float32) for v in views]
    return cv2.calibrateCamera(objects, images, size, None, None, flags=flags, criteria=CRITERIA)


def view_rms(view: View, board: Board, matrix: np.ndarray, dist: np.ndarray, pose=None) -> tuple[float, int]:
    """(RMS px, corners) of one view reprojected with these intrinsics, at `pose` (rvec, tvec) or the pose that
    fits best."""
    objects = view.found.object_points(board)
    if pose is None:
        ok, rvec, tvec = cv2.solvePnP(objects, view.found.image, matrix, dist, flags=cv2.SOLVEPNP_ITERATIVE)
        pose = (rvec, tvec)
    projected, _ = cv2.projectPoints(objects, pose[0], pose[1], matrix, dist)
    squares = np.sum((projected.reshape(-1, 2) - view.found.image) ** 2, axis=1)
    return float(np.sqrt(squares.mean())), len(squares)


def heldout_rms(views: list[View], board: Board, size: tuple[int, int], flags: int) -> float:
    """The RMS of every view reprojected with the intrinsics solved without its fold."""
    folds = min(FOLDS, len(views))
    total, count = 0.0, 0
    for fold in range(folds):
        train = [v for i, v in enumerate(views) if i % folds != fold]
        test = [v for i, v in enumerate(views) if i % folds == fold]
        if len(train) < MIN_VIEWS:
            continue
        _, matrix, dist, _, _ = solve(train, board, size, flags)
        for view in test:
            rms, n = view_rms(view, board, matrix, dist)
            total, count = total + rms**2 * n, count + n
    return float(np.sqrt(total / count)) if count else float("nan")


def calibrate_intrinsics(name: str, views: list[View], board: Board, size: tuple[int, int]) -> Intrinsics:
    """The intrinsics of camera `name` from its views (at least three, once outliers are dropped)."""
    if len(views) < MIN_VIEWS:
        raise Sapiens2StreamError(f"camera {name}: {len(views)} usable view(s) of the board; at least {MIN_VIEWS} "
                                  "are needed (more, from all over the picture and tilted, are better)")  # fmt: skip
    first = MODELS["k1 k2 p1 p2"]
    _, matrix, dist, rvecs, tvecs = solve(views, board, size, first)
    errors = {v.label: view_rms(v, board, matrix, dist, (r, t))[0] for v, r, t in zip(views, rvecs, tvecs,
                                                                                       strict=True)}  # fmt: skip
    limit = OUTLIER_FACTOR * float(np.median(list(errors.values())))
    dropped = {label: f"its RMS {rms:.2f} px is over {OUTLIER_FACTOR:g} times the median view's"
               for label, rms in errors.items() if rms > limit}  # fmt: skip
    kept = [v for v in views if v.label not in dropped]
    if len(kept) < MIN_VIEWS:
        raise Sapiens2StreamError(f"camera {name}: only {len(kept)} view(s) agree with each other; at least "
                                  f"{MIN_VIEWS} are needed")  # fmt: skip
    heldout = {model: heldout_rms(kept, board, size, flags) for model, flags in MODELS.items()}
    plain, with_k3 = heldout["k1 k2 p1 p2"], heldout["k1 k2 p1 p2 k3"]
    model = "k1 k2 p1 p2 k3" if with_k3 < (1 - K3_GAIN) * plain else "k1 k2 p1 p2"
    objects = [v.found.object_points(board).astype(np.float32) for v in kept]
    images = [v.found.image.astype(np.float32) for v in kept]
    rms, matrix, dist, _, _, sd_intrinsics, _, per_view = cv2.calibrateCameraExtended(
        objects, images, size, None, None, flags=MODELS[model], criteria=CRITERIA
    )
    sd = sd_intrinsics.ravel()
    names = ["fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3"]
    sigma = {n: round(float(s), 6) for n, s in zip(names, sd, strict=False)}
    dist = dist.ravel()[: 5 if model.endswith("k3") else 4]
    return Intrinsics(name, size, matrix, dist, model, float(rms),
                      {v.label: round(float(e), 4) for v, e in zip(kept, per_view.ravel(), strict=True)}, sigma,
                      {k: round(v, 4) for k, v in heldout.items()}, dropped)  # fmt: skip
