"""Live triangulation: the cost of one moment (association, triangulation, tracking, the 3-D filter) against
Pose2Sim's own per-keypoint triangulation (`triangulation_from_best_cameras`, what its triangulation step runs) of the
same undistorted keypoints, on the synthetic rig of tests/scenes3d.py.

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


def moments(cameras: int, count: int) -> tuple[list, list]:
    from tests import scenes3d as S

    rig = S.rig(cameras)
    rng = np.random.default_rng(0)
    scene = people(count)
    return rig, [{c.name: S.seen_by(c, scene(i / 10), rng) for c in rig} for i in range(MOMENTS)]


def ours_per_moment(rig, views: list) -> float:
    tri = Triangulator({c.name: c for c in rig})
    for i, moment in enumerate(views[:3]):  # the first moments start the tracks
        tri.update(i / 10, moment)
    start = time.perf_counter()
    for i, moment in enumerate(views[3:], 3):
        tri.update(i / 10, moment)
    return (time.perf_counter() - start) / (len(views) - 3)


def pose2sim_per_moment(rig, views: list) -> float:
    """Each person's keypoints (those the synthetic bodies have) through Pose2Sim's per-keypoint triangulation; the
    people are given already associated (Pose2Sim's association step would come on top)."""
    from Pose2Sim.triangulation import triangulation_from_best_cameras

    tri = Triangulator({c.name: c for c in rig})
    projections = [tri.projections[c.name] for c in rig]
    prepared = [tri._undistorted(moment) for moment in views]
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
    for cameras, count in ((4, 1), (8, 4)):
        rig, views = moments(cameras, count)
        rows.append(dict(name=f"live triangulation, {cameras} cameras x {count} people, per moment",
                         ours_s=ours_per_moment(rig, views), baseline="Pose2Sim, per keypoint, already associated",
                         baseline_s=pose2sim_per_moment(rig, views)))  # fmt: skip
    return rows


if __name__ == "__main__":
    print_table(run())
