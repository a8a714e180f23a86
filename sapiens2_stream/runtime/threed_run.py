"""One source's people in metres (the `threed` stage and the `threed:` section): the lifter on each result, the
floor under the people and the world frame on it, and at the end world.json and the per-track motion-capture
files (tracks_3d/track_NNNN.trc, .c3d, .bvh: `export.motion3d`).

The tracks' rows wait on disk (`TrackSpool`), not in memory, so that a camera running for days keeps flat memory;
the files are written from them when the run ends, one track at a time.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import cv2
import numpy as np

from ..export.motion3d import write_mocap
from ..io.sink import best_keypoints
from ..io.stage_files import FileOutbox
from ..threed import Lifter
from ..threed.calibration import camera_named
from ..threed.floor import FloorFinder, world_from_camera
from ..threed.options import ThreeDConfig
from .results import FrameResult

REFIT_EVERY = 50  # frames between two fits of the floor
ROW = np.dtype([("pts", "<f8"), ("xyz", "<f4", (308, 3)), ("confidence", "<f4", (308,))])  # one person, one frame
SPOOL = ".tracks_3d.rows"  # the spool's folder in the output folder (removed once the files are written)


class TrackSpool(Mapping):
    """Each track's 3-D rows appended to a file of its own as they come (4.9 KB a person a frame), read back one
    track at a time: `spool[track_id]` is (times [T], xyz [T, 308, 3], confidence [T, 308])."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[int, BinaryIO] = {}  # open for the tracks still in the picture
        self.track_ids: set[int] = set()  # every track spooled (its files are written from them)

    def path(self, track_id: int) -> Path:
        return self.folder / f"track_{track_id:04d}.rows"

    def add(self, track_id: int, pts: float, xyz: np.ndarray, confidence: np.ndarray) -> None:
        if track_id not in self.files:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.files[track_id] = self.path(track_id).open("ab")
            self.track_ids.add(track_id)
        row = np.zeros((), ROW)
        row["pts"], row["xyz"], row["confidence"] = pts, xyz, confidence
        self.files[track_id].write(row.tobytes())

    def end(self, track_id: int) -> None:
        """The track left: its file is closed (reopened if the id comes back)."""
        handle = self.files.pop(track_id, None)
        if handle is not None:
            handle.close()

    def __getitem__(self, track_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.end(track_id)  # flushed before it is read
        rows = np.fromfile(self.path(track_id), ROW)
        return rows["pts"], rows["xyz"], rows["confidence"]

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self.track_ids))

    def __len__(self) -> int:
        return len(self.track_ids)

    def remove(self) -> None:
        for track_id in list(self.files):
            self.end(track_id)
        shutil.rmtree(self.folder, ignore_errors=True)


class ThreeDRun:
    def __init__(self, t: ThreeDConfig, out_dir: Path, camera_name: str, files: FileOutbox | None) -> None:
        """The `threed:` section, the source's output folder and its name (its camera in the calibration), and
        where its files go at the end (its source's outbox: the outputs write them; None: no file)."""
        self.camera = camera_named(t.calibration, camera_name)
        self.lifter = Lifter(None if self.camera is None else self.camera.matrix)
        self.floor = FloorFinder()
        self.formats = list(t.formats)
        self.files = files
        self.rows = TrackSpool(Path(out_dir) / SPOOL)  # (written only when there are files to make of it)
        self.frames = 0
        self.tracks: set[int] = set()  # every track put in metres (the summary's count, files or not)
        self.world: np.ndarray | None = self._calibrated_world()

    def _calibrated_world(self) -> np.ndarray | None:
        """The calibration's world frame: Pose2Sim's extrinsics take world points into the camera's frame."""
        if self.camera is None:
            return None
        camera_from_world = np.eye(4)
        camera_from_world[:3, :3] = cv2.Rodrigues(np.asarray(self.camera.rotation, np.float64))[0]
        camera_from_world[:3, 3] = self.camera.translation
        return np.linalg.inv(camera_from_world)

    def __call__(self, result: FrameResult) -> None:
        for track_id in result.ended_tracks:
            self.lifter.drop(track_id)
            self.rows.end(track_id)
        if result.pointmap is None:
            return
        people = [p for p in result.people if p.keypoints is not None]
        keypoints = np.array([best_keypoints(p) for p in people])
        keypoints = keypoints.reshape(-1, 308, 2)
        if self.camera is not None and self.camera.distorted and len(people):
            keypoints = self.camera.undistort(keypoints.reshape(-1, 2)).reshape(keypoints.shape)
        scores = np.array([p.keypoint_scores for p in people]).reshape(-1, 308)
        xyz, confidence = self.lifter(keypoints, scores, result.pointmap, [p.track_id for p in people],
                                      result.frame.pts_s, person_masks(result, people))  # fmt: skip
        for p, points, sure in zip(people, xyz, confidence, strict=True):
            p.keypoints_3d, p.keypoints_3d_confidence = points.astype(np.float32), sure.astype(np.float32)
            self.tracks.add(p.track_id)
            if self.files is not None:
                self.rows.add(p.track_id, result.frame.pts_s, p.keypoints_3d, p.keypoints_3d_confidence)
        if self.camera is None and len(people):
            self.floor.add(xyz, confidence)
            self.frames += 1
            if self.frames % REFIT_EVERY == 0 or self.world is None:
                self._refit()
        result.world_from_camera = self.world

    def _refit(self) -> None:
        plane = self.floor.fit()
        if plane is not None:
            self.world = world_from_camera(*plane)

    def summary(self) -> dict:
        k = self.lifter.intrinsics
        out = {"intrinsics": None if k is None else np.round(k, 2).tolist(),
               "intrinsics_from": "calibration" if self.camera is not None else "pointmap",
               "world_from": "calibration" if self.camera is not None else "floor" if self.world is not None else None,
               "tracks": len(self.tracks)}  # fmt: skip
        if self.camera is None and self.floor.plane is not None:
            out["camera_height_m"] = round(self.floor.plane[1], 3)
        return out

    def close(self) -> None:
        """The floor fitted once more; world.json, then each track's files in the world frame (the camera's where no
        floor was found), handed to the outputs (which write them into the folder being written, then let the
        spool go)."""
        if self.camera is None:
            self._refit()
        if self.files is None:
            return
        frame = "calibration" if self.camera is not None else "floor" if self.world is not None else "camera"
        rows, world, formats, about = self.rows, self.world, self.formats, self.summary()

        def write(folder: Path) -> None:
            try:
                write_mocap(folder, rows, world, frame, formats, about)
            finally:
                rows.remove()

        self.files.put("", write)


def person_masks(result: FrameResult, people: list) -> np.ndarray | None:
    """[P, H, W] each person's own pixels: the matte or the part labels (anyone) within the person's box, or None
    when neither ran."""
    if result.alpha is not None:
        anyone = result.alpha > 0.5
    elif result.seg is not None:
        anyone = result.seg > 0
    else:
        return None
    out = np.zeros((len(people), *anyone.shape), bool)
    h, w = anyone.shape
    for i, p in enumerate(people):
        x, y, bw, bh = p.box
        x0, y0 = max(int(x - 0.05 * bw), 0), max(int(y - 0.05 * bh), 0)
        x1, y1 = min(int(x + 1.05 * bw) + 1, w), min(int(y + 1.05 * bh) + 1, h)
        out[i, y0:y1, x0:x1] = anyone[y0:y1, x0:x1]
    return out
