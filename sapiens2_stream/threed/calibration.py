"""Pose2Sim's Calib.toml: one table per camera (image size, intrinsic matrix, OpenCV distortion, Rodrigues rotation
and translation from the world to the camera, metres), read from Pose2Sim's own calibration or any OpenCV
calibration written in that layout.

Pose2Sim's own undistortion is broken (its error check reprojects with the distortion but compares with points
undistorted into another matrix: 62 mm RMS measured), so points are undistorted here into the same intrinsic matrix
(`cv2.undistortPoints(..., P=K)`) and the calibration is written with zero distortion.
"""

from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError

NOT_CAMERAS = {"metadata", "capture_volume", "charuco", "checkerboard"}


@dataclass(frozen=True)
class Camera:
    name: str
    size: tuple[float, float]  # width, height in pixels
    matrix: np.ndarray  # [3, 3]
    distortions: np.ndarray  # OpenCV k1, k2, p1, p2 (fisheye: k1-k4)
    rotation: np.ndarray  # Rodrigues, world -> camera
    translation: np.ndarray  # metres, world -> camera
    fisheye: bool = False

    @property
    def distorted(self) -> bool:
        return bool(np.any(self.distortions != 0))

    def undistort(self, points: np.ndarray) -> np.ndarray:
        """[N, 2] pixels -> the pixels of an ideal pinhole camera with the same intrinsic matrix."""
        if not self.distorted or len(points) == 0:
            return points
        pts = np.asarray(points, np.float64).reshape(-1, 1, 2)
        if self.fisheye:
            out = cv2.fisheye.undistortPoints(pts, self.matrix, self.distortions, P=self.matrix)
        else:
            out = cv2.undistortPoints(pts, self.matrix, self.distortions, P=self.matrix)
        return out.reshape(-1, 2)

    @property
    def centre(self) -> np.ndarray:
        """Where the camera stands in the world (metres)."""
        return -cv2.Rodrigues(self.rotation)[0].T @ self.translation

    def projection(self) -> np.ndarray:
        """The [3, 4] projection matrix K [R | t]."""
        r, _ = cv2.Rodrigues(self.rotation)
        return self.matrix @ np.hstack([r, self.translation.reshape(3, 1)])

    def to_world(self, points: np.ndarray) -> np.ndarray:
        """[..., 3] points in this camera's frame (metres) -> the calibration's world frame."""
        r, _ = cv2.Rodrigues(self.rotation)
        return (np.asarray(points, np.float64) - self.translation) @ r

    def undistorted(self) -> Camera:
        return replace(self, distortions=np.zeros_like(self.distortions), fisheye=False)


def camera_named(calibration: str | None, name: str) -> Camera | None:
    """The camera `name` of a calibration file (None without a file); a file that lacks it is a configuration
    error naming the cameras it has."""
    return cameras_named(calibration, [name], "threed.calibration")[name] if calibration else None


def read_calibration(path: str | Path) -> dict[str, Camera]:
    """Every camera table of a Calib.toml, by the camera's name (its `name` key, or the table's). Read once per
    version of the file: building a run asks for it from several stages."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as e:
        raise Sapiens2StreamError(f"--calibration {path}: cannot read it ({e})") from None
    return dict(parsed_calibration(path.resolve(), stat.st_mtime_ns, stat.st_size, str(path)))


def cameras_named(path: str | Path, names, what: str, hint: str = "") -> dict[str, Camera]:
    """The cameras `names` of the calibration at `path`, in that order; a name it lacks is a one-line error of
    `what` (the option that gave the file), with what it has and `hint` (what to do)."""
    cameras = read_calibration(path)
    absent = [name for name in names if name not in cameras]
    if absent:
        raise Sapiens2StreamError(f"{what}: no camera named {', '.join(absent)} in {path} (it has "
                                  f"{', '.join(sorted(cameras)) or 'none'}){hint}")  # fmt: skip
    return {name: cameras[name] for name in names}


@functools.lru_cache(maxsize=16)
def parsed_calibration(path: Path, mtime_ns: int, size: int, shown: str) -> dict[str, Camera]:
    """The cameras of one version of a Calib.toml (`mtime_ns` and `size` tell versions apart; `shown`: the path as
    the user gave it, for messages)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise Sapiens2StreamError(f"--calibration {shown}: cannot read it ({e})") from None
    cameras = {}
    for key, table in data.items():
        if key in NOT_CAMERAS or not isinstance(table, dict):
            continue
        try:
            cam = Camera(
                name=str(table.get("name", key)), size=tuple(float(v) for v in table["size"]),
                matrix=np.array(table["matrix"], np.float64).reshape(3, 3),
                distortions=np.array(table["distortions"], np.float64),
                rotation=np.array(table["rotation"], np.float64).reshape(3),
                translation=np.array(table["translation"], np.float64).reshape(3),
                fisheye=bool(table.get("fisheye", False)),
            )  # fmt: skip
        except (KeyError, ValueError, TypeError) as e:
            raise Sapiens2StreamError(f"--calibration {shown}: camera table [{key}] is incomplete ({e})") from None
        cameras[cam.name] = cam
    if not cameras:
        raise Sapiens2StreamError(f"--calibration {shown}: no camera tables in it")
    return cameras


def numbers(values) -> str:
    return "[ " + ", ".join(repr(float(v)) for v in np.ravel(values)) + "]"


def write_calibration(path: Path, cameras: list[Camera], rms_px: dict[str, float] | None = None) -> None:
    """Calib.toml in Pose2Sim's layout, the cameras in the given order (Pose2Sim pairs them with the pose folders
    by position); `rms_px`, each camera's true reprojection RMS, goes into the metadata (its mean as Pose2Sim's
    `error`). Written beside the file first and moved over it whole: never half a calibration."""
    lines = []
    for cam in cameras:
        k = cam.matrix
        lines += [
            f"[{cam.name}]", f'name = "{cam.name}"', f"size = {numbers(cam.size)}",
            f"matrix = [ {numbers(k[0])}, {numbers(k[1])}, {numbers(k[2])}]",
            f"distortions = {numbers(cam.distortions)}", f"rotation = {numbers(cam.rotation)}",
            f"translation = {numbers(cam.translation)}", f"fisheye = {str(cam.fisheye).lower()}", "",
        ]  # fmt: skip
    error = float(np.mean(list(rms_px.values()))) if rms_px else 0.0
    lines += ["[metadata]", "adjusted = false", f"error = {error!r}"]
    if rms_px:
        lines.append("rms_px = { " + ", ".join(f"{json.dumps(n)} = {float(v)!r}" for n, v in rms_px.items()) + " }")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join([*lines, ""]))
    partial.replace(path)
