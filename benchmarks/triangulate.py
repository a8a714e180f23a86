"""Live triangulation: the cost of one moment (association, triangulation, tracking, the 3-D filter) against
Pose2Sim's own per-keypoint triangulation (`triangulation_from_best_cameras`, what its triangulation step runs) of the
same undistorted keypoints, on the synthetic rig of tests/scenes3d.py: the synthetic bodies' 23 joints, and all of
Sapiens2's 308 keypoints (what the pose model gives: the others placed near the body's joints).

Run: `python -m benchmarks.triangulate`.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import print_table
from sapiens2_stream.threed import Triangulator

MOMENTS = 50


def people(count: int):
    from tests import scenes3d as S

    return lambda t: [S.walking(t, y=0.6 * p - 0.9, start_x=-1.2 + 0.3 * p) for p in range(count)]


def moments(cameras: int, count: int, whole_body: bool = False) -> tuple[list, list]:
    from tests import scenes3d as S

    rig = S.rig(cameras)
    rng = np.random.default_rng(0)
    scene = people(count)
    seen = whole_body_seen if whole_body else S.seen_by
    return rig, [{c.name: seen(c, scene(i / 10), rng) for c in rig} for i in range(MOMENTS)]


def whole_body_seen(camera, poses, rng) -> tuple[np.ndarray, np.ndarray]:
    """All 308 keypoints scored: each one the synthetic body lacks put at a fixed offset (up to 8 cm) from one of
    its joints, projected through the camera's lens with 1 px of noise."""
    import cv2

    from tests import scenes3d as S

    world = S.world_truth(poses)  # [P, 308, 3]
    have = np.flatnonzero(np.isfinite(world[0, :, 0]))
    lacking = np.flatnonzero(~np.isfinite(world[0, :, 0]))
    fixed = np.random.default_rng(1)
    near, offsets = fixed.choice(have, len(lacking)), fixed.uniform(-0.08, 0.08, (len(lacking), 3))
    world[:, lacking] = world[:, near] + offsets
    pixels, _ = cv2.projectPoints(world.reshape(-1, 3), camera.rotation, camera.translation, camera.matrix,
                                  camera.distortions)  # fmt: skip
    pixels = pixels.reshape(len(poses), 308, 2) + rng.normal(0, 1.0, (len(poses), 308, 2))
    return pixels, np.full((len(poses), 308), 0.9)


def ours_per_moment(rig, views: list) -> float:
    tri = Triangulator({c.name: c for c in rig})
    for i, moment in enumerate(views[:3]):  # the first moments start the tracks
        tri.update(i / 10, moment)
    start = time.perf_counter()
    for i, moment in enumerate(views[3:], 3):
        tri.update(i / 10, moment)
    return (time.perf_counter() - start) / (len(views) - 3)


def pose2sim_per_moment(rig, views: list, count: int = MOMENTS) -> float:
    """Each person's keypoints (those the synthetic bodies have) through Pose2Sim's per-keypoint triangulation; the
    people are given already associated (Pose2Sim's association step would come on top)."""
    from Pose2Sim.triangulation import triangulation_from_best_cameras

    tri = Triangulator({c.name: c for c in rig})
    projections = [tri.projections[c.name] for c in rig]
    prepared = [tri._undistorted(moment) for moment in views[:count]]
    start = time.perf_counter()
    for moment in prepared:
        for p in range(len(moment[rig[0].name])):
            seen = np.flatnonzero(moment[rig[0].name][p][1] > 0)
            for k in seen:
                points = np.array([moment[c.name][p][0][k] for c in rig])
                coords = (points[:, 0], points[:, 1], np.array([moment[c.name][p][1][k] for c in rig]))
                triangulation_from_best_cameras({}, coords, coords, projections, None)
    return (time.perf_counter() - start) / len(prepared)


def run() -> list[dict]:
    rows = []
    for cameras, count, whole_body in ((4, 1, False), (8, 4, False), (4, 1, True), (8, 4, True)):
        rig, views = moments(cameras, count, whole_body)
        keypoints = "308 keypoints" if whole_body else "23 joints"
        rows.append(dict(name=f"one moment, {cameras} cameras x {count} people, {keypoints}",
                         ours_s=ours_per_moment(rig, views), baseline="Pose2Sim, per keypoint, already associated",
                         baseline_s=pose2sim_per_moment(rig, views, 10 if whole_body else MOMENTS)))  # fmt: skip
    return rows


if __name__ == "__main__":
    print_table(run())
