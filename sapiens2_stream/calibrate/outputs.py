"""What every run of `calibrate` writes: the Calib.toml (updated in place, replaced whole only once complete), a JSON
report beside it (`<name>.report.json`) and a picture: where each camera saw the board (`<name>.coverage.png`,
intrinsics) or the cameras and the floor from above with each camera's reprojection error (`<name>.rig.png`).
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from ..threed.calibration import Camera, read_calibration, write_calibration
from .boards import Board
from .extrinsics import Placed
from .intrinsics import Intrinsics
from .people import PeoplePlaced
from .views import View

GRID = (8, 6)  # coverage: the picture cut into this many cells (columns, rows)
PANEL_WIDTH = 480


def report_paths(output: Path, picture: str = "coverage") -> tuple[Path, Path]:
    """The report and the picture beside a Calib.toml: `<name>.report.json`, `<name>.<picture>.png`."""
    stem = output.with_suffix("")
    return stem.with_name(stem.name + ".report.json"), stem.with_name(f"{stem.name}.{picture}.png")


def coverage(views: list[View], size: tuple[int, int]) -> float:
    """The share of the picture's cells (GRID) in which some view has a corner."""
    cells = set()
    for view in views:
        cols = np.clip((view.found.image[:, 0] / size[0] * GRID[0]).astype(int), 0, GRID[0] - 1)
        rows = np.clip((view.found.image[:, 1] / size[1] * GRID[1]).astype(int), 0, GRID[1] - 1)
        cells.update(zip(cols.tolist(), rows.tolist(), strict=True))
    return len(cells) / (GRID[0] * GRID[1])


