"""Where the cameras are, from a board several of them saw at the same moments: pairwise starts, then one bundle
adjustment over every camera and every board view, the world's floor and origin from a board.

1. Each view's board pose in its camera (`solvePnPGeneric`, IPPE: both poses a flat board allows, the one that
   reprojects best; the bundle adjustment settles what one view leaves unsure).
2. Each camera placed relative to the first by the moments both saw (the rotation and translation most views agree
   on), through other cameras where two never saw the board together.
3. One bundle adjustment (`scipy.optimize.least_squares`, robust to a bad corner) over every camera's pose and every
   moment's board pose, minimising every corner's reprojection error in pixels. Intrinsics given in a file stay as
   they are; intrinsics solved from these same views (each camera alone, `intrinsics.py`) are refined here too,
   with the rig: a camera's focal length and principal point are then held by every other camera's view of the
   same board, as `cv2.stereoCalibrate` does for two cameras without CALIB_FIX_INTRINSIC.
4. The world: the board of one moment (`floor`, by default the first seen by the most cameras) is the floor, Z up,
   its first corner the origin, metres. A board's front faces the cameras that see it, so they are above the floor;
   a camera solved below it is said in the report, never silently mirrored.

What the result is worth is measured, not assumed: each camera's reprojection RMS, and the board triangulated from
every moment two cameras saw, its neighbouring corners' spacing against the square and its flatness, in mm; the
same on moments held out of a second solve (`held_out_check`), which the rig has to predict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix
from scipy.spatial.transform import Rotation

from ..errors import Sapiens2StreamError
from ..threed.calibration import Camera
from .boards import Board
from .views import View

MAX_EVALUATIONS = 50  # a rig the boards agree on settles in a handful; boards of different moments paired never
HOLD_OUT = 4  # the held-out board check leaves out every 4th moment two cameras shared
WORLD_FROM_BOARD = np.diag([1.0, -1.0, -1.0])  # board x, y along its rows and columns, z into it -> world Z up


@dataclass
class Placed:
    """The solved rig: each camera (world -> camera, intrinsics as given or as refined with the rig), its
    reprojection RMS over the views used, the moments used, the floor's moment, the board check (in mm), the moments
    each camera saw, the cameras below the floor and the board check on held-out moments."""

    cameras: list[Camera]
    rms_px: dict[str, float]
    moments: list[int]
    floor: int
    check: dict
    views: dict[str, list[int]]  # the moments each camera saw the board
    below_floor: list[str] = field(default_factory=list)
    held_out: dict = field(default_factory=dict)


def pose(rvec: np.ndarray, tvec: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = cv2.Rodrigues(np.asarray(rvec, np.float64))[0]
    out[:3, 3] = np.ravel(tvec)
    return out


def board_pose(view: View, board: Board, cam: Camera) -> np.ndarray:
    """The board's pose in the camera (board -> camera, 4x4): of the two a flat board allows, the one that
    reprojects best."""
    objects = view.found.object_points(board)
    image = cam.undistort(view.found.image)
    _, rvecs, tvecs, errors = cv2.solvePnPGeneric(objects, image, cam.matrix, None, flags=cv2.SOLVEPNP_IPPE)
    best = int(np.argmin(np.ravel(errors)))
    return pose(rvecs[best], tvecs[best])


def mean_pose(poses: list[np.ndarray]) -> np.ndarray:
    """The pose most of `poses` agree on: the rotations' chordal mean, the translations' median."""
    out = np.eye(4)
    out[:3, :3] = Rotation.from_matrix(np.stack([p[:3, :3] for p in poses])).mean().as_matrix()
    out[:3, 3] = np.median(np.stack([p[:3, 3] for p in poses]), axis=0)
    return out


def initial_rig(seen: dict[str, dict[int, np.ndarray]]) -> dict[str, np.ndarray]:
    """Each camera's pose relative to the first (first -> camera), through the cameras that shared moments."""
    names = list(seen)
    placed = {names[0]: np.eye(4)}
    while len(placed) < len(names):
        grew = False
        for name in names:
            if name in placed:
                continue
            for anchor in list(placed):
                shared = sorted(set(seen[name]) & set(seen[anchor]))
                if shared:  # camera <- board <- anchor, per shared moment
                    relative = mean_pose([seen[name][m] @ np.linalg.inv(seen[anchor][m]) for m in shared])
                    placed[name] = relative @ placed[anchor]
                    grew = True
                    break
        if not grew:
            alone = [n for n in names if n not in placed]
            raise Sapiens2StreamError(f"camera {alone[0]}: never saw the board at a moment another camera saw it "
                                      "(show the board to two cameras at once, in their n-th pictures)")  # fmt: skip
    return placed


