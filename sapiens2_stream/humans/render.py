"""Seeing the capsule bodies: a pinhole camera ray-casts the floor, a far wall and every capsule, and gives the
picture with its truth: part labels, alpha, depth, pointmap and normals per pixel, and per person the box, the
308-layout keypoints with their visibility and the joints in the camera's frame.

Left and right are told apart the way a mirror keeps them honest: by the body's front (a face with eyes and a
mouth, hair behind; light fronts and dark backs on the clothes; toe caps) and by the light, never by a colour per
side, so a mirrored picture is a picture of a mirrored body. Edges are anti-aliased by casting `supersample`^2
rays a pixel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..models.metadata import NUM_KEYPOINTS, keypoint_index
from .body import KEYPOINTS, Pose, capsules, joint_radius, joints, part_ids


@dataclass
class Camera:
    """A pinhole camera: `rotation` world -> camera (rows: image right, image down, forward)."""

    rotation: np.ndarray
    centre: np.ndarray
    intrinsics: np.ndarray
    width: int
    height: int

    def to_camera(self, points: np.ndarray) -> np.ndarray:
        return (np.asarray(points) - self.centre) @ self.rotation.T

    def project(self, points: np.ndarray) -> np.ndarray:
        c = self.to_camera(points)
        return c[..., :2] / c[..., 2:3] * np.diag(self.intrinsics)[:2] + self.intrinsics[:2, 2]


def look_at(width: int, height: int, position, target, focal: float | None = None) -> Camera:
    """A level camera (no roll) at `position` looking at `target`; `focal` in pixels (default: 60 degrees wide)."""
    centre = np.asarray(position, np.float64)
    forward = np.asarray(target, np.float64) - centre
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    focal = focal or width / (2 * np.tan(np.radians(30)))
    k = np.array([[focal, 0, (width - 1) / 2], [0, focal, (height - 1) / 2], [0, 0, 1.0]])
    return Camera(np.stack([right, np.cross(forward, right), forward]), centre, k, width, height)


@dataclass
class Look:
    """A person's colours (RGB 0-255)."""

    skin: tuple = (224, 172, 140)
    hair: tuple = (60, 40, 30)
    shirt: tuple = (40, 90, 200)
    shorts: tuple = (50, 50, 60)
    shoes: tuple = (30, 30, 30)


def random_look(rng: np.random.Generator) -> Look:
    skin = rng.choice([(241, 194, 167), (224, 172, 140), (190, 130, 95), (141, 85, 60), (95, 60, 45)])
    hair = rng.choice([(30, 25, 20), (70, 45, 30), (150, 110, 60), (200, 180, 140), (110, 110, 110)])

    def cloth() -> tuple:
        return tuple(int(v) for v in rng.integers(20, 236, 3))

    return Look(tuple(skin), tuple(hair), cloth(), cloth(), cloth())


@dataclass
class Room:
    """The floor (tiles of two colours), a wall `wall_y` m away facing the camera, and the light."""

    floor: tuple = ((150, 140, 120), (120, 112, 100))
    wall: tuple = (170, 180, 190)
    tile_m: float = 0.6
    wall_y: float = 9.0
    light: tuple = (-0.4, -0.6, 0.7)  # towards the light (world)
    ambient: float = 0.45
    noise: float = 3.0  # sensor noise (grey levels, std)


def random_room(rng: np.random.Generator) -> Room:
    def colour(lo: int, hi: int) -> tuple:
        return tuple(int(v) for v in rng.integers(lo, hi, 3))

    a = colour(60, 200)
    b = tuple(int(np.clip(v + rng.integers(-50, 50), 0, 255)) for v in a)
    light = (rng.uniform(-1, 1), rng.uniform(-1, 0.2), rng.uniform(0.4, 1.0))
    return Room(
        (a, b),
        colour(40, 230),
        float(rng.uniform(0.3, 1.2)),
        float(rng.uniform(6, 12)),
        light,
        float(rng.uniform(0.3, 0.6)),
        float(rng.uniform(1, 6)),
    )


@dataclass
class Person:
    track_id: int
    pose: Pose
    look: Look = field(default_factory=Look)