def coverage_picture(path: Path, seen: dict[str, tuple[list[View], Intrinsics]]) -> None:
    """A panel per camera: its picture's frame, each view's board outline and corners in a colour of its own, the
    grid of cells, and the camera's RMS."""
    panels = []
    for name, (views, result) in seen.items():
        scale = PANEL_WIDTH / result.size[0]
        height = int(round(result.size[1] * scale))
        panel = np.full((height + 28, PANEL_WIDTH, 3), 255, np.uint8)
        for i in range(1, GRID[0]):
            x = int(PANEL_WIDTH * i / GRID[0])
            cv2.line(panel, (x, 28), (x, height + 27), (225, 225, 225), 1)
        for j in range(1, GRID[1]):
            y = 28 + int(height * j / GRID[1])
            cv2.line(panel, (0, y), (PANEL_WIDTH - 1, y), (225, 225, 225), 1)
        cv2.rectangle(panel, (0, 28), (PANEL_WIDTH - 1, height + 27), (0, 0, 0), 1)
        for k, view in enumerate(views):
            hue = int(180 * k / max(len(views), 1))
            colour = cv2.cvtColor(np.uint8([[[hue, 200, 200]]]), cv2.COLOR_HSV2BGR)[0, 0].tolist()
            pts = view.found.image * scale + [0, 28]
            hull = cv2.convexHull(pts.astype(np.int32))
            cv2.polylines(panel, [hull], True, colour, 1, cv2.LINE_AA)
            for x, y in pts:
                cv2.circle(panel, (int(x), int(y)), 2, colour, -1, cv2.LINE_AA)
        text = (f"{name}: {len(views)} views, RMS {result.rms_px:.3f} px, "
                f"{coverage(views, result.size):.0%} of the picture")  # fmt: skip
        cv2.putText(panel, text, (6, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        panels.append(panel)
    width = max(p.shape[1] for p in panels)
    picture = np.vstack([np.pad(p, ((0, 6), (0, width - p.shape[1]), (0, 0)), constant_values=255) for p in panels])
    cv2.imwrite(str(path), picture)


def top_view(path: Path, cameras: list[Camera], rms_px: dict[str, float], floor: np.ndarray) -> None:
    """The rig from above: `floor` ([N, 2] world points shaded: the floor's board, or where the person walked),
    each camera's centre and where it looks, a scale bar; under it each camera's reprojection RMS."""
    centres = {c.name: c.centre for c in cameras}
    looks = {c.name: cv2.Rodrigues(c.rotation)[0].T @ np.array([0, 0, 1.0]) for c in cameras}
    xy = np.concatenate([floor, np.stack([c[:2] for c in centres.values()])])
    span = float(max(xy.max(0) - xy.min(0)))
    low, high = xy.min(0) - 0.2 * span, xy.max(0) + 0.2 * span
    side = 520
    scale = (side - 40) / float(max(high - low))

    def at(p) -> tuple[int, int]:
        return int(20 + (p[0] - low[0]) * scale), int(side - 20 - (p[1] - low[1]) * scale)

    picture = np.full((side + 24 * len(centres) + 10, side, 3), 255, np.uint8)
    hull = cv2.convexHull(np.array([at(p) for p in floor], np.int32))
    cv2.fillPoly(picture, [hull], (215, 235, 215))
    cv2.drawMarker(picture, at((0, 0)), (40, 140, 40), cv2.MARKER_SQUARE, 10, 2)
    for i, (name, centre) in enumerate(centres.items()):
        tip = centre[:2] + 0.15 * span * looks[name][:2]
        cv2.arrowedLine(picture, at(centre[:2]), at(tip), (200, 80, 0), 2, cv2.LINE_AA, tipLength=0.25)
        cv2.circle(picture, at(centre[:2]), 5, (200, 80, 0), -1, cv2.LINE_AA)
        x, y = at(centre[:2])
        cv2.putText(picture, f"{name} ({centre[2]:.2f} m up)", (x + 8, y + (18 if i % 2 else -8)),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)  # fmt: skip
    bar = next((v for v in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if v * scale > 80), 100)
    cv2.line(picture, (20, side - 6), (20 + int(bar * scale), side - 6), (0, 0, 0), 2)
    cv2.putText(picture, f"{bar:g} m", (26 + int(bar * scale), side - 2), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1)
    for i, (name, rms) in enumerate(rms_px.items()):
        y = side + 18 + 24 * i
        cv2.putText(picture, f"{name}: {rms:.3f} px", (20, y), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1,
                    cv2.LINE_AA)  # fmt: skip
        cv2.rectangle(picture, (170, y - 10), (170 + int(min(rms, 3.0) / 3.0 * 320), y), (0, 120, 220), -1)
    cv2.imwrite(str(path), picture)


def existing_cameras(output: Path) -> dict[str, Camera]:
    """The cameras of a Calib.toml being updated (none when it does not exist yet)."""
    try:
        return dict(read_calibration(output)) if output.exists() else {}
    except Sapiens2StreamError as e:
        raise Sapiens2StreamError(f"--output {output}: it exists but cannot be updated ({e})") from None


def write_placed(output: Path, placed: list[Camera], rms_px: dict[str, float],
                 old: dict[str, Camera] | None = None) -> None:  # fmt: skip
    """`output` with the placed cameras written over their old tables (its other cameras, `old` when already read,
    kept in their order)."""
    cameras = existing_cameras(output) if old is None else dict(old)
    cameras.update({c.name: c for c in placed})
    write_calibration(output, list(cameras.values()), {n: round(v, 4) for n, v in rms_px.items()})


def write_extrinsics(output: Path, placed: Placed, board: Board, sync: dict, intrinsics: str) -> dict:
    """Calib.toml (the cameras placed; other cameras of an existing file kept), its report and its picture; `sync`:
    each video's offset; `intrinsics`: where the lenses came from ("given", "refined with the rig")."""
    write_placed(output, placed.cameras, placed.rms_px)
    report = {"board": board.describe(), "calibration": str(output), "floor_picture": placed.floor,
              "pictures_used": placed.moments, "board_check": placed.check, "board_check_held_out": placed.held_out,
              "below_floor": placed.below_floor, "sync": sync, "intrinsics": intrinsics, "cameras": {}}  # fmt: skip
    for cam in placed.cameras:
        k, lens = cam.matrix, np.ravel(cam.distortions)
        report["cameras"][cam.name] = {"position_m": [round(float(v), 4) for v in cam.centre],
                                       "rms_px": round(placed.rms_px[cam.name], 4),
                                       "views": len(placed.views[cam.name]),
                                       "fx": round(float(k[0, 0]), 3), "fy": round(float(k[1, 1]), 3),
                                       "cx": round(float(k[0, 2]), 3), "cy": round(float(k[1, 2]), 3),
                                       "distortions": [round(float(d), 6) for d in lens]}  # fmt: skip
    report_json, picture = report_paths(output, "rig")
    report_json.write_text(json.dumps(report, indent=1, default=float) + "\n")
    top_view(picture, placed.cameras, placed.rms_px, board.corners()[:, :2] * [1, -1])  # the board: (x, -y)
    return report


def write_people(output: Path, placed: PeoplePlaced, height_m: float, sync: dict,
                 given: dict[str, Camera] | None = None) -> dict:  # fmt: skip
    """Calib.toml (the cameras placed from people; other cameras of an existing file kept), its report and its
    picture (the cameras from above over where the people walked); `sync`: each camera's offset and tracks;
    `given`: the intrinsics the focal lengths were refined from (None: kept as given)."""
    write_placed(output, placed.cameras, placed.rms_px)
    report = {"calibration": str(output), "from": "people", "height_m": height_m,
              "intrinsics": "given" if given is None else "focal lengths refined",
              "eye_height_m": round(placed.eye_height_m, 4), "floor_rms_m": round(placed.floor_rms_m, 4),
              "points": placed.points, "moments": placed.moments, "sync": sync, "cameras": {}}  # fmt: skip
    for cam in placed.cameras:
        report["cameras"][cam.name] = {"position_m": [round(float(v), 4) for v in cam.centre],
                                       "rms_px": round(placed.rms_px[cam.name], 4),
                                       "focal_px": round(float(cam.matrix[0, 0]), 2)}  # fmt: skip
        if given is not None:
            report["cameras"][cam.name]["given_focal_px"] = round(float(given[cam.name].matrix[0, 0]), 2)
    report_json, picture = report_paths(output, "rig")
    report_json.write_text(json.dumps(report, indent=1, default=float) + "\n")
    top_view(picture, placed.cameras, placed.rms_px, placed.footprints)
    return report


def write_intrinsics(output: Path, seen: dict[str, tuple[list[View], Intrinsics]], board_text: str) -> dict:
    """Calib.toml, its report and its picture; returns the report."""
    solved = [result for _, result in seen.values()]
    old = existing_cameras(output)
    placed = [Camera(r.name, (float(r.size[0]), float(r.size[1])), r.matrix, r.distortions,
                     old[r.name].rotation if r.name in old else np.zeros(3),
                     old[r.name].translation if r.name in old else np.zeros(3)) for r in solved]  # fmt: skip
    write_placed(output, placed, {r.name: r.rms_px for r in solved}, old)  # extrinsics kept; new cameras at
    # the world's origin until theirs are calibrated
    report = {"board": board_text, "calibration": str(output), "cameras": {}}
    for name, (views, result) in seen.items():
        report["cameras"][name] = {**result.report(), "coverage": round(coverage(views, result.size), 3)}
    report_json, picture = report_paths(output)
    report_json.write_text(json.dumps(report, indent=1, default=float) + "\n")
    coverage_picture(picture, seen)
    return report