def bundle_adjust(cams: dict[str, Camera], views: dict[str, dict[int, View]], board: Board,
                  rig: dict[str, np.ndarray], boards: dict[int, np.ndarray],
                  refine_intrinsics: bool = False) -> tuple:  # fmt: skip
    """Every camera's pose (the first's fixed) and every moment's board pose (in the first camera's frame), refined
    together over every corner's reprojection error (Huber, 1 px); with `refine_intrinsics` each camera's fx, fy,
    cx, cy and distortions too. Returns the rig, the boards, each camera's RMS and the cameras (their intrinsics as
    refined, or as given)."""
    names, moments = list(cams), sorted(boards)
    corners = board.corners()
    rows = [(ci, mi, views[n][m]) for ci, n in enumerate(names) for mi, m in enumerate(moments) if m in views[n]]
    sizes = [4 + len(cams[n].distortions) if refine_intrinsics else 0 for n in names]  # each camera's lens params
    lens_at = np.concatenate([[0], np.cumsum(sizes)]).astype(int) + 6 * (len(names) - 1 + len(moments))

    def lens(cam: Camera) -> np.ndarray:
        k = cam.matrix
        return np.concatenate([[k[0, 0], k[1, 1], k[0, 2], k[1, 2]], np.ravel(cam.distortions)])

    def pack(rig, boards) -> np.ndarray:
        parts = [np.concatenate([cv2.Rodrigues(rig[n][:3, :3])[0].ravel(), rig[n][:3, 3]]) for n in names[1:]]
        parts += [np.concatenate([cv2.Rodrigues(boards[m][:3, :3])[0].ravel(), boards[m][:3, 3]]) for m in moments]
        parts += [lens(cams[n]) for n in names if refine_intrinsics]
        return np.concatenate(parts)

    def unpack(x):
        cams_x = [np.zeros(6)] + [x[6 * i : 6 * i + 6] for i in range(len(names) - 1)]
        offset = 6 * (len(names) - 1)
        boards_x = [x[offset + 6 * i : offset + 6 * i + 6] for i in range(len(moments))]
        lenses = []
        for ci, name in enumerate(names):
            if not refine_intrinsics:
                lenses.append((cams[name].matrix, cams[name].distortions))
                continue
            fx, fy, cx, cy, *dist = x[lens_at[ci] : lens_at[ci + 1]]
            lenses.append((np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]), np.array(dist)))
        return cams_x, boards_x, lenses

    def residuals(x):
        cams_x, boards_x, lenses = unpack(x)
        out = []
        for ci, mi, view in rows:
            world = pose(boards_x[mi][:3], boards_x[mi][3:])
            camera = pose(cams_x[ci][:3], cams_x[ci][3:]) @ world
            rvec = cv2.Rodrigues(camera[:3, :3])[0]
            projected, _ = cv2.projectPoints(corners[view.found.ids], rvec, camera[:3, 3], *lenses[ci])
            out.append((projected.reshape(-1, 2) - view.found.image).ravel())
        return np.concatenate(out)

    sparsity = lil_matrix((sum(2 * len(v.found.ids) for _, _, v in rows), lens_at[-1]), dtype=int)
    start = 0
    for ci, mi, view in rows:
        n = 2 * len(view.found.ids)
        if ci > 0:
            sparsity[start : start + n, 6 * (ci - 1) : 6 * ci] = 1
        col = 6 * (len(names) - 1 + mi)
        sparsity[start : start + n, col : col + 6] = 1
        sparsity[start : start + n, lens_at[ci] : lens_at[ci + 1]] = 1
        start += n
    fit = least_squares(residuals, pack(rig, boards), jac_sparsity=sparsity, loss="huber", f_scale=1.0,
                        x_scale="jac", method="trf", max_nfev=MAX_EVALUATIONS)  # fmt: skip
    cams_x, boards_x, lenses = unpack(fit.x)
    solved_rig = {n: pose(c[:3], c[3:]) for n, c in zip(names, cams_x, strict=True)}
    solved_boards = {m: pose(b[:3], b[3:]) for m, b in zip(moments, boards_x, strict=True)}
    solved_cams = {n: Camera(n, cams[n].size, k, d, cams[n].rotation, cams[n].translation)
                   for n, (k, d) in zip(names, lenses, strict=True)}  # fmt: skip
    errors = fit.fun.reshape(-1, 2)
    per_camera, start = {n: [] for n in names}, 0
    for ci, _, view in rows:
        per_camera[names[ci]].append(errors[start : start + len(view.found.ids)])
        start += len(view.found.ids)
    rms = {n: float(np.sqrt(np.mean(np.sum(np.concatenate(e) ** 2, axis=1)))) for n, e in per_camera.items()}
    return solved_rig, solved_boards, rms, solved_cams


