"""Live 3-D from several calibrated cameras: people associated across views, triangulated, tracked and smoothed, one
moment at a time.

    from sapiens2_stream.threed import Triangulator
    tri = Triangulator("Calib.toml")             # or the parsed cameras: {name: Camera}
    people = tri.update(time_s, {"cam1": (keypoints, scores), "cam2": (keypoints, scores), ...})
    for p in people: p.id, p.xyz, p.confidence, p.views

`views` holds, for the cameras that have a result at that moment, keypoints [P, K, 2] in pixels of that camera's own
(distorted) picture and scores [P, K]. Each person returned has a stable `id`, `xyz` [K, 3] metres in the
calibration's world frame (NaN where no joint could be made), `confidence` [K] and the `views` it was made from.

For each moment:

1. **Undistorted** into each camera's own intrinsic matrix (`cv2.undistortPoints(..., P=K)`), so every camera is an
   ideal pinhole `P = K [R | t]`.
2. **Known people first.** Each tracked person's skeleton, moved on by its velocity, is projected into every view;
   the view's people are matched to the tracks by the median pixel distance of their body joints (Hungarian
   assignment, gated): ids hold through crossings because a person is matched by where their whole skeleton is
   heading in every view, not by which box is nearest.
3. **New people.** The views' people no track took are grouped across cameras by epipolar agreement (the median
   distance of their joints to each other's epipolar lines), greedily from the best pair, one person per camera
   per group. A group of two views or more starts a track; a person seen by one camera alone stays 2-D.
4. **Triangulated** per joint by a score-weighted DLT over the views that scored it, refined to the least
   reprojection error. Where a view's error is above `max_error_px`, every pair of views is tried and the views
   within `max_error_px` of the pair most of them agree with are kept (a small RANSAC over pairs): a camera whose
   keypoints belong to someone else, or are simply wrong, loses its say there, even with two of them wrong.
5. **Smoothed** with the adaptive (IMM) Kalman filter of the 2-D keypoints, in metres, per track; tracks unseen for
   `max_lost_s` end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from ..track.smoothing import AdaptiveKalman
from .calibration import Camera, read_calibration

BODY = (5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 41, 62)  # shoulders, elbows, hips, knees, ankles, wrists (308 layout)
FILTER = {"q_steady": 1e-2, "q_turn": 30.0, "r": 1e-5, "v0": 1.0, "switch": 0.005}  # metres, seconds: r is a
# triangulated joint's own noise (3 mm: 1 px at 4 m with 1080p lenses, over four views)
LIFTED_WEIGHT = 0.1  # a lifted joint's weight in the filter against a triangulated one's (its noise: centimetres)


@dataclass
class Person3D:
    id: int
    xyz: np.ndarray  # [K, 3] metres, world frame; NaN where no joint could be made
    confidence: np.ndarray  # [K] in [0, 1]
    views: list[str]  # the cameras it was made from at this moment
    error_px: float = float("nan")  # mean reprojection error over the joints and views used
    lifted: bool = False  # seen by one camera only: its 3-D keypoints lifted from that camera's pointmap


@dataclass
class Track3D:
    id: int
    xyz: np.ndarray
    velocity: np.ndarray
    time_s: float
    filter: AdaptiveKalman  # over `joints` only: the joints this person has had so far
    joints: np.ndarray = field(default_factory=lambda: np.zeros(0, int))

    def predicted(self, time_s: float) -> np.ndarray:
        return self.xyz + self.velocity * min(time_s - self.time_s, 0.5)


class Triangulator:
    def __init__(
        self,
        calibration: str | Path | dict[str, Camera],
        min_score: float = 0.3,
        max_error_px: float = 12.0,
        match_px: float = 80.0,
        epipolar_px: float = 20.0,
        max_lost_s: float = 1.0,
    ) -> None:
        cameras = read_calibration(calibration) if isinstance(calibration, str | Path) else dict(calibration)
        self.cameras = cameras
        self.projections = {name: cam.projection() for name, cam in cameras.items()}
        self.fundamentals = {(a, b): fundamental(self.projections[a], self.projections[b]) for a in cameras
                             for b in cameras if a != b}  # fmt: skip
        self.min_score, self.max_error_px = min_score, max_error_px
        self.match_px, self.epipolar_px, self.max_lost_s = match_px, epipolar_px, max_lost_s
        self.tracks: dict[int, Track3D] = {}
        self.next_id = 1

    def reset(self) -> None:
        self.tracks.clear()
        self.next_id = 1

    def continue_from(self, moments: list) -> None:
        """An interrupted run's moments (its 3d/keypoints_3d.jsonl read back as `io.records.RecordedMoment`s,
        `--resume`): new ids go on from its highest, and each person it saw within `max_lost_s` of its last moment
        is a track again at their last place (the filter starts afresh there), so they keep their id."""
        last = {person.id: (moment.time, person) for moment in moments for person in moment.people}
        self.next_id = max(last, default=0) + 1
        end = moments[-1].time if moments else 0.0
        for track_id, (time_s, person) in sorted(last.items()):
            if end - time_s <= self.max_lost_s:
                self._track(track_id, time_s, person.keypoints_3d, person.confidence)

    def update(self, time_s: float, views: dict[str, tuple[np.ndarray, ...]]) -> list[Person3D]:
        """`views`: camera -> (keypoints [P, K, 2], scores [P, K]) or, where the camera's pointmap lifted its people
        (the single-camera 3-D stage), (keypoints, scores, lifted [P, K, 3] metres in that camera's frame, NaN
        where unknown): a person only that camera sees is then placed in 3-D by it, and flagged `lifted`."""
        unknown = sorted(set(views) - set(self.cameras))
        if unknown:
            raise ValueError(f"views of cameras the calibration has not: {', '.join(unknown)}")
        detections = self._undistorted(views)
        groups = self._match_tracks(time_s, detections)
        groups += self._new_groups(detections, {(c, i) for g in groups for c, i in g[1].items()})
        taken = {(c, i) for _, members in groups for c, i in members.items()}
        lifted = {(c, i): view[2][i] for c, view in views.items() if len(view) > 2 for i in range(len(view[2]))}
        alone = [(track_id, members) for track_id, members in groups if len(members) == 1]
        alone += [(None, {c: i}) for c, i in lifted if (c, i) not in taken]
        groups = [(track_id, members) for track_id, members in groups if len(members) >= 2]
        made = self.triangulate_many([{c: detections[c][i] for c, i in members.items()} for _, members in groups])
        people = []
        for (track_id, members), (xyz, confidence, error) in zip(groups, made, strict=True):
            if not np.isfinite(xyz[list(BODY)]).any():
                continue
            track = self._track(track_id, time_s, xyz, confidence)
            people.append(Person3D(track.id, track.xyz.copy(), confidence, sorted(members), error))
        for track_id, members in alone:  # seen by one camera: placed by its pointmap, where it has one
            ((camera, i),) = members.items()
            if (camera, i) not in lifted:
                continue
            xyz = self.cameras[camera].to_world(lifted[camera, i])
            scores = detections[camera][i][1]
            confidence = np.where(np.isfinite(xyz).all(1) & (scores >= self.min_score), scores * 0.5, 0.0)
            xyz[confidence <= 0] = np.nan
            if not np.isfinite(xyz[list(BODY)]).any():
                continue
            track = self._track(track_id, time_s, xyz, confidence, LIFTED_WEIGHT)
            people.append(Person3D(track.id, track.xyz.copy(), confidence, [camera], lifted=True))
        for track_id in [t for t, track in self.tracks.items() if time_s - track.time_s > self.max_lost_s]:
            del self.tracks[track_id]
        return people

    # ------------------------------------------------------------------------------------------- views

    def _undistorted(self, views) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
        out = {}
        for name, (keypoints, scores, *_) in views.items():
            cam = self.cameras[name]
            keypoints = np.asarray(keypoints, np.float64)
            flat = cam.undistort(keypoints.reshape(-1, 2)).reshape(keypoints.shape)
            out[name] = [(flat[p], np.asarray(scores[p], np.float64)) for p in range(len(keypoints))]
        return out

    def _match_tracks(self, time_s: float, detections) -> list[tuple[int | None, dict[str, int]]]:
        """Each track's detection in each view (Hungarian on the median body-joint distance to its projection)."""
        tracks = list(self.tracks.values())
        groups = {t.id: {} for t in tracks}
        if not tracks:
            return []
        body = list(BODY)
        for name, people in detections.items():
            if not people:
                continue
            projected = np.stack([project(self.projections[name], t.predicted(time_s)[body]) for t in tracks])
            keypoints = np.stack([p[0][body] for p in people])  # [D, J, 2]
            sure = np.stack([p[1][body] >= self.min_score for p in people])  # [D, J]
            d = np.linalg.norm(projected[:, None] - keypoints[None], axis=-1)  # [T, D, J]
            d = np.where(sure[None] & np.isfinite(d), d, np.nan)
            cost = np.where(np.isfinite(d).sum(-1) >= 3, finite_median(d), 1e9)
            rows, cols = linear_sum_assignment(cost)
            for a, b in zip(rows, cols, strict=True):
                if cost[a, b] <= self.match_px:
                    groups[tracks[a].id][name] = b
        return [(track_id, members) for track_id, members in groups.items() if members]

    def _new_groups(self, detections, taken: set) -> list[tuple[None, dict[str, int]]]:
        """The detections no track took, grouped across views by epipolar agreement (best pairs first)."""
        free = [(c, i) for c, people in detections.items() for i in range(len(people)) if (c, i) not in taken]
        pairs = []
        for x, (ca, ia) in enumerate(free):
            for cb, ib in free[x + 1 :]:
                if ca != cb:
                    d = self._epipolar(ca, detections[ca][ia], cb, detections[cb][ib])
                    if d <= self.epipolar_px:
                        pairs.append((d, (ca, ia), (cb, ib)))
        groups: list[dict[str, int]] = []
        where: dict[tuple[str, int], int] = {}
        for _, a, b in sorted(pairs):
            ga, gb = where.get(a), where.get(b)
            if ga is None and gb is None:
                where[a] = where[b] = len(groups)
                groups.append({a[0]: a[1], b[0]: b[1]})
            elif ga is not None and gb is None and b[0] not in groups[ga]:
                groups[ga][b[0]] = b[1]
                where[b] = ga
            elif gb is not None and ga is None and a[0] not in groups[gb]:
                groups[gb][a[0]] = a[1]
                where[a] = gb
            elif ga is not None and gb is not None and ga != gb and not set(groups[ga]) & set(groups[gb]):
                groups[ga].update(groups[gb])  # two views' pairs of the same person: one group
                for member in groups[gb].items():
                    where[member] = ga
                groups[gb] = {}
        return [(None, g) for g in groups if g]

    def _epipolar(self, ca: str, a, cb: str, b) -> float:
        """The median symmetric distance (px) of two people's body joints to each other's epipolar lines."""
        f = self.fundamentals[ca, cb]
        joints = [k for k in BODY if a[1][k] >= self.min_score and b[1][k] >= self.min_score]
        if len(joints) < 3:
            return np.inf
        pa = np.c_[a[0][joints], np.ones(len(joints))]
        pb = np.c_[b[0][joints], np.ones(len(joints))]
        lines_b = pa @ f.T  # in b's picture
        lines_a = pb @ f
        db = np.abs(np.sum(lines_b * pb, 1)) / np.hypot(lines_b[:, 0], lines_b[:, 1])
        da = np.abs(np.sum(lines_a * pa, 1)) / np.hypot(lines_a[:, 0], lines_a[:, 1])
        return float(np.median((da + db) / 2))

    # ------------------------------------------------------------------------------------------- 3-D

    def triangulate(self, members: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, float]:
        """[K, 3] points, [K] confidences and the mean reprojection error (px) from undistorted (keypoints,
        scores) per camera; views that disagree with a joint's consensus left out of it."""
        return self.triangulate_many([members])[0]

    def triangulate_many(self, people: list[dict[str, tuple[np.ndarray, np.ndarray]]]) -> list[tuple]:
        """`triangulate` for several people at once: their joints solved together, as rows of one system over
        every camera any of them is seen by (a camera that does not see a person has no say in its rows)."""
        if not people:
            return []
        names = sorted({n for members in people for n in members})
        k = len(next(iter(people[0].values()))[0])
        projections = np.stack([self.projections[n] for n in names])  # [V, 3, 4]
        points = np.full((len(people) * k, len(names), 2), np.nan)
        scores = np.zeros((len(people) * k, len(names)))
        for p, members in enumerate(people):
            for v, name in enumerate(names):
                if name in members:
                    points[p * k : (p + 1) * k, v], scores[p * k : (p + 1) * k, v] = members[name]
        use = (scores >= self.min_score) & np.isfinite(points).all(-1)
        xyz, error = np.full((len(points), 3), np.nan), np.full(use.shape, np.nan)
        seen = np.flatnonzero(use.sum(1) >= 2)  # the joints two views or more scored: the others cannot be made
        xyz[seen], error[seen] = solve(projections, points[seen], scores[seen], use[seen])
        doubtful = seen[(np.where(use[seen], error[seen], 0.0).max(1) > self.max_error_px) & (use[seen].sum(1) > 2)]
        if len(doubtful):  # some view disagrees: the pair of views most others agree with decides who is kept
            use[doubtful] = self._consensus(projections, points[doubtful], scores[doubtful], use[doubtful])
            xyz[doubtful], error[doubtful] = solve(projections, points[doubtful], scores[doubtful], use[doubtful])
        made = use.sum(1) >= 2
        xyz[~made] = np.nan
        used_error = np.where(use & made[:, None], error, np.nan)
        confidence = np.where(made, np.where(use, scores, 0).sum(1) / np.maximum(use.sum(1), 1), 0.0)
        confidence = np.clip(confidence * np.minimum(use.sum(1) / 3, 1.0), 0.0, 1.0)
        out = []
        for p in range(len(people)):
            rows = slice(p * k, (p + 1) * k)
            mean_error = float(np.nanmean(used_error[rows])) if np.isfinite(used_error[rows]).any() else float("nan")
            out.append((xyz[rows], confidence[rows], mean_error))
        return out

    def _consensus(self, projections, points, scores, use) -> np.ndarray:
        """[J, V] the views to keep for each doubtful joint: of every pair of its views, the one whose point the most
        other views see within `max_error_px` (then the smallest error), with those views."""
        best_count = np.full(len(points), -1)
        best_error = np.full(len(points), np.inf)
        keep = use.copy()
        for a, b in combinations(range(projections.shape[0]), 2):
            pair = np.zeros_like(use)
            pair[:, [a, b]] = use[:, [a, b]]
            xyz = weighted_dlt(projections, points, np.where(pair, scores, 0.0))
            error = reprojection_errors(projections, xyz, points)
            agree = use & (error <= self.max_error_px)
            count = agree.sum(1)
            mean = np.where(agree, error, 0.0).sum(1) / np.maximum(count, 1)
            both = use[:, a] & use[:, b]
            better = both & ((count > best_count) | ((count == best_count) & (mean < best_error)))
            keep[better], best_count[better], best_error[better] = agree[better], count[better], mean[better]
        return keep

    def _track(self, track_id: int | None, time_s: float, xyz, confidence, weight: float = 1.0) -> Track3D:
        """The track `track_id` (a new one for None or an id not tracked) moved on to this moment's points, smoothed
        (`weight`: the points' trust in the filter against triangulated ones)."""
        new = track_id not in self.tracks
        if new:
            if track_id is None:
                track_id, self.next_id = self.next_id, self.next_id + 1
            self.tracks[track_id] = Track3D(track_id, xyz, np.zeros_like(xyz), time_s,
                                            AdaptiveKalman((0, 3), **FILTER))  # fmt: skip
        track = self.tracks[track_id]
        made = np.isfinite(xyz).all(1)
        joining = np.setdiff1d(np.flatnonzero(made), track.joints)
        if len(joining):
            track.joints = np.concatenate([track.joints, joining])
            track.filter.extend(len(joining))
        joints = track.joints
        dt = None if new else max(time_s - track.time_s, 1e-3)
        trust = np.maximum(confidence[joints] * weight, 1e-3)[:, None]
        step = track.filter.step(np.nan_to_num(xyz[joints]), np.broadcast_to(trust, (len(joints), 3)),
                                 np.repeat(made[joints, None], 3, 1), dt)  # fmt: skip
        smooth = np.full_like(xyz, np.nan)
        smooth[joints] = np.where(track.filter.started, step, np.nan)
        if dt:
            moved = (smooth - track.xyz) / dt
            track.velocity = np.where(np.isfinite(moved), moved, 0.0)
        track.xyz, track.time_s = smooth, time_s
        return track


