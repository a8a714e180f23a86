"""Each track's angles as files people open: OpenSim `.mot` (what OpenSim and Sports2D's plotting read: header
`Coordinates`, `inDegrees=yes`, time plus one column per angle), a CSV with every angle and its confidence, and a
PNG of the angles over time (as Sports2D draws them: one panel per angle, the raw values faint under the filtered).
The files hold the offline (zero-lag) filter's values."""

from __future__ import annotations

import csv
from pathlib import Path

import cv2
import numpy as np

from .anatomical import NAMES_3D
from .filters import zero_lag
from .options import AnglesConfig
from .planar import NAMES_2D


def series(rows: list, kind: int, width: int) -> np.ndarray:
    """A track's raw (unwrapped, masked) angles of one kind over its rows: [T, width], NaN where not seen."""
    return np.array([r[kind] if r[kind] is not None else np.full(width, np.nan) for r in rows], np.float64)


def offline(values: np.ndarray, cfg: AnglesConfig, fps: float) -> np.ndarray:
    if cfg.filter == "none":
        return values
    return np.column_stack([zero_lag(values[:, j], cfg.order, cfg.cutoff_hz, fps) for j in range(values.shape[1])])


def write_mot(path: Path, times: np.ndarray, names: tuple, values: np.ndarray) -> None:
    """An OpenSim storage file of angles in degrees (NaN written as `nan`, which OpenSim and pandas read)."""
    header = ["Coordinates", "version=1", f"nRows={len(times)}", f"nColumns={len(names) + 1}", "inDegrees=yes", "",
              "Units are S.I. units (second, meters, Newtons, ...)",
              "If the header above contains a line with 'inDegrees', this indicates whether rotational values are in "
              "degrees (yes) or radians (no).", "", "endheader", "time\t" + "\t".join(names)]  # fmt: skip
    with open(path, "w") as f:
        f.write("\n".join(header) + "\n")
        for t, row in zip(times, values, strict=True):
            f.write("\t".join([f"{t:.6f}", *(f"{v:.4f}" for v in row)]) + "\n")


def write_track(folder: Path, track_id: int, rows: list, cfg: AnglesConfig, fps: float) -> list[Path]:
    """A track's files in `folder`: person_NNNN_angles_2d.mot (where it was seen in pixels), _angles_3d.mot (where
    it was in metres), .csv and .png; no file of a kind it has no angle of (a camera group's people have no 2-D
    angles). Returns the paths written."""
    flat, deep = series(rows, 3, len(NAMES_2D)), series(rows, 4, len(NAMES_3D))
    kinds = [(kind, names, offline(raw, cfg, fps), raw) for kind, names, raw in (("2d", NAMES_2D, flat),
             ("3d", NAMES_3D, deep)) if rows and not np.isnan(raw).all()]  # fmt: skip
    if not kinds:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"person_{track_id:04d}_angles"
    times = np.array([r[0] for r in rows])
    written = []
    for kind, names, values, _ in kinds:
        write_mot(stem.with_name(f"{stem.name}_{kind}.mot"), times, names, values)
        written.append(stem.with_name(f"{stem.name}_{kind}.mot"))
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        out = csv.writer(f)
        columns = [n for _, names, _, _ in kinds for n in names]
        out.writerow(["time", "frame", "side", *columns, *(f"{n} confidence" for n in columns)])
        for i, r in enumerate(rows):
            values = [v for _, _, vals, _ in kinds for v in vals[i]]
            out.writerow([f"{r[0]:.6f}", r[1], r[2] or "", *("" if np.isnan(v) else f"{v:.3f}" for v in values),
                          *(r[5].get(n, "") for n in columns)])  # fmt: skip
    written.append(stem.with_suffix(".csv"))
    if cfg.plots:
        picture = plot(times, [(names, vals, raw) for _, names, vals, raw in kinds], f"person {track_id}")
        cv2.imwrite(str(stem.with_suffix(".png")), picture)
        written.append(stem.with_suffix(".png"))
    return written


PANEL = (220, 120)  # a panel's width and height, pixels


def plot(times: np.ndarray, kinds: list, title: str) -> np.ndarray:
    """Angles over time: one panel per angle seen at all, the raw values light grey under the filtered ones."""
    panels = [(n, vals[:, j], raw[:, j]) for names, vals, raw in kinds for j, n in enumerate(names)
              if not np.isnan(raw[:, j]).all()]  # fmt: skip
    cols = 6
    rows = max(1, -(-len(panels) // cols))
    w, h = PANEL
    picture = np.full((rows * h + 30, cols * w, 3), 255, np.uint8)
    cv2.putText(picture, f"{title}: angles (degrees) over time (s)", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, 0, 1,
                cv2.LINE_AA)  # fmt: skip
    t0, t1 = (times.min(), times.max()) if len(times) else (0.0, 1.0)
    for k, (name, filtered, raw) in enumerate(panels):
        x0, y0 = (k % cols) * w, 30 + (k // cols) * h
        box = (x0 + 34, y0 + 18, x0 + w - 8, y0 + h - 18)
        both = np.r_[raw[np.isfinite(raw)], filtered[np.isfinite(filtered)]]
        lo, hi = float(both.min()), float(both.max())
        lo, hi = (lo - 5, hi + 5) if hi - lo < 10 else (lo, hi)
        cv2.rectangle(picture, box[:2], box[2:], (200, 200, 200), 1)
        cv2.putText(picture, name, (x0 + 34, y0 + 13), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (40, 40, 40), 1, cv2.LINE_AA)
        for value, y in ((hi, box[1]), (lo, box[3])):
            cv2.putText(picture, f"{value:.0f}", (x0 + 2, y + 4), cv2.FONT_HERSHEY_SIMPLEX, 0.33, (90, 90, 90), 1)
        for values, colour in ((raw, (200, 200, 200)), (filtered, (180, 90, 20))):
            xs = box[0] + (times - t0) / max(t1 - t0, 1e-9) * (box[2] - box[0])
            ys = box[3] - (values - lo) / (hi - lo) * (box[3] - box[1])
            ok = np.isfinite(ys)
            for run in np.split(np.flatnonzero(ok), np.flatnonzero(np.diff(np.flatnonzero(ok)) > 1) + 1):
                if len(run) > 1:
                    line = np.column_stack([xs[run], ys[run]]).round().astype(np.int32)
                    cv2.polylines(picture, [line], False, colour, 1, cv2.LINE_AA)
    return picture