def board_check(cams: list[Camera], views: dict[str, dict[int, View]], board: Board) -> dict:
    """The board triangulated (linear, undistorted corners) at every moment two or more cameras saw it: the spacing
    of neighbouring corners against the square, and each corner's distance from its moment's best plane, in mm."""
    spacing, flatness = [], []
    grid = board.corners()
    neighbours = [(i, j) for i in range(len(grid)) for j in range(i + 1, len(grid))
                  if abs(np.linalg.norm(grid[i] - grid[j]) - board.square) < 1e-9]  # fmt: skip
    moments = sorted({m for v in views.values() for m in v})
    for m in moments:
        seeing = [c for c in cams if m in views[c.name]]
        if len(seeing) < 2:
            continue
        common = set.intersection(*(set(views[c.name][m].found.ids.tolist()) for c in seeing))
        ids = sorted(common)
        if len(ids) < 4:
            continue
        points = []
        for corner in ids:
            rows = []
            for cam in seeing:
                view = views[cam.name][m]
                xy = cam.undistort(view.found.image[view.found.ids == corner])[0]
                p = cam.projection()
                rows += [xy[0] * p[2] - p[0], xy[1] * p[2] - p[1]]
            _, _, vt = np.linalg.svd(np.stack(rows))
            points.append(vt[-1, :3] / vt[-1, 3])
        xyz = dict(zip(ids, points, strict=True))
        spacing += [np.linalg.norm(xyz[i] - xyz[j]) for i, j in neighbours if i in xyz and j in xyz]
        stacked = np.stack(points)
        centred = stacked - stacked.mean(0)
        normal = np.linalg.svd(centred)[2][-1]
        flatness += list(np.abs(centred @ normal))
    if not spacing:
        return {}
    spacing_mm, flat_mm = np.array(spacing) * 1000, np.array(flatness) * 1000
    return {
        "square_mm": board.square * 1000, "spacing_mean_mm": float(spacing_mm.mean()),
        "spacing_sd_mm": float(spacing_mm.std()), "spacing_error_pct": float(100 * (spacing_mm.mean() /
                                                                                      (board.square * 1000) - 1)),
        "spacing_p95_error_mm": float(np.percentile(np.abs(spacing_mm - board.square * 1000), 95)),
        "flatness_rms_mm": float(np.sqrt(np.mean(flat_mm**2))), "pairs": len(spacing),
    }  # fmt: skip