@dataclass
class PersonTruth:
    track_id: int
    box: np.ndarray  # COCO xywh of the visible pixels
    keypoints: np.ndarray  # [308, 3]: x, y, visibility (2 seen, 1 hidden in the picture, 0 outside or undefined)
    camera_points: dict[str, np.ndarray]  # keypoint name -> camera-frame position (m)
    world_points: dict[str, np.ndarray]  # keypoint name -> world position (m)
    area: int  # visible pixels


@dataclass
class View:
    image: np.ndarray  # [H, W, 3] uint8 RGB
    labels: np.ndarray  # [H, W] uint8: the 29 classes (0 background)
    alpha: np.ndarray  # [H, W] float32: how much of each pixel is a person
    owner: np.ndarray  # [H, W] int16: which person (index into people) each pixel shows, -1 none
    depth: np.ndarray  # [H, W] float32: camera-frame Z (m)
    pointmap: np.ndarray  # [H, W, 3] float32: camera-frame points (m)
    normals: np.ndarray  # [H, W, 3] float32: unit normals in the camera frame (x right, y down, z forward)
    people: list[PersonTruth]


def hit_capsule(origin: np.ndarray, dirs: np.ndarray, a: np.ndarray, b: np.ndarray, r: float) -> np.ndarray:
    """Distances along unit rays [N, 3] from `origin` to a capsule's surface (inf where missed)."""
    ba, oa = b - a, origin - a
    baba, baoa = ba @ ba, ba @ oa
    bard, rdoa = dirs @ ba, dirs @ oa
    oaoa = oa @ oa
    out = np.full(len(dirs), np.inf)
    if baba > 1e-12:
        qa = baba - bard * bard
        qb = baba * rdoa - baoa * bard
        qc = baba * oaoa - baoa * baoa - r * r * baba
        h = qb * qb - qa * qc
        with np.errstate(invalid="ignore", divide="ignore"):
            t = (-qb - np.sqrt(h)) / qa
        y = baoa + t * bard
        body = (h >= 0) & (qa > 1e-12) & (y > 0) & (y < baba) & (t > 0)
        out[body] = t[body]
    for c in (a, b):
        oc = origin - c
        qb = dirs @ oc
        h = qb * qb - (oc @ oc - r * r)
        with np.errstate(invalid="ignore"):
            t = -qb - np.sqrt(h)
        hit = (h >= 0) & (t > 0)
        out[hit] = np.minimum(out[hit], t[hit])
    return out


def pixel_box(cam: Camera, a, b, r, width: int, height: int, scale: float = 1.0) -> tuple[int, int, int, int] | None:
    """The pixels (of a picture `scale` times the camera's) a capsule can cover, or None when off the picture
    or too near the camera."""
    ends = cam.to_camera(np.stack([a, b]))
    if (ends[:, 2] <= r).any():
        return None
    focal = cam.intrinsics[0, 0]
    pix = (ends[:, :2] / ends[:, 2:3] * focal + cam.intrinsics[:2, 2] + 0.5) * scale
    pad = (r * focal / ends[:, 2].min() + 2) * scale
    x0, y0 = np.floor(pix.min(0) - pad).astype(int)
    x1, y1 = np.ceil(pix.max(0) + pad).astype(int)
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)
    return None if x0 >= x1 or y0 >= y1 else (x0, y0, x1, y1)


def capsule_hits(
    cam: Camera, dirs: np.ndarray, depth: np.ndarray, a, b, r: float, width: int, height: int, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray] | None:
    """Where a capsule shows in front of what is already drawn: (flat pixel indices, distances) of the rays
    `dirs` [height * width, 3] (row-major; a picture `scale` times the camera's) that meet it nearer than
    `depth`; None where it shows nowhere. Only the rays through its pixel box are cast."""
    box = pixel_box(cam, a, b, r, width, height, scale)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    rows = (np.arange(y0, y1)[:, None] * width + np.arange(x0, x1)[None]).ravel()
    hit = hit_capsule(cam.centre, dirs[rows], a, b, r)
    nearer = hit < depth[rows]
    return (rows[nearer], hit[nearer]) if nearer.any() else None


