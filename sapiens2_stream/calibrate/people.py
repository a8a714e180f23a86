"""Where the cameras are, from the people they saw: no board, only a person walking through the room.

Each camera's 2-D keypoints of the person (an earlier run's `results.jsonl`, frame by frame) are the
correspondences: the same body point at the same moment seen by two cameras. With the intrinsics known:

1. The two cameras that share the most confident keypoints: their relative pose from the essential matrix
   (MAGSAC++, so wrong keypoints and occlusions are outvoted), the shared keypoints triangulated.
2. Every other camera placed by those points (PnP, RANSAC), more points triangulated as cameras join.
3. One bundle adjustment over every camera's pose and every point (robust, reprojection error in pixels; each
   bone's length held constant over the moments), twice more without the keypoints it cannot explain (over 4 px,
   or over three times the camera's median error where its model is noisier: a model's confusion, another
   person).
   Asked (`--refine-focal`), the last two adjustments solve each camera's focal length too.
   Steps 1-2 and the first adjustment run from several starts (MAGSAC's widest noise 2, 4 and 8 px) and the rig
   whose median error over every keypoint seen is smallest goes on: with a model's keypoints a few pixels off (a
   small person in the picture), one start can settle on a rig 1 m from the truth that explains the keypoints it
   kept as well. A start that leaves a camera unexplained (`starts`), or a rig whose people's feet are not on one
   floor (step 4, FLOOR_DOUBT_M), gives way to the next pair's start: a short walk seen by two cameras facing
   each other can mislead every start of that pair.
4. Up and the floor: the feet rest on it (a plane fitted, robustly, through each moment's lowest foot keypoints, at
   the height of the feet that rest rather than those lifting, a sole's thickness below them), up is towards the
   eyes; where the feet went along a line (one walk across the room) the floor's roll about that line is the
   body's own up, feet to eyes on average, which a line of footprints cannot give.
5. The scale from the person's height: standing height is the eyes' height over the floor when upright (walking
   lowers them between steps) divided by 0.936 (adults' eye height is 93.6 % of their stature in anthropometric
   tables; the keypoints stop at the face, so the crown is estimated, never seen). The origin on the floor under
   the person's hips at the first moment, X along the first camera's view.

What is known about the result is measured: each camera's reprojection RMS, how many points agreed, the floor's fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import cv2
import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import coo_matrix

from ..errors import Sapiens2StreamError
from ..threed.body import BONES, index
from ..threed.calibration import Camera
from .sightings import Key

MIN_SCORE = 0.5  # keypoints below this confidence are not used
MAX_MOMENTS = 60  # moments used, evenly spread over the recording
EYE_SHARE = 0.936  # adults' eye height over stature (anthropometric tables)
SOLE_M = 0.025  # the heel and toe keypoints' height above the ground (the sole, the foot's roundness)
START_PX = (2.0, 4.0, 8.0)  # the starts tried; the one that explains the keypoints best is kept
START_PAIRS = 3  # pairs of cameras whose starts are tried in turn while the rig is doubtful
FLOOR_DOUBT_M = 0.15  # a rig whose people's feet lie further off one floor (RMS) is doubted: 41-63 mm for right
# rigs through the toy model's rough keypoints (under 20 mm from clean ones), 165-380 mm for wrong ones
STRETCH_PX = 30.0  # a bone 10 % longer or shorter than its length weighs as 3 px off
# after the first adjustment, keypoints further than this from the solution are left out: 4 px, or three times the
# camera's median error where its model is noisier
OUTLIER_PX = 4.0
OUTLIER_SPREAD = 3.0


@dataclass
class PeoplePlaced:
    """The solved rig (world -> camera), each camera's reprojection RMS, the points and moments the bundle
    adjustment used, the person's eye height and height it assumed, the floor fit's RMS, and where the person's
    feet went ([N, 2], world metres: for the picture)."""

    cameras: list[Camera]
    rms_px: dict[str, float]
    points: int
    moments: int
    eye_height_m: float
    floor_rms_m: float
    footprints: np.ndarray

    @property
    def doubtful(self) -> bool:
        """Whether the people's feet lie too far off one floor for the rig to be trusted (FLOOR_DOUBT_M)."""
        return self.floor_rms_m > FLOOR_DOUBT_M