def calibrate_extrinsics(cams: dict[str, Camera], found: dict[str, list[View]], board: Board,
                         floor: int | None = None, refine_intrinsics: bool = False) -> Placed:  # fmt: skip
    """Place `cams` from their views of `board`; `floor`: the moment whose board is the floor (default: the first
    seen by the most cameras); `refine_intrinsics`: the cameras' intrinsics were solved from these views, one
    camera at a time, and are refined with the rig."""
    views = {name: {v.moment: v for v in found[name]} for name in cams}
    seen = {name: {m: board_pose(v, board, cams[name]) for m, v in views[name].items()} for name in cams}
    if len(cams) < 2:
        raise Sapiens2StreamError("calibrate extrinsics needs two or more cameras (--camera NAME=PATH, repeated)")
    given = cams
    rig, boards, rms, cams = solve_rig(given, views, seen, board, refine_intrinsics)
    moments = sorted(boards)
    counts = {m: sum(m in views[n] for n in cams) for m in moments}
    if floor is None:
        floor = max(moments, key=lambda m: (counts[m], -m))
    elif floor not in boards:
        raise Sapiens2StreamError(f"--floor-from-board {floor}: no camera saw the board in picture {floor} "
                                  f"(seen in pictures {', '.join(str(m) for m in moments)})")  # fmt: skip
    world_to_first = np.linalg.inv(boards[floor])  # first camera -> board of the floor's moment
    to_world = np.eye(4)
    to_world[:3, :3] = WORLD_FROM_BOARD
    first_to_world = to_world @ world_to_first
    placed = []
    for name, cam in cams.items():
        camera_from_world = rig[name] @ np.linalg.inv(first_to_world)
        rvec = cv2.Rodrigues(camera_from_world[:3, :3])[0].ravel()
        placed.append(Camera(name, cam.size, cam.matrix, cam.distortions, rvec, camera_from_world[:3, 3]))
    below = [c.name for c in placed if c.centre[2] < 0]
    check = board_check(placed, views, board)
    held = held_out_check(given, views, seen, board, [m for m in moments if counts[m] >= 2], refine_intrinsics)
    return Placed(placed, rms, moments, floor, check, {n: sorted(v) for n, v in views.items()}, below, held)


def solve_rig(cams: dict[str, Camera], views: dict[str, dict[int, View]], seen: dict[str, dict[int, np.ndarray]],
              board: Board, refine_intrinsics: bool = False) -> tuple:  # fmt: skip
    """Steps 2-3: each camera (first camera -> camera), each moment's board (in the first camera), each camera's
    RMS and the cameras' intrinsics (refined with the rig where asked), from the views given."""
    rig = initial_rig(seen)
    boards = {}
    for m in sorted({m for s in seen.values() for m in s}):  # the board in the first camera, from all that saw it
        boards[m] = mean_pose([np.linalg.inv(rig[n]) @ seen[n][m] for n in cams if m in seen[n]])
    return bundle_adjust(cams, views, board, rig, boards, refine_intrinsics)


def held_out_check(cams: dict[str, Camera], views: dict[str, dict[int, View]], seen: dict[str, dict[int, np.ndarray]],
                   board: Board, shared: list[int], refine_intrinsics: bool = False) -> dict:  # fmt: skip
    """The board check on moments the calibration never saw: every HOLD_OUT-th moment two cameras shared is left
    out, the rig solved again from the rest, and the left-out boards triangulated with it. A check on the moments
    the rig was fitted to flatters it; these boards it has to predict. {} where too few moments are shared (fewer
    than 2 * HOLD_OUT) or the rest no longer joins every camera."""
    held = shared[1::HOLD_OUT]
    if len(shared) < 2 * HOLD_OUT:
        return {}
    keep = {n: {m: v for m, v in views[n].items() if m not in held} for n in cams}
    try:
        rig, _, _, cams = solve_rig(cams, keep, {n: {m: p for m, p in seen[n].items() if m not in held}
                                                 for n in cams}, board, refine_intrinsics)  # fmt: skip
    except Sapiens2StreamError:
        return {}
    placed = [Camera(n, c.size, c.matrix, c.distortions, cv2.Rodrigues(rig[n][:3, :3])[0].ravel(), rig[n][:3, 3])
              for n, c in cams.items()]  # fmt: skip
    check = board_check(placed, {n: {m: views[n][m] for m in held if m in views[n]} for n in cams}, board)
    return {**check, "pictures": held} if check else {}