def _rays(cam: Camera, ss: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit camera-frame and world-frame ray directions [H*ss, W*ss, 3] through the sub-pixel centres."""
    k = cam.intrinsics
    v, u = np.mgrid[0 : cam.height * ss, 0 : cam.width * ss].astype(np.float64)
    u, v = (u + 0.5) / ss - 0.5, (v + 0.5) / ss - 0.5
    d = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], -1)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    return d, d @ cam.rotation


def _room(cam: Camera, room: Room, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distance, colour and world normal of the floor or wall each ray meets."""
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.where(dirs[..., 2] < -1e-9, -cam.centre[2] / dirs[..., 2], np.inf)
        wall = np.where(dirs[..., 1] > 1e-9, (room.wall_y - cam.centre[1]) / dirs[..., 1], np.inf)
    on_floor = floor < wall
    t = np.minimum(np.minimum(floor, wall), 1e3)
    p = cam.centre + dirs * t[..., None]
    tiles = ((np.floor(p[..., 0] / room.tile_m) + np.floor(p[..., 1] / room.tile_m)) % 2).astype(bool)
    colour = np.where(tiles[..., None], np.array(room.floor[0], float), np.array(room.floor[1], float))
    band = (np.floor(p[..., 2] / 0.5) % 2)[..., None] * 12.0
    colour = np.where(on_floor[..., None], colour, np.array(room.wall, float) - band)
    normal = np.where(on_floor[..., None], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0])
    return t, colour, normal


def backdrop(cam: Camera, room: Room | None = None, supersample: int = 2) -> tuple[np.ndarray, ...]:
    """What `render` draws the people on: the camera-frame and world rays and the empty room's depth, colour and
    normals. The same for every frame of a camera that stays put and two thirds of a frame's work, so a clip makes
    it once and hands it to `render`."""
    cam_dirs, dirs = _rays(cam, supersample)
    return (cam_dirs, dirs, *_room(cam, room or Room(), dirs))


def _colours(look: Look, part: str, normal: np.ndarray, point: np.ndarray, j: dict) -> tuple[np.ndarray, np.ndarray]:
    """Base colours [N, 3] and class ids [N] of one capsule's pixels. The body's front shows, whichever way it
    turns: a face (eyes, a mouth) in front of the head and hair behind and on top, a light front and a dark back
    on the shirt and shorts, light toe caps on the shoes."""
    ids = part_ids()
    n = len(normal)
    facing = normal @ j["front"]
    if part == "head":
        upward = normal @ j["spine"]
        hair = (facing < -0.05) | (upward > 0.6 - 0.4 * np.clip(facing, 0, 1))
        colour = np.where(hair[:, None], np.array(look.hair, float), np.array(look.skin, float))
        for eye in ("left_eye", "right_eye"):
            colour[np.linalg.norm(point - j[eye], axis=1) < 0.028] = (25, 20, 20)
        mouth = j["nose"] - 0.06 * j["spine"]
        colour[(np.linalg.norm(point - mouth, axis=1) < 0.03) & ~hair] = (150, 60, 60)
        return colour, np.where(hair, ids["Hair"], ids["Face_Neck"])
    base = {"Upper_Clothing": look.shirt, "Lower_Clothing": look.shorts}.get(part)
    if base is None:
        base = look.shoes if part.endswith("Shoe") else look.skin
    colour = np.tile(np.array(base, float), (n, 1))
    if part in ("Upper_Clothing", "Lower_Clothing"):
        front, back = facing > 0.25, facing < -0.25
        colour[front] = 0.4 * colour[front] + 0.6 * 240
        colour[back] *= 0.55
    elif part.endswith("Shoe"):
        side = part.split("_")[0].lower()
        toe = (j[f"{side}_big_toe"] + j[f"{side}_small_toe"]) / 2
        cap = np.linalg.norm(point - toe, axis=1) < np.linalg.norm(point - j[f"{side}_heel"], axis=1) - 0.06
        colour[cap] = (235, 235, 235)
    return colour, np.full(n, ids[part])


