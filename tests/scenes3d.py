"""Synthetic 3-D scenes with known truth for the lifter's tests: people made of capsules around a known skeleton,
seen by a pinhole camera, the pointmap ray-cast from the capsules' surfaces, the floor and a far wall.

World frame: Z up, the floor at Z = 0, metres. Each body is a chain of tapered limbs (short capsules whose radii
step from one joint's half-thickness to the next, so the skin in front of each joint is that joint's own radius),
a torso capsule and a head sphere; face keypoints lie on the head's surface, feet keypoints on the feet's soles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sapiens2_stream.humans.render import capsule_hits
from sapiens2_stream.threed.body import JOINT_DEPTH_M, index

WIDTH, HEIGHT, FOCAL = 640, 480, 550.0
FOOT_R = 0.025  # the foot capsule's radius; its axis (where the heel and toe keypoints are) that high above the floor
WALL_Y = 9.0  # a wall behind everyone, facing the camera


@dataclass
class Camera:
    rotation: np.ndarray  # world -> camera
    centre: np.ndarray  # in the world
    intrinsics: np.ndarray

    def to_camera(self, points: np.ndarray) -> np.ndarray:
        return (points - self.centre) @ self.rotation.T

    def project(self, points: np.ndarray) -> np.ndarray:
        c = self.to_camera(points)
        return c[..., :2] / c[..., 2:3] * np.diag(self.intrinsics)[:2] + self.intrinsics[:2, 2]


def camera(
    distance: float = 4.0,
    height: float = 1.4,
    look_at_z: float = 1.0,
    focal: float = FOCAL,
    cx: float = 331.0,
    cy: float = 236.0,
) -> Camera:
    """A camera `distance` m in front of the origin (at -Y), looking at the origin `look_at_z` m up."""
    centre = np.array([0.0, -distance, height])
    forward = np.array([0.0, 0.0, look_at_z]) - centre
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    intrinsics = np.array([[focal, 0, cx], [0, focal, cy], [0, 0, 1.0]])
    return Camera(np.stack([right, down, forward]), centre, intrinsics)


@dataclass
class Pose:
    """A body's pose: where it stands, where it faces, and its limbs' angles (radians)."""

    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0  # 0: facing -Y, towards the camera
    crouch: float = 0.0  # 0 standing .. 1 deep crouch
    thigh: tuple[float, float] = (0.0, 0.0)  # forward swing, left and right
    knee: tuple[float, float] = (0.0, 0.0)  # flexion
    arm: tuple[float, float] = (0.0, 0.0)  # forward swing
    elbow: tuple[float, float] = (0.2, 0.2)  # flexion
    cross: float = 0.0  # 0 .. 1: forearms crossing in front of the belly


LIMBS = (
    ("left_shoulder", "left_elbow"), ("left_elbow", "left_wrist"), ("right_shoulder", "right_elbow"),
    ("right_elbow", "right_wrist"), ("left_hip", "left_knee"), ("left_knee", "left_ankle"),
    ("right_hip", "right_knee"), ("right_knee", "right_ankle"),
)  # fmt: skip


def skeleton(pose: Pose) -> dict[str, np.ndarray]:
    """World positions of the body joints, the face's and feet's keypoints, and the torso and head centres."""
    f = np.array([-np.sin(pose.yaw), -np.cos(pose.yaw), 0.0])  # forward
    left = np.array([-f[1], f[0], 0.0])  # the body's own left
    up = np.array([0.0, 0.0, 1.0])
    j: dict[str, np.ndarray] = {}
    thigh_len, shin_len = 0.45, 0.43
    reach = []
    for s, sign in (("left", 1), ("right", -1)):
        k = 0 if s == "left" else 1
        t = pose.thigh[k] + 1.3 * pose.crouch
        bend = pose.knee[k] + 2.2 * pose.crouch
        thigh = np.sin(t) * f - np.cos(t) * up
        shin = np.sin(t - bend) * f - np.cos(t - bend) * up
        reach.append((thigh, shin, sign, s))
    extent = max(-(thigh_len * th[2] + shin_len * sh[2]) for th, sh, _, _ in reach)
    pelvis = np.array([pose.x, pose.y, 0.0]) + up * (FOOT_R + 0.055 + extent + 0.03)  # the lower sole on the floor
    for thigh, shin, sign, s in reach:
        j[f"{s}_hip"] = pelvis + sign * 0.09 * left - 0.03 * up
        j[f"{s}_knee"] = j[f"{s}_hip"] + thigh_len * thigh
        j[f"{s}_ankle"] = j[f"{s}_knee"] + shin_len * shin
        sole = j[f"{s}_ankle"] - 0.055 * up
        j[f"{s}_heel"] = sole - 0.05 * f
        j[f"{s}_big_toe"] = sole + 0.16 * f - sign * 0.02 * left
        j[f"{s}_small_toe"] = sole + 0.13 * f + sign * 0.04 * left
    lean = 0.35 * pose.crouch
    spine = np.cos(lean) * up + np.sin(lean) * f
    neck = pelvis + 0.5 * spine
    j["torso_low"], j["torso_high"] = pelvis + 0.05 * spine, neck - 0.02 * spine
    for s, sign in (("left", 1), ("right", -1)):
        k = 0 if s == "left" else 1
        j[f"{s}_shoulder"] = neck + sign * 0.18 * left
        a = pose.arm[k] + 1.1 * pose.cross
        upper = np.sin(a) * f - np.cos(a) * up
        j[f"{s}_elbow"] = j[f"{s}_shoulder"] + 0.29 * upper
        e = pose.elbow[k] + 1.0 * pose.cross
        fore = np.sin(a + e) * f - np.cos(a + e) * up
        fore = (1 - pose.cross) * fore - pose.cross * sign * left  # towards the body's other side
        j[f"{s}_wrist"] = j[f"{s}_elbow"] + 0.26 * fore / np.linalg.norm(fore)
    head = neck + 0.22 * spine
    face = np.cos(lean) * f - np.sin(lean) * up  # the head bows with the trunk
    j["head"] = head
    j["nose"] = head + 0.1 * face
    for s, sign in (("left", 1), ("right", -1)):
        eye = 0.92 * face + 0.35 * sign * left + 0.17 * spine
        j[f"{s}_eye"] = head + 0.1 * eye / np.linalg.norm(eye)
        j[f"{s}_ear"] = head + 0.1 * sign * left
    return j


def capsules(j: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """(start, end, radius) of each capsule of one body."""
    side = (j["left_shoulder"] - j["right_shoulder"]) / np.linalg.norm(j["left_shoulder"] - j["right_shoulder"])
    out = [(j["torso_low"] + s * 0.07 * side, j["torso_high"] + s * 0.07 * side, 0.11) for s in (1, -1)]
    out.append((j["head"], j["head"], 0.1))  # the torso: 36 cm wide, 22 cm deep
    for a, b in LIMBS:
        ra, rb = JOINT_DEPTH_M[a], JOINT_DEPTH_M[b]
        steps = np.linspace(0, 1, 6)
        for t0, t1 in zip(steps[:-1], steps[1:], strict=True):  # tapered: radius stepping from one joint's to the next
            r = ra + (rb - ra) * (t0 if t0 == 0 else t1 if t1 == 1 else (t0 + t1) / 2)
            out.append((j[a] + t0 * (j[b] - j[a]), j[a] + t1 * (j[b] - j[a]), r))
    for s in ("left", "right"):
        out.append((j[f"{s}_heel"], (j[f"{s}_big_toe"] + j[f"{s}_small_toe"]) / 2, FOOT_R))
    return out


@dataclass
class View:
    pointmap: np.ndarray  # [H, W, 3] camera frame
    owner: np.ndarray  # [H, W] which person each pixel shows (-1: floor or wall)
    truth: list[dict[str, np.ndarray]]  # per person, keypoint name -> camera-frame position
    keypoints: np.ndarray  # [P, 308, 2] projected truth (no noise)
    scores: np.ndarray  # [P, 308]


def render(cam: Camera, poses: list[Pose]) -> View:
    """The pointmap, per-pixel owner and keypoints of `poses` seen by `cam`."""
    v, u = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    k = cam.intrinsics
    dirs_cam = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], -1).reshape(-1, 3)
    unit = dirs_cam / np.linalg.norm(dirs_cam, axis=1, keepdims=True)
    dirs = unit @ cam.rotation  # camera -> world directions
    depth = np.full(len(dirs), np.inf)
    owner = np.full(len(dirs), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.where(dirs[:, 2] < 0, -cam.centre[2] / dirs[:, 2], np.inf)
        wall = np.where(dirs[:, 1] > 0, (WALL_Y - cam.centre[1]) / dirs[:, 1], np.inf)
    depth = np.minimum(floor, wall)
    truth, keypoints, scores = [], [], []
    ids = index()
    for p, pose in enumerate(poses):
        j = skeleton(pose)
        for a, b, r in capsules(j):
            found = capsule_hits(cam, dirs, depth, a, b, r, WIDTH, HEIGHT)
            if found is not None:
                rows, t = found
                depth[rows], owner[rows] = t, p
        names = [n for n in j if n in ids]
        truth.append({n: cam.to_camera(j[n]) for n in names})
        kp = np.zeros((len(ids), 2))
        sc = np.zeros(len(ids))
        for n in names:
            kp[ids[n]] = cam.project(j[n])
            sc[ids[n]] = 0.9
        keypoints.append(kp)
        scores.append(sc)
    pointmap = (unit * depth[:, None]).reshape(HEIGHT, WIDTH, 3)
    return View(pointmap.astype(np.float32), owner.reshape(HEIGHT, WIDTH), truth, np.array(keypoints),
                np.array(scores))  # fmt: skip


def walking(t: float, speed: float = 0.6, y: float = 0.0, start_x: float = -1.4, yaw: float | None = None) -> Pose:
    """Walking across the view (along +X) at `speed` m/s, legs and arms swinging at 0.9 strides a second."""
    phase = 2 * np.pi * 0.9 * t
    swing = 0.4 * np.sin(phase)
    return Pose(x=start_x + speed * t, y=y, yaw=-np.pi / 2 if yaw is None else yaw,
                thigh=(swing, -swing), knee=(0.5 * max(0.0, np.sin(phase + 1.2)), 0.5 * max(0.0, -np.sin(phase + 1.2))),
                arm=(-0.6 * swing, 0.6 * swing))  # fmt: skip


def turning(t: float) -> Pose:
    return Pose(yaw=0.9 * t, arm=(0.3, -0.2), elbow=(0.6, 0.4))


def crouching(t: float) -> Pose:
    return Pose(crouch=0.5 - 0.5 * np.cos(2 * np.pi * t / 4), arm=(0.6, 0.6), elbow=(0.5, 0.5))


def crossing(t: float) -> Pose:
    return Pose(cross=min(1.0, t / 2), yaw=0.3)


# ------------------------------------------------------------------------------------------------ a camera rig


def rig(cameras: int = 4, radius: float = 4.0, distortion=(-0.12, 0.03, 0.001, -0.001)) -> list:
    """Calibrated 1080p cameras (Pose2Sim's convention, world -> camera) evenly round the origin, 1.6-2.4 m up,
    looking at the middle of the capture area, with lens distortion."""
    import cv2

    from sapiens2_stream.threed.calibration import Camera as Calibrated

    out = []
    for i in range(cameras):
        angle = 2 * np.pi * i / cameras + 0.3
        centre = np.array([radius * np.cos(angle), radius * np.sin(angle), 1.6 + 0.8 * (i % 2)])
        forward = np.array([0.0, 0.0, 1.0]) - centre
        forward /= np.linalg.norm(forward)
        right = np.cross(forward, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        rotation = np.stack([right, np.cross(forward, right), forward])
        matrix = np.array([[1400.0, 0, 960 + 7 * i], [0, 1400.0, 540 - 5 * i], [0, 0, 1]])
        out.append(Calibrated(f"cam{i + 1}", (1920.0, 1080.0), matrix, np.array(distortion, np.float64),
                              cv2.Rodrigues(rotation)[0].ravel(), -rotation @ centre))  # fmt: skip
    return out


def seen_by(camera, poses: list[Pose], rng=None, noise_px: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """What a camera's pose model would give for these people: [P, 308, 2] keypoints in its distorted picture (with
    `noise_px` of noise) and [P, 308] scores (0.9 for the keypoints the synthetic body has)."""
    import cv2

    ids = index()
    keypoints, scores = np.zeros((len(poses), 308, 2)), np.zeros((len(poses), 308))
    for p, pose in enumerate(poses):
        joints = {n: v for n, v in skeleton(pose).items() if n in ids}
        world = np.array(list(joints.values()))
        pixels, _ = cv2.projectPoints(world, camera.rotation, camera.translation, camera.matrix, camera.distortions)
        pixels = pixels.reshape(-1, 2)
        if rng is not None:
            pixels = pixels + rng.normal(0, noise_px, pixels.shape)
        for name, pixel in zip(joints, pixels, strict=True):
            keypoints[p, ids[name]], scores[p, ids[name]] = pixel, 0.9
    return keypoints, scores


def world_truth(poses: list[Pose]) -> np.ndarray:
    """[P, 308, 3] the people's true keypoints (NaN for those the synthetic body lacks)."""
    ids = index()
    out = np.full((len(poses), 308, 3), np.nan)
    for p, pose in enumerate(poses):
        for name, point in skeleton(pose).items():
            if name in ids:
                out[p, ids[name]] = point
    return out


