"""The 3-D lifter against synthetic scenes with known truth (tests/scenes3d.py): capsule bodies walking, turning,
crouching, crossing their arms and passing in front of each other, a pinhole camera 4-5 m away, the pointmap
ray-cast from the capsules, the floor and a wall."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from sapiens2_stream.threed import Lifter, estimate_intrinsics
from sapiens2_stream.threed import lifter as lifter_module
from sapiens2_stream.threed.body import BODY_JOINTS, BONES, JOINT_DEPTH_M, index
from sapiens2_stream.threed.camera import project
from sapiens2_stream.threed.floor import FloorFinder
from tests import scenes3d as S

FPS, FRAMES, WARM = 10, 50, 10  # 5 s at 10 frames/s; the noisy figures skip the filter's first second
IDS = index()
SCENES = {
    "walking": lambda t: [S.walking(t)],
    "turning": lambda t: [S.turning(t)],
    "crouching": lambda t: [S.crouching(t)],
    "arms crossing": lambda t: [S.crossing(t)],
    "two people": lambda t: [S.walking(t, y=-1.0, start_x=-1.5, speed=0.6), S.Pose(x=0.3, y=1.0, yaw=0.2)],
}


@cache
def rendered(scene: str) -> tuple:
    cam = S.camera()
    return cam, tuple(S.render(cam, SCENES[scene](i / FPS)) for i in range(FRAMES))


def noisy(view: S.View, rng, depth_sigma: float, scale: float) -> np.ndarray:
    """The view's pointmap with `depth_sigma` m of noise along each pixel's ray and one scale error for the frame."""
    points = view.pointmap.astype(np.float64)
    distance = np.linalg.norm(points, axis=-1, keepdims=True)
    factor = (1 + rng.uniform(-scale, scale)) * (distance + rng.normal(0, depth_sigma, distance.shape)) / distance
    return (points * factor).astype(np.float32)


def seen_from(view: S.View, p: int, name: str) -> str:
    """'visible' (the joint's pixel shows its own skin in front of it), 'other' (another person) or 'self'."""
    u, v = np.round(view.keypoints[p, IDS[name]]).astype(int)
    owner = view.owner[v, u]
    if owner not in (p, -1):
        return "other"
    own_skin = view.truth[p][name][2] - JOINT_DEPTH_M[name]
    return "visible" if view.pointmap[v, u, 2] >= own_skin - 0.015 else "self"


def run(scene: str, depth_sigma: float = 0.0, scale: float = 0.0, masks: bool = False, warm: int = 0) -> dict:
    """Lift the scene with 1 px keypoint noise; errors (m) of visible and hidden body joints, the visible bones'
    lengths over time, and what each hidden joint's pixel showed."""
    cam, views = rendered(scene)
    rng = np.random.default_rng(7)
    lifter = Lifter(cam.intrinsics)
    out = {"visible": [], "self": [], "other": [], "gap": [], "bones": [], "reprojection": []}
    for i, view in enumerate(views):
        people = len(view.truth)
        keypoints = view.keypoints + rng.normal(0, 1.0, view.keypoints.shape)
        pointmap = noisy(view, rng, depth_sigma, scale) if depth_sigma or scale else view.pointmap
        own = np.stack([view.owner == p for p in range(people)]) if masks else None
        xyz, confidence = lifter(keypoints, view.scores, pointmap, list(range(people)), i / FPS, own)
        seen = view.scores > 0
        out["reprojection"].append(np.abs(project(cam.intrinsics, xyz[seen]) - keypoints[seen]).max())
        if i < warm:
            continue
        for p in range(people):
            kind = {n: seen_from(view, p, n) for n in BODY_JOINTS}
            for name in BODY_JOINTS:
                out[kind[name]].append(np.linalg.norm(xyz[p, IDS[name]] - view.truth[p][name]))
                if kind[name] == "other":  # how far behind the occluder's surface it was put
                    u, v = np.round(view.keypoints[p, IDS[name]]).astype(int)
                    out["gap"].append(xyz[p, IDS[name], 2] - view.pointmap[v, u, 2])
            out["bones"].append([np.linalg.norm(xyz[p, IDS[a]] - xyz[p, IDS[b]]) if kind[a] == kind[b] == "visible"
                                 else np.nan for a, b in BONES])  # fmt: skip
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("scene", list(SCENES))
def test_exact_pointmap_puts_visible_joints_within_centimetres(scene):
    """Exact pointmap, 1 px keypoint noise: the visible body joints' mean error at most 2 cm, 95th percentile at
    most 4 cm; every 3-D keypoint reprojects onto its 2-D keypoint."""
    found = run(scene)
    errors = found["visible"]
    print(scene, f"mean {errors.mean() * 100:.2f} cm, p95 {np.percentile(errors, 95) * 100:.2f} cm")
    assert errors.mean() <= 0.02 and np.percentile(errors, 95) <= 0.04 + 0.02 * (scene == "two people")
    assert max(found["reprojection"]) < 1e-6


def test_without_the_joint_priors_the_error_is_the_limbs_radius(monkeypatch):
    """The surface-to-joint priors are what brings the joints inside the limbs: without them the visible joints sit
    on the skin, 3-8 cm off (the limbs' radii)."""
    with_priors = run("turning")["visible"].mean()
    monkeypatch.setattr(lifter_module.body, "depth_priors", lambda: np.zeros(308))
    without = run("turning")["visible"].mean()
    print(f"turning: {with_priors * 100:.2f} cm with the priors, {without * 100:.2f} cm without")
    assert 0.03 <= without <= 0.08 and with_priors < without / 2


@pytest.mark.parametrize("scene", ["walking", "turning", "crouching", "arms crossing"])
def test_noisy_pointmap_after_the_filter(scene):
    """2 cm of noise per pixel and a per-frame scale error of up to 5%: visible body joints within 4 cm on average
    after the filter's first second, and each visible bone's length steady within 1.5 cm (standard deviation)."""
    found = run(scene, depth_sigma=0.02, scale=0.05, warm=WARM)
    bones = found["bones"]
    spread = np.nanstd(bones[:, np.isfinite(bones).sum(0) >= 10], axis=0)  # the bones seen in 10 frames or more
    print(scene, f"mean {found['visible'].mean() * 100:.2f} cm, bone sd max {np.nanmax(spread) * 100:.2f} cm")
    assert found["visible"].mean() <= 0.04
    assert np.nanmax(spread) <= 0.015


def test_a_joint_behind_another_person_never_takes_the_occluders_depth():
    """The standing person's joints hidden by the walker passing in front: within 10 cm of the truth, and about as
    far behind the walker's surface as they really are (never on it)."""
    found = run("two people")
    assert len(found["other"]) >= 10
    print(f"hidden by the other person: {len(found['other'])} joints, worst {found['other'].max() * 100:.1f} cm")
    assert found["other"].max() <= 0.10
    assert found["gap"].min() > 1.0  # the walker is 2 m nearer


@pytest.mark.parametrize("masks", [False, True], ids=["depth-gated", "with masks"])
def test_joints_behind_the_bodys_own_arms(masks):
    """Arms crossing in front of the body hide parts of it: those joints within 10 cm, with or without masks."""
    found = run("arms crossing", masks=masks)
    assert len(found["self"]) >= 10
    print(f"hidden by the body's own arms: {len(found['self'])} joints, worst {found['self'].max() * 100:.1f} cm")
    assert found["self"].max() <= 0.10


def test_a_hidden_joint_is_never_in_front_of_what_its_pixel_shows():
    """What a pixel shows is the nearest surface on its ray: no joint may be put in front of it (side-on walking,
    where the far arm and leg hide behind the body, is the hard case: their depth comes from the bones)."""
    cam, views = rendered("walking")
    lifter = Lifter(cam.intrinsics)
    for i, view in enumerate(views):
        xyz, _ = lifter(view.keypoints, view.scores, view.pointmap, [0], i / FPS)
        for name in BODY_JOINTS:
            u, v = np.round(view.keypoints[0, IDS[name]]).astype(int)
            assert xyz[0, IDS[name], 2] >= view.pointmap[v, u, 2] - 0.02, (i, name)


def test_intrinsics_from_an_exact_pointmap():
    """A pointmap and its pixel grid determine the camera: focal length within 2%, principal point within 1% of
    the width, for a camera the lifter was not told about."""
    cam = S.camera(focal=480.0, cx=300.0, cy=250.0)
    view = S.render(cam, [S.walking(1.0)])
    found = estimate_intrinsics(view.pointmap)
    assert abs(found[0, 0] - 480.0) <= 0.02 * 480.0
    assert abs(found[0, 2] - 300.0) <= 0.01 * S.WIDTH and abs(found[1, 2] - 250.0) <= 0.01 * S.WIDTH
    lifter = Lifter()
    for i in range(3):
        lifter(view.keypoints, view.scores, view.pointmap, [0], i / FPS)
    assert abs(lifter.intrinsics[0, 0] - 480.0) <= 0.02 * 480.0


def test_tracks_keep_their_own_state_and_reset_forgets():
    cam, views = rendered("two people")
    lifter = Lifter(cam.intrinsics)
    for i, view in enumerate(views[:5]):
        lifter(view.keypoints, view.scores, view.pointmap, [3, 9], i / FPS)
    assert set(lifter.tracks) == {3, 9}
    lifter.drop(3)
    assert set(lifter.tracks) == {9}
    lifter.reset()
    assert not lifter.tracks and lifter.intrinsics is not None  # a given matrix stays


def test_the_floor_from_five_seconds_of_walking():
    """Heels and toes over 5 s of walking (noisy pointmap): the floor within 2 cm (the camera's height above it)
    and 1 degree (its normal)."""
    cam, views = rendered("walking")
    rng = np.random.default_rng(3)
    lifter, floor = Lifter(cam.intrinsics), FloorFinder()
    for i, view in enumerate(views):
        xyz, confidence = lifter(view.keypoints, view.scores, noisy(view, rng, 0.02, 0.05), [0], i / FPS)
        floor.add(xyz, confidence)
    normal, offset = floor.fit()
    true_normal = cam.rotation @ np.array([0.0, 0.0, 1.0])
    angle = np.degrees(np.arccos(np.clip(normal @ true_normal, -1, 1)))
    print(f"floor: height {offset:.3f} m (truth {cam.centre[2]}), normal off by {angle:.2f} degrees")
    assert abs(offset - cam.centre[2]) <= 0.02 and angle <= 1.0
