"""`sapiens2-stream kinematics RUN_FOLDER`: each person a run put in metres, scaled and solved by OpenSim.

The people in metres are a camera group's (`3d/keypoints_3d.jsonl`, the calibration's world, Z up) or each single
camera's 3-D stage (`results.jsonl` `keypoints_3d`, moved into its floor's world by `world.json`). OpenSim's frame
is Y up: world (x, y, z) is OpenSim (y, z, x), as the TRC export writes it. Per track, in the output folder:
`person_NNNN_scaled.osim`, `person_NNNN_ik.mot` (OpenSim's coordinate names; degrees, pelvis translations in
metres), `person_NNNN_markers.trc` (the markers IK saw; unsure ones empty), `person_NNNN_marker_errors.csv` (per
frame: RMS and largest marker error in metres, or why the frame was not solved; the start its kept solve began
from, and whether it was doubtful, `fit.TrackIK`), and `summary.json`.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..angles.files import write_mot
from ..errors import Sapiens2StreamError
from ..io.jsonl import source_folders
from ..io.records import RecordedPerson, read_frames, read_moments
from ..io.track_files import write_trc
from ..threed.floor import transform
from .fit import MIN_SURE, TooShort, TrackIK, scale_model
from .markers import NAMES, markers
from .opensim_files import need_opensim, setup_dir
from .options import KinematicsConfig

TO_OPENSIM = [1, 2, 0]  # world (Z up) axes -> OpenSim's (Y up)
SCALE_FRAMES = KinematicsConfig().scale_frames


@dataclass
class Track:
    """One person in metres: times [T], keypoints [T, 308, 3] in the world (NaN where unknown), confidence [T, 308]."""

    label: str  # where it came from: "3d" (a camera group) or the source's name
    track_id: int
    times: np.ndarray
    keypoints: np.ndarray
    confidence: np.ndarray


def collect(rows: list[tuple[int, float, np.ndarray, np.ndarray]], label: str) -> list[Track]:
    by_id: dict[int, list] = {}
    for track_id, t, kp, conf in rows:
        by_id.setdefault(track_id, []).append((t, kp, conf))
    return [Track(label, tid, np.array([r[0] for r in seen]), np.array([r[1] for r in seen]),
                  np.array([r[2] for r in seen])) for tid, seen in sorted(by_id.items())]  # fmt: skip


def group_tracks(path: Path) -> list[Track]:
    """A camera group's people from its 3d/keypoints_3d.jsonl."""
    rows = [(p.id, m.time, p.keypoints_3d, p.confidence) for m in read_moments(path) for p in m.people]
    return collect(rows, "3d")


def camera_tracks(folder: Path) -> list[Track]:
    """A single camera's people in metres (its 3-D stage's), in its floor's world: the world a live run's
    kinematics stood on where the record keeps it (`kinematics_world`: the floor is found again as a run goes),
    else its world.json's; none without a floor."""
    world = folder / "world.json"
    found = json.loads(world.read_text()).get("world_from_camera") if world.exists() else None
    rows = []
    for r in read_frames(folder / "results.jsonl"):
        for p in r.people:
            keypoints = recorded_in_world(p, found)
            if keypoints is not None:
                rows.append((p.track_id, r.pts, keypoints, p.keypoints_3d_confidence))
    return collect(rows, folder.name)


def recorded_in_world(person: RecordedPerson, world: list | None = None) -> np.ndarray | None:
    """A recorded person's keypoints in metres moved into the world their kinematics stood on (`kinematics_world`,
    as a live run recorded it), else into `world` (3x4 or 4x4); None without keypoints or a world."""
    matrix = person.fields.get("kinematics_world", world)
    if person.keypoints_3d is None or matrix is None:
        return None
    return transform(np.asarray(matrix, np.float64), person.keypoints_3d)


def people_in_metres(run: Path) -> list[Track]:
    if not run.is_dir():
        raise Sapiens2StreamError(f"{run}: no such run folder")
    group = run / "3d" / "keypoints_3d.jsonl"
    tracks = group_tracks(group) if group.exists() else []
    for folder in source_folders(run):
        tracks += camera_tracks(folder)
    if not tracks:
        raise Sapiens2StreamError(f"{run}: no people in metres here (a camera group's 3d/keypoints_3d.jsonl, or a "
                                  "camera's results.jsonl with keypoints_3d and its world.json)")  # fmt: skip
    return tracks


