"""Synthetic humans written as the files people train and score on: a COCO keypoints JSON with its images, PNG
part-label maps, alpha PNGs, normal maps (RGB PNGs, the usual (n + 1) / 2 coding) and pointmaps (float16 .npy,
camera-frame metres) (the formats `finetune` reads), and videos with a truth file per clip.

Every picture is a random room, camera and one to four people, each in a random moment of a random motion (the
same motions the clips chain), with random clothes, size and light.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from ..io.coco import CocoKeypoints
from ..models.metadata import keypoint_index
from .body import KEYPOINTS, Pose
from .motions import MOTIONS, Step, _move
from .render import Camera, Person, View, look_at, random_look, random_room, render

MIN_AREA = 120  # visible pixels for a person to be annotated
MIN_KEYPOINTS = 4


def random_camera(rng: np.random.Generator, width: int, height: int) -> Camera:
    """Near and far, wide and narrow lenses: people from a quarter of the picture's height to all of it."""
    distance = rng.uniform(4.0, 11.0)
    side = rng.uniform(-1.5, 1.5)
    return look_at(
        width,
        height,
        (side, -distance, rng.uniform(0.8, 2.8)),
        (side * 0.3, 0.0, rng.uniform(0.5, 1.1)),
        focal=width / (2 * np.tan(np.radians(rng.uniform(13, 32)))),
    )


def random_pose(rng: np.random.Generator, x: float, y: float) -> Pose:
    """A random moment of a random motion, facing anywhere."""
    motion = str(rng.choice(MOTIONS))
    seconds = float(rng.uniform(1.0, 3.0))
    start = Pose(
        x=x,
        y=y,
        yaw=float(rng.uniform(-np.pi, np.pi)),
        scale=float(rng.uniform(0.85, 1.1)),
        tilt_dir=float(rng.uniform(-np.pi, np.pi)),
    )
    step = Step(motion, seconds, speed=0.0, angle=float(rng.uniform(-np.pi, np.pi)))
    pose = _move(start, step, float(rng.uniform(0, seconds)))
    if rng.random() < 0.3:  # arms and legs anywhere near natural
        pose.arm = tuple(float(v) for v in rng.uniform(-1.2, 1.5, 2))
        pose.elbow = tuple(float(v) for v in rng.uniform(0.0, 2.0, 2))
        pose.raise_arms = tuple(float(v) for v in rng.uniform(0.0, 1.8, 2))
    return pose


def random_view(rng: np.random.Generator, width: int, height: int, people: int | None = None) -> View:
    cam = random_camera(rng, width, height)
    count = people or int(rng.integers(1, 5))
    spots = [(float(rng.uniform(-1.8, 1.8)), float(rng.uniform(-1.0, 2.5))) for _ in range(count)]
    bodies = [Person(i + 1, random_pose(rng, x, y), random_look(rng)) for i, (x, y) in enumerate(spots)]
    return render(cam, bodies, random_room(rng), rng=rng)


def annotated(view: View) -> list:
    return [p for p in view.people if p.area >= MIN_AREA and (p.keypoints[:, 2] > 0).sum() >= MIN_KEYPOINTS]


def coco_person(coco: CocoKeypoints, person, image_id: int) -> None:
    ids = keypoint_index()
    coco.person(image_id, person.box, person.keypoints[[ids[n] for n in KEYPOINTS]], track_id=person.track_id)


def encode_normals(normals: np.ndarray) -> np.ndarray:
    """Unit normals [H, W, 3] as an RGB picture: (n + 1) / 2 of 255, as normal maps are stored."""
    return np.round((np.clip(normals, -1, 1) + 1) * 127.5).astype(np.uint8)


def write_dataset(
    out_dir: str | Path, count: int, size: tuple[int, int] = (240, 320), seed: int = 0, progress: bool = True
) -> Path:
    """`count` pictures into `out_dir`: images/, labels/ (part ids), alpha/ (0-255), normals/, pointmap/ and
    keypoints.json (COCO)."""
    from tqdm import tqdm

    out = Path(out_dir)
    for sub in ("images", "labels", "alpha", "normals", "pointmap"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    coco = CocoKeypoints(list(KEYPOINTS))
    for i in tqdm(range(1, count + 1), desc="rendering", unit="img", disable=not progress):
        view = random_view(rng, size[1], size[0])
        name = f"{i:06d}"
        cv2.imwrite(str(out / "images" / f"{name}.jpg"), view.image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 93])
        cv2.imwrite(str(out / "labels" / f"{name}.png"), view.labels)
        cv2.imwrite(str(out / "alpha" / f"{name}.png"), np.round(view.alpha * 255).astype(np.uint8))
        cv2.imwrite(str(out / "normals" / f"{name}.png"), encode_normals(view.normals)[..., ::-1])
        np.save(out / "pointmap" / f"{name}.npy", np.minimum(view.pointmap, 1e3).astype(np.float16))
        image_id = coco.image(f"images/{name}.jpg", size[1], size[0])
        for person in annotated(view):
            coco_person(coco, person, image_id)
    coco.write(out / "keypoints.json")
    return out