def finite_median(d: np.ndarray) -> np.ndarray:
    """The median of each row's finite values along the last axis (NaN for none): np.nanmedian's masked arrays
    cost more than the rest of a moment."""
    ordered = np.sort(d, -1)  # NaN last
    n = np.isfinite(d).sum(-1, keepdims=True)
    low = np.take_along_axis(ordered, np.maximum(n - 1, 0) // 2, -1)
    high = np.take_along_axis(ordered, np.minimum(n // 2, d.shape[-1] - 1), -1)
    return np.where(n > 0, (low + high) / 2, np.nan)[..., 0]


def project(projection: np.ndarray, xyz: np.ndarray) -> np.ndarray:
    """[K, 2] pixels of [K, 3] world points through a [3, 4] projection."""
    h = np.c_[xyz, np.ones(len(xyz))] @ projection.T
    return h[:, :2] / h[:, 2:3]


def fundamental(pa: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """F with x_b^T F x_a = 0, from two projection matrices."""
    centre = np.linalg.svd(pa)[2][-1]  # a's camera centre (homogeneous)
    epipole = pb @ centre
    cross = np.array([[0, -epipole[2], epipole[1]], [epipole[2], 0, -epipole[0]], [-epipole[1], epipole[0], 0]])
    return cross @ pb @ np.linalg.pinv(pa)


def weighted_dlt(projections: np.ndarray, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[K, 3] points from [V, 3, 4] projections, [K, V, 2] pixels and [K, V] weights (0: not used), all joints at
    once: each view adds w (u P3 - P1) and w (v P3 - P2) to the joint's system, solved by SVD."""
    u, v = points[..., 0:1], points[..., 1:2]  # [K, V, 1]
    rows_u = u * projections[None, :, 2] - projections[None, :, 0]  # [K, V, 4]
    rows_v = v * projections[None, :, 2] - projections[None, :, 1]
    a = np.concatenate([rows_u, rows_v], 1) * np.concatenate([weights, weights], 1)[..., None]
    a = np.nan_to_num(a)
    h = np.linalg.svd(a)[2][:, -1]  # [K, 4]
    return divided(h[:, :3], h[:, 3:4])


def solve(projections: np.ndarray, points: np.ndarray, scores: np.ndarray, use: np.ndarray):
    """[J, 3] points (score-weighted DLT, then Gauss-Newton on the reprojection error) from the views in `use`, and
    [J, V] every view's reprojection error."""
    weights = np.where(use, scores, 0.0)
    xyz = refined(projections, points, weights, weighted_dlt(projections, points, weights))
    return xyz, reprojection_errors(projections, xyz, points)


def refined(projections: np.ndarray, points: np.ndarray, weights: np.ndarray, xyz: np.ndarray, steps: int = 3):
    """[K, 3] points moved to the least score-weighted squared reprojection error (Gauss-Newton from the DLT's
    algebraic solution, which weighs views by their depth rather than by their pixels)."""
    for _ in range(steps):
        h = np.einsum("vij,kj->kvi", projections, np.c_[xyz, np.ones(len(xyz))])  # [K, V, 3]
        z = h[..., 2:3]
        residual = np.nan_to_num(h[..., :2] / z - points)  # [K, V, 2]
        # d(u)/dX = (P1 - u P3) / z, d(v)/dX = (P2 - v P3) / z
        u, v = h[..., 0:1] / z, h[..., 1:2] / z
        ju = (projections[None, :, 0, :3] - u * projections[None, :, 2, :3]) / z  # [K, V, 3]
        jv = (projections[None, :, 1, :3] - v * projections[None, :, 2, :3]) / z
        w = weights[..., None]
        normal = np.einsum("kvi,kvj->kij", ju * w, ju) + np.einsum("kvi,kvj->kij", jv * w, jv)
        gradient = np.einsum("kvi,kv->ki", ju * w, residual[..., 0]) + np.einsum("kvi,kv->ki", jv * w, residual[..., 1])
        ok = np.isfinite(normal).all((1, 2)) & (np.abs(np.linalg.det(normal)) > 1e-12)
        if not ok.any():
            break
        step = np.zeros_like(xyz)
        step[ok] = np.linalg.solve(normal[ok], -gradient[ok][..., None])[..., 0]
        xyz = xyz + step
    return xyz


def reprojection_errors(projections: np.ndarray, xyz: np.ndarray, points: np.ndarray) -> np.ndarray:
    """[K, V] pixel distances between each joint's projection in each view and the view's keypoint."""
    h = np.einsum("vij,kj->kvi", projections, np.c_[xyz, np.ones(len(xyz))])
    return np.linalg.norm(divided(h[..., :2], h[..., 2:3]) - points, axis=-1)


def divided(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b, NaN where b is 0 or not finite (without np.errstate, whose context switch costs more than the sum)."""
    good = np.isfinite(b) & (b != 0)
    return np.divide(a, b, out=np.full(np.broadcast_shapes(a.shape, b.shape), np.nan), where=good)