def opensim_markers(keypoints: np.ndarray, confidence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World keypoints (Z up) [..., 308, 3] and confidence -> markers in OpenSim's frame (Y up) and sureness."""
    points, sure = markers(keypoints, confidence)
    return points[..., TO_OPENSIM], sure


def solve_track(opensim, folder: Path, track: Track, out: Path, model: str, mass: float, scale_frames: int) -> dict:
    """One person scaled, solved and written; their summary (raises TooShort). A person is written whole or not at
    all: interrupted (Ctrl-C) or failing half way, what was written of them is taken away again."""
    points, sure = opensim_markers(track.keypoints, track.confidence)
    stem = out / f"person_{track.track_id:04d}"
    files = [stem.with_name(stem.name + suffix) for suffix in ("_scaled.osim", "_ik.mot", "_markers.trc",
                                                                "_marker_errors.csv")]  # fmt: skip
    try:
        scaled = scale_model(opensim, folder, model, points, mass, files[0], scale_frames)
        solved = TrackIK(opensim, folder, scaled.path, scaled.model).solve(track.times, points, sure)
        write_mot(files[1], track.times, tuple(solved.coordinates), solved.values)
        shown = np.where((sure >= MIN_SURE)[..., None], points, np.nan)
        write_trc(files[2], track.times, shown, NAMES, units="m", digits=5)
        with open(files[3], "w", newline="") as f:
            rows = csv.writer(f)
            rows.writerow(["time", "rms_m", "max_m", "not_solved", "start", "doubtful"])
            for k, (t, (rms, most)) in enumerate(zip(track.times, solved.errors, strict=True)):
                rows.writerow([f"{t:.6f}", *("" if np.isnan(v) else f"{v:.5f}" for v in (rms, most)),
                               solved.unsolved.get(k, ""), solved.starts[k], int(solved.doubtful[k])])  # fmt: skip
    except BaseException:
        for path in files:
            path.unlink(missing_ok=True)
        raise
    solved_rows = np.isfinite(solved.errors[:, 0])
    return {
        "frames": len(track.times), "solved": int(solved_rows.sum()),
        "not_solved": dict(sorted(Counter(solved.unsolved.values()).items())),
        "scale_factors": {k: round(v, 4) for k, v in scaled.factors.items() if np.isfinite(v)},
        "measured_in_frames": scaled.frames,
        "doubtful_frames": int(solved.doubtful.sum()),
        "fresh_start_kept": dict(sorted(Counter(s for s in solved.starts if s not in ("", "last")).items())),
        "marker_rms_m": round(float(np.nanmean(solved.errors[:, 0])), 5) if solved_rows.any() else None,
        "marker_max_m": round(float(np.nanmax(solved.errors[:, 1])), 5) if solved_rows.any() else None,
    }  # fmt: skip


def kinematics(run: Path, out: Path | None, model: str = "simple", mass: float = 70.0, height: float | None = None,
               tracks: set[int] | None = None, start: float | None = None, end: float | None = None,
               scale_frames: int = SCALE_FRAMES, say=print) -> dict:  # fmt: skip
    """Every chosen person of `run` scaled and solved into `out` (default RUN/kinematics); the summary."""
    opensim, folder = need_opensim(), setup_dir()
    out = out or run / "kinematics"
    found = people_in_metres(run)
    several = len({t.label for t in found}) > 1
    summary: dict = {
        "run": str(run),
        "model": model,
        "mass_kg": mass,
        "height_m": height,
        "scale_frames": scale_frames,
        "people": {},
    }
    first, last = -np.inf if start is None else start, np.inf if end is None else end
    try:
        for track in found:
            if tracks is not None and track.track_id not in tracks:
                continue
            keep = (track.times >= first) & (track.times <= last)
            track = Track(track.label, track.track_id, track.times[keep], track.keypoints[keep],
                          track.confidence[keep])  # fmt: skip
            where = out / track.label if several else out
            name = f"{track.label} person {track.track_id}" if several else f"person {track.track_id}"
            try:
                done = solve_track(opensim, folder, track, where, model, mass, scale_frames)
            except TooShort as e:
                say(f"{name}: not scaled, skipped: {e}")
                summary["people"][name] = {"frames": len(track.times), "skipped": str(e)}
                continue
            summary["people"][name] = done
            say(f"{name}: {done['solved']} of {done['frames']} frames solved, markers {done['marker_rms_m']} m RMS")
    except KeyboardInterrupt:
        summary["interrupted"] = True  # the people done are whole and listed; the one under way is not written
        raise
    finally:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