def camera_group(folder, cameras: int = 4, resumed: list | None = None, **sections):
    """A calibrated group of `cameras` live cameras (Calib.toml in `folder`, outputs in folder/out) with the run's
    group stages for the YAML `sections` given (`resumed`: the moments of the run it continues, as `--resume`
    reads them): (the rig, the stages' runner, the names of the stages enabled)."""
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.runtime.pipeline import check_group_stages, group_plan
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.runtime.stages import builtin_stages, in_order
    from sapiens2_stream.runtime.stages.group import GroupStages
    from sapiens2_stream.threed.calibration import write_calibration

    cams = rig(cameras)
    write_calibration(folder / "Calib.toml", cams)
    cfg = from_dict(PipelineConfig, {
        "sources": [{"name": c.name, "uri": f"rtsp://127.0.0.1/{c.name}"} for c in cams],
        "outputs": {"dir": str(folder / "out")}, "threed": {"calibration": str(folder / "Calib.toml")}, **sections,
    })  # fmt: skip
    enabled = check_group_stages(cfg, in_order(builtin_stages()))
    plan = group_plan(cfg, enabled, rates={c.name: 10.0 for c in cams}, resumed=resumed)
    return cams, GroupStages(plan), [s.name for s in enabled]


def film(stages, cams: list, bodies, rng, noise_px: float = 1.0, first: int = 0) -> None:
    """Each body (named keypoints of the 308, world metres, Z up) seen by every camera of `cams`, frame i at i/10 s
    (i from `first`), with `noise_px` of noise, through the group's live triangulation; then the end of input and
    of the stages."""
    import cv2

    from sapiens2_stream.models.metadata import keypoint_index

    at, live, clock = keypoint_index(), stages.state("triangulate"), 100.0
    for i, body in enumerate(bodies, first):
        for c in cams:
            kp, sc = np.zeros((1, 308, 2)), np.zeros((1, 308))
            for name, p in body.items():
                pixel, _ = cv2.projectPoints(p, c.rotation, c.translation, c.matrix, c.distortions)
                kp[0, at[name]], sc[0, at[name]] = pixel.ravel() + rng.normal(0, noise_px, 2), 0.9
            clock += 0.002
            live.add(c.name, i / 10, kp, sc, arrived=clock)
        clock += 0.06  # the next frame's results come a frame later: a silent camera's wait runs out meanwhile
        live.poll(clock)
    live.flush()
    stages.ended()


class Filmed:
    """A stage (the Python API's `stages=`, `Pipeline(stages=...)`) that replaces each camera's first person by what
    that camera of `rig` ({name: calibrated camera}) would see of a walking body, and drops the others: random
    weights agree on nothing, so with smoothing off a calibrated group of a real run triangulates a real person."""

    after = "infer"

    def __init__(self, rig: dict) -> None:
        self.rig = rig

    def open(self, source):
        return self.rig[source.name]

    def __call__(self, camera, result) -> None:
        keypoints, scores = seen_by(camera, [walking(result.frame.pts_s)])
        for person in result.people[:1]:
            person.keypoints, person.keypoint_scores = keypoints[0].astype(np.float32), scores[0]
        result.people[1:] = []
