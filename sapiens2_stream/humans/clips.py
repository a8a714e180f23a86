"""Videos of synthetic people with their truth: every frame's boxes, ids and keypoints, and the events that truly
happen (falls, crossings of the scene's line), written beside the video as `<video>.truth.json`.

`mirror=True` gives the same scene seen in a mirror: the pictures flipped, and the truth as a mirror shows it (a
body's left keypoints where the original's right ones appear), which is what a model that tells left from right
by the body, not the picture, must then report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import islice
from pathlib import Path

import numpy as np

from ..io.pyav import av
from ..models.metadata import pose_metadata, seg_metadata
from .body import KEYPOINTS
from .motions import Script, script
from .render import Camera, Look, Person, Room, backdrop, look_at, render

LINE_X = 0.5  # the scenes' line: down the middle of the picture


@dataclass
class Scene:
    """People following scripts before one camera; `seconds` long."""

    people: list[tuple[int, Script, Look]]
    seconds: float
    camera: tuple = ((0.0, -6.0, 1.7), (0.0, 0.0, 0.85))  # position, target
    room: Room = field(default_factory=Room)

    def camera_for(self, size: tuple[int, int]) -> Camera:
        return look_at(size[1], size[0], *self.camera)


def crossing() -> Scene:
    """Two people cross the view on the slant in opposite directions, one coming nearer, the other going away
    and passing behind the first (a camera sees people walk at an angle far more often than square across)."""
    towards, away = -np.pi / 2 + 0.6, np.pi / 2 + 0.6  # heading right and nearer; left and further
    return Scene(
        [
            (1, script(("walk", 6.0, 0.9), x=-2.6, y=1.6, yaw=towards), Look(shirt=(200, 60, 50), shorts=(40, 40, 90))),
            (2, script(("walk", 6.0, 0.9), x=2.6, y=-0.6, yaw=away), Look(skin=(141, 85, 60), shirt=(60, 170, 80))),
        ],
        6.0,
    )


def meeting() -> Scene:
    """Two people walk past each other near the camera, one passing behind the other: the demo's scene, where
    people stand 215-260 px tall in a 640x360 picture (the skeleton's lines and the parts are easy to follow)."""
    return Scene(
        [
            (1, script(("walk", 6.0, 0.6), x=-1.8, y=0.6, yaw=-np.pi / 2 + 0.2),
             Look(shirt=(200, 60, 50), shorts=(40, 40, 90))),
            (2, script(("walk", 6.0, 0.6), x=1.8, y=0.0, yaw=np.pi / 2 + 0.2),
             Look(skin=(141, 85, 60), shirt=(60, 170, 80))),
        ],
        6.0,
        camera=((0.0, -3.8, 1.45), (0.0, 0.3, 0.9)),
    )  # fmt: skip


def fall() -> Scene:
    """One person walks in and falls; another sits down and one bends over (neither is a fall)."""
    return Scene(
        [
            (
                1,
                script(
                    ("walk", 2.0, 0.8),
                    ("stand", 0.5),
                    ("fall", 1.0),
                    ("lie_still", 3.0),
                    x=-2.4,
                    y=0.3,
                    yaw=-np.pi / 2,
                    tilt_dir=0.0,
                ),
                Look(shirt=(210, 120, 40)),
            ),
            (
                2,
                script(("stand", 1.5), ("sit_down", 2.0), ("stand", 3.0), x=1.4, y=1.2, yaw=0.3),
                Look(shirt=(70, 70, 200)),
            ),
            (
                3,
                script(("stand", 3.0), ("bend", 2.0), ("stand", 1.5), x=0.2, y=2.4, yaw=-0.4),
                Look(shirt=(90, 160, 160)),
            ),
        ],
        6.5,
    )


def everything() -> Scene:
    """Every motion: a walk with a turn, a crouch, arms up, a bend, sitting, lying down slowly, and a fall."""
    return Scene(
        [
            (
                1,
                script(
                    ("walk", 2.0, 0.9),
                    ("turn", 1.0, 0.0, np.pi),
                    ("walk", 1.5, 0.9),
                    ("crouch", 1.5),
                    ("arms_up", 1.5),
                    ("bend", 1.5),
                    ("fall", 1.0),
                    ("lie_still", 1.0),
                    x=-2.0,
                    y=0.2,
                    yaw=-np.pi / 2,
                    tilt_dir=np.pi,
                ),
                Look(shirt=(190, 50, 140)),
            ),
            (
                2,
                script(
                    ("stand", 2.0),
                    ("sit_down", 2.0),
                    ("stand", 1.0),
                    ("lie_down", 3.0),
                    ("lie_still", 3.0),
                    x=1.3,
                    y=1.6,
                    yaw=0.5,
                ),
                Look(skin=(95, 60, 45), shirt=(230, 200, 60)),
            ),
        ],
        11.0,
    )


SCENES = {"crossing": crossing, "fall": fall, "everything": everything, "meeting": meeting}


def feet_x(keypoints: np.ndarray) -> float | None:
    ids = [pose_metadata().names.index(n) for n in ("left_ankle", "right_ankle")]
    seen = keypoints[ids, 2] > 0
    return float(keypoints[ids][seen, 0].mean()) if seen.any() else None


def mirrored(keypoints: np.ndarray, box: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    kp = keypoints[list(pose_metadata().flip_indices)].copy()
    kp[:, 0] = np.where(kp[:, 2] > 0, width - 1 - kp[:, 0], 0)
    return kp, np.array([width - box[0] - box[2], box[1], box[2], box[3]], np.float32)


def render_clip(scene: Scene, fps: int, size: tuple[int, int], mirror: bool = False):
    """Yield (picture, truth of the frame, the frame's View) for every frame."""
    cam = scene.camera_for(size)
    behind = backdrop(cam, scene.room)  # the camera stays put: its rays and the empty room, made once
    swap = np.asarray(seg_metadata().flip_indices, np.uint8)
    rng = np.random.default_rng(0)
    for i in range(round(scene.seconds * fps)):
        t = i / fps
        people = [Person(pid, s.pose(t), look) for pid, s, look in scene.people]
        view = render(cam, people, scene.room, rng=rng, behind=behind)
        frame = []
        for p in view.people:
            kp, box = (p.keypoints, p.box) if not mirror else mirrored(p.keypoints, p.box, size[1])
            frame.append({"id": p.track_id, "box": box, "keypoints": kp, "area": p.area})
        if mirror:
            view.image, view.labels = view.image[:, ::-1].copy(), swap[view.labels[:, ::-1]]
            view.alpha = view.alpha[:, ::-1].copy()
        yield view.image, {"time_s": t, "people": frame}, view


def events(scene: Scene, frames: list[dict], width: int) -> dict:
    """The falls the scripts contain and the crossings of the line the people's feet make."""
    falls = [{"id": pid, "time_s": t} for pid, s, _ in scene.people for t in s.falls()]
    crossings, side = [], {}
    for f in frames:
        for p in f["people"]:
            x = feet_x(p["keypoints"])
            if x is None:
                continue
            now = np.sign(x - LINE_X * width)
            if now and side.get(p["id"], now) != now:
                crossings.append({"id": p["id"], "time_s": f["time_s"], "to": "right" if now > 0 else "left"})
            if now:
                side[p["id"]] = now
    return {"falls": falls, "crossings": crossings}


def write_clip(
    path: str | Path, scene: Scene, fps: int = 15, size: tuple[int, int] = (240, 320), mirror: bool = False,
    max_frames: int | None = None,
) -> dict:  # fmt: skip
    """Write the video (H.264) and `<path>.truth.json`; returns the truth (arrays as numpy). `max_frames`: only
    the first so many (rendering is the slow part)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = []
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "crf": "16"})
        video.width, video.height, video.pix_fmt = size[1], size[0], "yuv420p"
        for i, (image, truth, _) in enumerate(islice(render_clip(scene, fps, size, mirror), max_frames)):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            for packet in video.encode(frame):
                out.mux(packet)
            frames.append(truth)
        for packet in video.encode():
            out.mux(packet)
    truth = {
        "fps": fps,
        "size": list(size),
        "mirror": mirror,
        "line": [[LINE_X, 0.0], [LINE_X, 1.0]],
        "keypoint_names": list(KEYPOINTS),
        "frames": frames,
        **events(scene, frames, size[1]),
    }
    truth_path = path.with_suffix(".truth.json")
    truth_path.write_text(json.dumps(to_json(truth)))
    return {**truth, "path": str(truth_path)}


def to_json(truth: dict) -> dict:
    """Arrays as lists; keypoints as name -> [x, y, visibility] for the keypoints the bodies define."""
    ids = [pose_metadata().names.index(n) for n in KEYPOINTS]
    frames = [
        {
            "time_s": f["time_s"],
            "people": [
                {
                    "id": p["id"],
                    "box": [round(float(v), 2) for v in p["box"]],
                    "area": p["area"],
                    "keypoints": {
                        n: [
                            round(float(p["keypoints"][i, 0]), 2),
                            round(float(p["keypoints"][i, 1]), 2),
                            int(p["keypoints"][i, 2]),
                        ]
                        for n, i in zip(KEYPOINTS, ids, strict=True)
                    },
                }
                for p in f["people"]
            ],
        }
        for f in truth["frames"]
    ]
    return {**truth, "frames": frames}