def render(
    cam: Camera,
    people: list[Person],
    room: Room | None = None,
    supersample: int = 2,
    rng: np.random.Generator | None = None,
    behind: tuple[np.ndarray, ...] | None = None,
) -> View:
    """The picture of `people` in `room` (default: a plain one) and its truth. `behind`: `backdrop(cam, room,
    supersample)` made once for a camera that stays put (it is not changed)."""
    room = room or Room()
    ss = supersample
    cam_dirs, dirs, t, colour, normal = behind or backdrop(cam, room, ss)
    hh, ww = dirs.shape[:2]
    t, colour, normal = t.ravel().copy(), colour.reshape(-1, 3).copy(), normal.reshape(-1, 3).copy()  # drawn on
    flat_dirs = dirs.reshape(-1, 3)
    owner = np.full(hh * ww, -1, np.int16)
    labels = np.zeros(hh * ww, np.uint8)
    skeletons = [joints(p.pose) for p in people]
    for index, (person, j) in enumerate(zip(people, skeletons, strict=True)):
        for a, b, r, part in capsules(j, person.pose.size):
            found = capsule_hits(cam, flat_dirs, t, a, b, r, ww, hh, ss)
            if found is None:
                continue
            rows, hit = found
            point = cam.centre + flat_dirs[rows] * hit[:, None]
            ba = b - a
            along = np.clip(((point - a) @ ba) / max(ba @ ba, 1e-12), 0, 1)
            n = point - (a + along[:, None] * ba)
            n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-9)
            c, classes = _colours(person.look, part, n, point, j)
            t[rows], normal[rows], colour[rows], labels[rows], owner[rows] = hit, n, c, classes, index
    light = np.asarray(room.light, float) / np.linalg.norm(room.light)
    shade = room.ambient + (1 - room.ambient) * np.clip(normal @ light, 0, 1)
    lit = colour * shade[:, None]
    rng = rng or np.random.default_rng(0)
    image = lit.reshape(cam.height, ss, cam.width, ss, 3).mean((1, 3))
    image = np.clip(image + rng.normal(0, room.noise, image.shape), 0, 255).astype(np.uint8)
    alpha = (owner >= 0).reshape(cam.height, ss, cam.width, ss).mean((1, 3)).astype(np.float32)
    centre = (slice(ss // 2, None, ss), slice(ss // 2, None, ss))  # one sample per pixel for the exact maps
    depth_ray = t.reshape(hh, ww)[centre]
    point_cam = cam_dirs[centre] * depth_ray[..., None]
    normals_cam = (normal.reshape(hh, ww, 3)[centre]) @ cam.rotation.T
    owner_px = owner.reshape(hh, ww)[centre]
    truth = [
        _person_truth(cam, i, p, j, owner_px, point_cam[..., 2])
        for i, (p, j) in enumerate(zip(people, skeletons, strict=True))
    ]
    return View(
        image,
        labels.reshape(hh, ww)[centre].copy(),
        alpha,
        owner_px.copy(),
        point_cam[..., 2].astype(np.float32),
        point_cam.astype(np.float32),
        normals_cam.astype(np.float32),
        truth,
    )


def _person_truth(
    cam: Camera, index: int, person: Person, j: dict, owner: np.ndarray, depth: np.ndarray
) -> PersonTruth:
    ids = keypoint_index()
    ys, xs = np.nonzero(owner == index)
    box = (
        np.array([xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1], np.float32)
        if len(xs)
        else np.zeros(4, np.float32)
    )
    kp = np.zeros((NUM_KEYPOINTS, 3), np.float32)
    cam_points = {}
    for name in KEYPOINTS:
        c = cam.to_camera(j[name])
        cam_points[name] = c
        if c[2] <= 0.05:
            continue
        x, y = cam.project(j[name])
        if not (0 <= x < cam.width and 0 <= y < cam.height):
            continue
        px, py = int(x), int(y)
        seen = owner[py, px] == index and depth[py, px] >= c[2] - joint_radius(name, person.pose.size) - 0.04
        kp[ids[name]] = (x, y, 2 if seen else 1)
    return PersonTruth(person.track_id, box, kp, cam_points, {n: j[n] for n in KEYPOINTS}, len(xs))