def normalised(cam: Camera, pixels: np.ndarray) -> np.ndarray:
    return cv2.undistortPoints(pixels.reshape(-1, 1, 2), cam.matrix, cam.distortions).reshape(-1, 2)


def triangulate(poses: list[np.ndarray], points: list[np.ndarray]) -> np.ndarray:
    """One point from its normalised image points in several cameras (3x4 poses), linear."""
    rows = []
    for p, (x, y) in zip(poses, points, strict=True):
        rows += [x * p[2] - p[0], y * p[2] - p[1]]
    v = np.linalg.svd(np.stack(rows))[2][-1]
    return v[:3] / v[3]


def calibrate_from_people(cams: dict[str, Camera], seen: dict[str, dict[Key, tuple]], height_m: float,
                          measured: int, refine_focal: bool = False) -> PeoplePlaced:  # fmt: skip
    """Place `cams` (intrinsics known) from the people each saw (`Sightings.seen`: (frame, person) -> keypoints
    and scores, on one clock); `height_m` the standing height of person `measured`; `refine_focal`: each camera's
    focal length solved too, in the final adjustments (the principal point and distortion kept)."""
    names = list(cams)
    frames = sorted({frame for s in seen.values() for frame, _ in s})
    if not frames:
        raise Sapiens2StreamError("calibrate people: no camera saw a person")
    use = set(frames[:: max(1, len(frames) // MAX_MOMENTS)])
    obs: dict[str, dict[tuple[Key, int], np.ndarray]] = {}
    for name in names:
        obs[name] = {}
        for sample, (kp, score) in seen[name].items():
            if sample[0] not in use:
                continue
            good = np.flatnonzero(score >= MIN_SCORE)
            for k, xy in zip(good, normalised(cams[name], kp[good]), strict=True):
                obs[name][(sample, int(k))] = xy
    pairs = sorted(((len(obs[a].keys() & obs[b].keys()), a, b) for i, a in enumerate(names) for b in names[i + 1:]),
                   reverse=True)  # fmt: skip
    if not pairs or pairs[0][0] < 30:
        raise Sapiens2StreamError("calibrate people: no two cameras saw the person at the same moments (30 "
                                  "keypoints shared at least)")  # fmt: skip
    placed, doubts = None, []
    for a, b, (poses, points, error, _) in starts(cams, obs, pairs):
        if not np.isfinite(error):
            doubts.append(f"cameras {a} and {b} share keypoints but no relative pose fits them (the person standing "
                          "still, or seen from one place)")  # fmt: skip
            continue
        fitted, poses, points, rms = refined(cams, obs, poses, points, a, refine_focal)
        lost = [n for n in names if not np.isfinite(rms[n])]
        if lost:
            doubts.append(f"camera {lost[0]}: none of its keypoints agree with where the others put the person "
                          "(record a longer walk through the room)")  # fmt: skip
            continue
        rig = placed_in_world(fitted, poses, points, rms, height_m, measured, len(use))
        if not rig.doubtful:
            return rig
        placed = rig if placed is None or rig.floor_rms_m < placed.floor_rms_m else placed
    if placed is None:
        raise Sapiens2StreamError(f"calibrate people: {doubts[0]}")
    return placed  # the flattest floor of the rigs tried; the command warns of its doubt


def starts(cams: dict[str, Camera], obs: dict, pairs: list[tuple[int, str, str]]) -> Iterator[tuple]:
    """(a, b, start) in the order they are worth solving: for each pair of cameras sharing keypoints, the most first
    (up to START_PAIRS), its start that explains the keypoints best (`start_rig`'s median error) among those that
    leave no camera unexplained (its own median error infinite, or over OUTLIER_SPREAD times the median and
    OUTLIER_PX); then, for the pairs with no such start, their best. A short walk seen by two cameras facing each
    other across the room can give a pair's every start a rig that puts a third camera behind the person; another
    pair's come out right."""
    unsound = []
    for shared, a, b in pairs[:START_PAIRS]:
        if shared < 30:
            break
        tried = sorted((start_rig(cams, obs, a, b, start_px) for start_px in START_PX), key=lambda s: s[2])
        sound = [s for s in tried if np.isfinite(s[3]) and s[3] <= max(OUTLIER_PX, OUTLIER_SPREAD * s[2])]
        if sound:
            yield a, b, sound[0]
        else:
            unsound.append((a, b, tried[0]))
    yield from unsound


def refined(cams: dict[str, Camera], obs: dict, poses: dict, points: dict, fixed: str,
            refine_focal: bool) -> tuple[dict, dict, dict, dict]:  # fmt: skip
    """(cameras, poses, points, RMS per camera; NaN for a camera left with no keypoints) after two rounds of leaving
    out the keypoints the rig cannot explain (a model's confusion, a wrong person) and adjusting again;
    `refine_focal`: the cameras' focal lengths solved too."""
    names, kept = list(cams), obs
    for _ in range(2):
        kept = {n: agreeing(kept[n], poses[n], points, cams[n]) for n in names}
        points = {k: v for k, v in points.items() if sum(k in kept[n] for n in names) >= 2}
        poses, points, rms, scales = adjust(cams, kept, poses, points, fixed, refine_focal)
        if refine_focal:  # a focal length `scale` times the given one: the normalised keypoints shrink by it
            cams = {n: with_focal(cams[n], scales[n]) for n in names}
            kept = {n: {k: xy / scales[n] for k, xy in kept[n].items()} for n in names}
    return cams, poses, points, rms


def with_focal(cam: Camera, scale: float) -> Camera:
    """`cam` with its focal lengths (fx, fy) `scale` times as long."""
    matrix = cam.matrix.copy()
    matrix[0, 0] *= scale
    matrix[1, 1] *= scale
    return replace(cam, matrix=matrix)


def start_rig(cams: dict[str, Camera], obs: dict, a: str, b: str,
              start_px: float) -> tuple[dict, dict, float, float]:  # fmt: skip
    """(poses, points, the median error over every keypoint seen, the largest of the cameras' own median errors)
    from one start: the pair a, b from the essential matrix (MAGSAC++ with `start_px` as its widest noise), the
    others by PnP, then one bundle adjustment."""
    names = list(cams)
    keys = sorted(obs[a].keys() & obs[b].keys())
    pa, pb = np.stack([obs[a][k] for k in keys]), np.stack([obs[b][k] for k in keys])
    threshold = start_px / float(cams[a].matrix[0, 0])
    e, mask = cv2.findEssentialMat(pa, pb, np.eye(3), cv2.USAC_MAGSAC, 0.999, threshold)
    if e is None or e.shape != (3, 3):
        return {}, {}, np.inf, np.inf
    _, r, t, mask = cv2.recoverPose(e, pa, pb, np.eye(3), mask=mask)
    poses = {a: np.hstack([np.eye(3), np.zeros((3, 1))]), b: np.hstack([r, t])}
    inliers = [k for k, ok in zip(keys, mask.ravel(), strict=True) if ok]
    points = {k: triangulate([poses[a], poses[b]], [obs[a][k], obs[b][k]]) for k in inliers}
    for name in [n for n in names if n not in poses]:
        known = [k for k in obs[name] if k in points]
        if len(known) < 12:
            raise Sapiens2StreamError(f"camera {name}: saw the person at too few moments the others did")
        xyz, xy = np.stack([points[k] for k in known]), np.stack([obs[name][k] for k in known])
        ok, rvec, tvec, _ = cv2.solvePnPRansac(xyz, xy, np.eye(3), None, reprojectionError=threshold)
        if not ok:
            raise Sapiens2StreamError(f"camera {name}: could not be placed from the person's keypoints")
        poses[name] = np.hstack([cv2.Rodrigues(rvec)[0], tvec])
        for k in obs[name]:
            if k not in points:
                views = [n for n in poses if k in obs[n]]
                if len(views) >= 2:
                    points[k] = triangulate([poses[n] for n in views], [obs[n][k] for n in views])
    poses, points, _, _ = adjust(cams, obs, poses, points, a)
    errors = {n: [reprojection_px(poses[n], points[k], xy, cams[n]) for k, xy in obs[n].items() if k in points]
              for n in names}  # fmt: skip
    worst = max(float(np.median(e)) if e else np.inf for e in errors.values())
    return poses, points, float(np.median([x for e in errors.values() for x in e])), worst


def reprojection_px(pose: np.ndarray, point: np.ndarray, xy: np.ndarray, cam: Camera) -> float:
    """How far (pixels) a keypoint lies from where the solved point projects (infinite behind the camera)."""
    p = pose[:, :3] @ point + pose[:, 3]
    return float(np.linalg.norm(p[:2] / p[2] - xy)) * float(cam.matrix[0, 0]) if p[2] > 0 else np.inf


def agreeing(obs: dict, pose: np.ndarray, points: dict, cam: Camera) -> dict:
    """One camera's keypoints that agree with the solved rig: within OUTLIER_PX, or within OUTLIER_SPREAD times
    the camera's median error where its model's keypoints are noisier than that (a fixed bar would keep only the
    keypoints that happen to agree with a wrong start, and the rig would settle where they put it)."""
    errors = {k: reprojection_px(pose, points[k], xy, cam) for k, xy in obs.items() if k in points}
    bar = max(OUTLIER_PX, OUTLIER_SPREAD * float(np.median(list(errors.values())))) if errors else OUTLIER_PX
    return {k: xy for k, xy in obs.items() if errors.get(k, 0.0) < bar}


def adjust(cams, obs, poses: dict, points: dict, fixed: str,
           refine_focal: bool = False) -> tuple[dict, dict, dict, dict]:  # fmt: skip
    """Bundle adjustment: every camera but `fixed`, every point; residuals in pixels (normalised x focal), Huber.
    With the bones' lengths held constant over the moments (each bone's length a free variable): a person's limbs
    do not stretch, and a rig bent to fit a model's biased keypoints would stretch them as the person walks.
    `refine_focal`: every camera's focal length too, as a factor on the given one (returned per camera; 1 when
    not refined)."""
    order = list(poses)
    moving = [n for n in order if n != fixed]
    keys = list(points)
    where = {k: i for i, k in enumerate(keys)}
    rows = [(order.index(n), where[k], obs[n][k]) for n in order for k in obs[n] if k in where]
    row_cam = np.array([r[0] for r in rows])
    row_point = np.array([r[1] for r in rows])
    seen_xy = np.stack([r[2] for r in rows])
    focal = np.array([float(cams[n].matrix[0, 0]) for n in order])[row_cam, None]
    slot = {n: moving.index(n) for n in moving}
    ids = index()
    bone_ends = [(ids[a], ids[b]) for a, b in BONES]
    links = [(where[(m, a)], where[(m, b)], i) for (m, a) in keys for i, (ea, b) in enumerate(bone_ends)
             if ea == a and (m, b) in where]  # fmt: skip
    link_a, link_b, link_bone = (np.array([x[j] for x in links], int) for j in range(3))
    n_pose, n_points = 6 * len(moving), 3 * len(keys)
    n_fixed = n_pose + n_points + len(bone_ends)  # the variables before the focal factors' logarithms

    def unpack(x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rotations, translations = np.empty((len(order), 3, 3)), np.empty((len(order), 3))
        for i, n in enumerate(order):
            if n == fixed:
                rotations[i], translations[i] = poses[n][:, :3], poses[n][:, 3]
            else:
                j = 6 * slot[n]
                rotations[i], translations[i] = cv2.Rodrigues(x[j : j + 3])[0], x[j + 3 : j + 6]
        if refine_focal:  # a longer lens comes with the camera further back: the person's size in the picture
            # stays, which is the cheap direction to move in; without the pairing the solver creeps along it
            translations[:, 2] += (np.exp(x[n_fixed:]) - 1) * depth
        return rotations, translations, x[n_pose : n_pose + n_points].reshape(-1, 3)

    def residuals(x):
        rotations, translations, pts = unpack(x)
        cam = np.einsum("rij,rj->ri", rotations[row_cam], pts[row_point]) + translations[row_cam]
        scale = np.exp(x[n_fixed:])[row_cam, None] if refine_focal else 1.0
        seen = ((scale * cam[:, :2] / cam[:, 2:3] - seen_xy) * focal).ravel()
        lengths = x[n_pose + n_points : n_fixed]
        stretch = np.linalg.norm(pts[link_a] - pts[link_b], axis=1) / lengths[link_bone] - 1
        return np.concatenate([seen, STRETCH_PX * stretch])

    xyz = np.stack([points[k] for k in keys])
    depth = np.array([np.median(xyz[row_point[row_cam == i]] @ poses[n][2, :3] + poses[n][2, 3])
                      if np.any(row_cam == i) else 1.0
                      for i, n in enumerate(order)])  # each camera's typical distance to the points  # fmt: skip
    typical = np.array([np.median(np.linalg.norm(xyz[link_a[link_bone == i]] - xyz[link_b[link_bone == i]], axis=1))
                        if np.any(link_bone == i) else 1.0 for i in range(len(bone_ends))])  # fmt: skip
    focal_logs = np.zeros(len(order) if refine_focal else 0)
    x0 = np.concatenate([*(np.concatenate([cv2.Rodrigues(poses[n][:, :3])[0].ravel(), poses[n][:, 3]])
                           for n in moving), xyz.ravel(), typical, focal_logs])  # fmt: skip
    # which variables each residual depends on: a keypoint's two on its camera's pose (none for the fixed one) and
    # its point; a bone's stretch on its two points and its length
    pose_col = np.array([6 * slot[n] if n != fixed else -1 for n in order])[row_cam]
    seen_rows, seen_cols = [], []
    for axis in range(2):
        r = 2 * np.arange(len(rows)) + axis
        moving_rows = pose_col >= 0
        seen_rows += [np.repeat(r[moving_rows], 6), np.repeat(r, 3)]
        seen_cols += [(pose_col[moving_rows, None] + np.arange(6)).ravel(),
                      (n_pose + 3 * row_point[:, None] + np.arange(3)).ravel()]  # fmt: skip
        if refine_focal:  # and on its camera's focal factor
            seen_rows.append(r)
            seen_cols.append(n_fixed + row_cam)
    r = 2 * len(rows) + np.arange(len(links))
    bone_rows = [np.repeat(r, 3), np.repeat(r, 3), r]
    bone_cols = [(n_pose + 3 * ends[:, None] + np.arange(3)).ravel() for ends in (link_a, link_b)]
    bone_cols.append(n_pose + n_points + link_bone)
    at_rows, at_cols = np.concatenate(seen_rows + bone_rows), np.concatenate(seen_cols + bone_cols)
    sparsity = coo_matrix((np.ones(len(at_rows), int), (at_rows, at_cols)), shape=(2 * len(rows) + len(links), len(x0)))
    # LSMR's steps solved tightly: with its default tolerances every adjustment ran its 100 evaluations without
    # converging, and one refining focal lengths crept along the lens-distance valley (15 cm off)
    fit = least_squares(residuals, x0, jac_sparsity=sparsity, loss="huber", f_scale=2.0, x_scale="jac",
                        ftol=1e-6 if refine_focal else 1e-4, max_nfev=100,
                        tr_options={"atol": 1e-10, "btol": 1e-10})  # fmt: skip
    rotations, translations, pts = unpack(fit.x)
    placed = {n: np.hstack([rotations[i], translations[i][:, None]]) for i, n in enumerate(order)}
    err = np.sum(fit.fun[: 2 * len(rows)].reshape(-1, 2) ** 2, axis=1)
    rms = {
        n: float(np.sqrt(err[row_cam == i].mean())) if np.any(row_cam == i) else float("nan")
        for i, n in enumerate(order)
    }  # NaN: a camera left with none of its keypoints
    scales = np.exp(fit.x[n_fixed:]) if refine_focal else np.ones(len(order))
    return placed, dict(zip(keys, pts, strict=True)), rms, dict(zip(order, scales.tolist(), strict=True))


def fit_plane(points: np.ndarray, tolerance: float) -> tuple[np.ndarray, float]:
    """(unit normal, offset) of the plane most points lie on (RANSAC, then least squares over its inliers)."""
    rng = np.random.default_rng(0)
    best = None
    for _ in range(200):
        sample = points[rng.choice(len(points), 3, replace=False)]
        normal = np.cross(sample[1] - sample[0], sample[2] - sample[0])
        if np.linalg.norm(normal) < 1e-12:
            continue
        normal /= np.linalg.norm(normal)
        inliers = np.abs((points - sample[0]) @ normal) < tolerance
        if best is None or inliers.sum() > best.sum():
            best = inliers
    chosen = points[best]
    centre = chosen.mean(0)
    normal = np.linalg.svd(chosen - centre)[2][-1]
    return normal, float(normal @ centre)


def placed_in_world(cams, poses, points, rms, height_m: float, measured: int, moments: int) -> PeoplePlaced:
    """The solved rig in the world: the floor from everyone's feet, Z up, metres from person `measured`'s height,
    origin under their hips."""
    ids = index()
    feet = [ids[n] for n in ("left_heel", "right_heel", "left_big_toe", "right_big_toe", "left_small_toe",
                             "right_small_toe")]  # fmt: skip
    eyes, hips = [ids["left_eye"], ids["right_eye"]], [ids["left_hip"], ids["right_hip"]]
    by_moment: dict[Key, dict[int, np.ndarray]] = {}  # (frame, person) -> keypoint -> point
    for (m, k), xyz in points.items():
        by_moment.setdefault(m, {})[k] = xyz
    ups = [np.mean([p[k] for k in eyes], 0) - np.mean([p[k] for k in feet if k in p], 0) for p in by_moment.values()
           if all(k in p for k in eyes) and any(k in p for k in feet)]  # fmt: skip
    if not ups:
        raise Sapiens2StreamError("calibrate people: the person's eyes and feet were never both seen")
    up = np.mean(ups, 0)
    size = float(np.linalg.norm(up))
    up /= size
    lowest = [min((p[k] for k in feet if k in p), key=lambda v: v @ up) for p in by_moment.values()
              if any(k in p for k in feet)]  # fmt: skip
    normal, _ = fit_plane(np.stack(lowest), 0.03 * size)
    if normal @ up < 0:
        normal = -normal
    spread = np.linalg.svd(np.stack(lowest) - np.mean(lowest, 0), compute_uv=False)
    if spread[1] < 0.25 * spread[0]:  # the feet went along a line: the floor's roll about it is the body's up
        along = np.linalg.svd(np.stack(lowest) - np.mean(lowest, 0))[2][0]
        normal = up - (up @ along) * along
        normal /= np.linalg.norm(normal)
    offset = float(np.percentile(np.stack(lowest) @ normal, 5))  # the feet that rest, not the ones lifting
    theirs = {m: p for m, p in by_moment.items() if m[1] == measured}  # the person whose height is known
    eye_heights = [float(np.mean([p[k] for k in eyes], 0) @ normal - offset) for p in theirs.values()
                   if all(k in p for k in eyes)]  # fmt: skip
    if not eye_heights:
        raise Sapiens2StreamError("calibrate people: the measured person's eyes were never seen by two cameras")
    floor_residual = float(np.sqrt(np.mean([(v @ normal - offset) ** 2 for v in lowest])))
    eye_units = float(np.percentile(eye_heights, 90))  # upright: walking lowers the eyes between steps
    # eye height over the ground = eye height over the foot keypoints + the sole; in metres: EYE_SHARE * height
    scale = (EYE_SHARE * height_m - SOLE_M) / eye_units
    first_moment = min((m for m, p in theirs.items() if all(k in p for k in hips)), default=None)
    hip = np.mean([theirs[first_moment][k] for k in hips] if first_moment is not None else lowest, 0)
    origin = hip - (hip @ normal - offset) * normal - SOLE_M / scale * normal  # on the ground under the hips
    z = normal
    x = np.array([0.0, 0.0, 1.0]) - (np.array([0.0, 0.0, 1.0]) @ z) * z  # the first camera's view, along the floor
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    world_from_first = np.stack([x, y, z])  # rows: world axes in the first camera's frame
    cameras = []
    for name, p in poses.items():
        r_first = p[:, :3]  # first camera -> this camera
        t = p[:, 3]
        # world -> this camera: X_cam = r_first (R_wf^T (X_w / scale) + origin) + t
        rotation = r_first @ world_from_first.T
        translation = (r_first @ origin + t) * scale
        cam = cams[name]
        cameras.append(Camera(name, cam.size, cam.matrix, cam.distortions, cv2.Rodrigues(rotation)[0].ravel(),
                              translation))  # fmt: skip
    order = {n: i for i, n in enumerate(cams)}
    cameras.sort(key=lambda c: order[c.name])
    steps = np.stack([world_from_first @ (v - origin) * scale for v in lowest])[:, :2]
    return PeoplePlaced(cameras, rms, len(points), moments, eye_units * scale + SOLE_M, floor_residual * scale,
                        steps)  # fmt: skip
