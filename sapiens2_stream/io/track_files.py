"""Per-track exports for motion capture: NPZ, Parquet and TRC (OpenSim), smoothed over the whole track.

Schema of every track (one file per track id, `track_<id>` in NPZ/Parquet/TRC):
- `frame_index` [T] int, `pts` [T] seconds, `box` [T, 4] COCO xywh pixels, `box_score` [T]
- `keypoints_raw` [T, 308, 2] pixels as decoded, `keypoint_scores` [T, 308] raw heatmap peaks
- `keypoints_smoothed` [T, 308, 2] pixels, the configured method over the whole track (RTS: zero lag)
- `coco17_raw`, `coco17_smoothed` [T, 17, 2], `coco17_scores` [T, 17]: the COCO-17 subset in COCO order
- `flip` [T] bool (flip TTA ran); NPZ also stores `keypoint_names` and `coco17_names`
Parquet has one row per frame with the arrays flattened into list columns of the same names.
TRC holds the smoothed COCO-17 markers in image pixels with Y pointing up and Z = 0.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..config import DEFAULT_FPS
from ..models.metadata import COCO17_NAMES, pose_metadata
from ..track.options import SmoothingConfig
from ..track.smoothing import smooth_keypoints
from .records import RecordedFrame
from .sink import Sink


class TrackSink(Sink):
    """Collects each track's frames while the run goes and writes the files at close."""

    def __init__(self, out_dir: Path, formats: list[str], smoothing: SmoothingConfig) -> None:
        self.out_dir = Path(out_dir)
        self.formats = formats
        self.smoothing = smoothing
        self.rows: dict[int, list] = defaultdict(list)

    def write(self, result) -> None:
        for p in result.people:
            if p.keypoints is not None:
                self.rows[p.track_id].append(
                    (result.frame.index, result.frame.pts_s, p.box, p.score, p.keypoints, p.keypoint_scores,
                     result.flip.get("pose", False))
                )  # fmt: skip

    def seed(self, records: list[RecordedFrame]) -> None:
        """Rows of an interrupted run, from its JSONL records."""
        for r in records:
            for p in r.people:
                if p.keypoints is not None:
                    self.rows[p.track_id].append((r.frame, r.pts, p.box, p.score, p.keypoints, p.keypoint_scores,
                                                  r.flip.get("pose", False)))  # fmt: skip

    def track_arrays(self, rows: list) -> dict[str, np.ndarray]:
        frame, pts, box, score, kp, kps, flip = (np.asarray(c) for c in zip(*rows, strict=True))
        s = self.smoothing
        smoothed = smooth_keypoints(kp, kps, pts, s.method, s.min_score, **s.params)
        coco = list(pose_metadata().coco17)
        return {
            "frame_index": frame.astype(np.int64), "pts": pts.astype(np.float64),
            "box": box.astype(np.float32), "box_score": score.astype(np.float32),
            "keypoints_raw": kp.astype(np.float32), "keypoint_scores": kps.astype(np.float32),
            "keypoints_smoothed": smoothed.astype(np.float32),
            "coco17_raw": kp[:, coco].astype(np.float32), "coco17_smoothed": smoothed[:, coco].astype(np.float32),
            "coco17_scores": kps[:, coco].astype(np.float32), "flip": flip.astype(bool),
        }  # fmt: skip

    def close(self) -> None:
        if not self.rows:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for track_id, rows in sorted(self.rows.items()):
            arrays = self.track_arrays(sorted(rows, key=lambda r: r[0]))
            stem = self.out_dir / f"track_{track_id:04d}"
            if "npz" in self.formats:
                names = np.array(pose_metadata().names)
                np.savez_compressed(stem.with_suffix(".npz"), **arrays, keypoint_names=names,
                                    coco17_names=np.array(COCO17_NAMES))  # fmt: skip
            if "parquet" in self.formats:
                write_parquet(stem.with_suffix(".parquet"), arrays)
            if "trc" in self.formats:
                write_trc(stem.with_suffix(".trc"), arrays["pts"], arrays["coco17_smoothed"], COCO17_NAMES)


def write_parquet(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {}
    for name, a in arrays.items():
        columns[name] = pa.array(a.reshape(len(a), -1).tolist()) if a.ndim > 1 else pa.array(a)
    pq.write_table(pa.table(columns), path)


def write_trc(path: Path, times: np.ndarray, markers: np.ndarray, names: tuple[str, ...], units: str = "px",
              digits: int = 3) -> None:  # fmt: skip
    """OpenSim TRC of [T, M, 3] markers already in TRC axes (Y up) and `units`; [T, M, 2] pixel markers are
    written as X, -Y (up), Z = 0. A marker with no value (NaN) is left empty, as OpenSim reads it."""
    if markers.shape[-1] == 2:
        markers = np.dstack([markers[..., 0], -markers[..., 1], np.zeros(markers.shape[:2])])
    t_len, m = markers.shape[:2]
    rate = (t_len - 1) / (times[-1] - times[0]) if t_len > 1 and times[-1] > times[0] else DEFAULT_FPS
    lines = [
        f"PathFileType\t4\t(X/Y/Z)\t{path.name}",
        "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames",
        f"{rate:.3f}\t{rate:.3f}\t{t_len}\t{m}\t{units}\t{rate:.3f}\t1\t{t_len}",
        "Frame#\tTime\t" + "\t".join(f"{n}\t\t" for n in names),
        "\t\t" + "\t".join(f"X{i + 1}\tY{i + 1}\tZ{i + 1}" for i in range(m)),
        "",
    ]
    for i in range(t_len):
        cells = ["\t\t" if not np.isfinite(p).all() else "\t".join(f"{v:.{digits}f}" for v in p) for p in markers[i]]
        lines.append(f"{i + 1}\t{times[i]:.6f}\t" + "\t".join(cells))
    path.write_text("\n".join(lines) + "\n")
