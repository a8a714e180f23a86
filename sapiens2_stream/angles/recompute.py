"""`sapiens2-stream angles RUN_FOLDER`: every angles output again from what a run wrote, with other settings, without
running a model: each source's results.jsonl (2-D keypoints, smoothed where the smoother ran, and the 3-D stage's
keypoints in metres with the floor from its world.json) and a camera group's 3d/keypoints_3d.jsonl (the calibration's
world, Z up). Each goes through the live code frame by frame (`TrackAngles`), so the values are the run's for the same
settings; the files hold the zero-lag filter's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config import DEFAULT_FPS
from ..errors import Sapiens2StreamError
from ..io.jsonl import source_folders
from ..io.records import RecordedFrame, RecordedMoment, read_frames, read_moments
from .files import write_track
from .options import AnglesConfig
from .tracks import Seen, TrackAngles


def fps_of(times: list[float]) -> float:
    """A series' frame rate from its timestamps (the median step)."""
    steps = np.diff(np.asarray(times, np.float64))
    steps = steps[steps > 0]
    return float(1 / np.median(steps)) if len(steps) else DEFAULT_FPS


def source_frames(records: list[RecordedFrame], up: np.ndarray | None):
    """(time, frame, people, up) per results.jsonl record: the floor's up that the run's angles stood on where it
    recorded them, else `up` (its world.json's)."""
    for r in records:
        ups = [p.fields["angles"]["up"] for p in r.people if "up" in (p.fields.get("angles") or {})]
        people = [Seen(p.track_id, p.best, None if p.best is None else p.keypoint_scores, p.keypoints_3d,
                       p.keypoints_3d_confidence) for p in r.people]  # fmt: skip
        yield r.pts, r.frame, people, (None if ups[0] is None else np.array(ups[0])) if ups else up


def moment_people(moment: RecordedMoment) -> list[Seen]:
    """A camera group's moment's people, as the angles read them."""
    return [Seen(p.id, keypoints_3d=p.keypoints_3d, confidence_3d=p.confidence) for p in moment.people]


def moment_frames(moments: list[RecordedMoment]):
    """(time, index, people, up) per camera-group moment (world frame, Z up)."""
    for i, m in enumerate(moments):
        yield m.time, i, moment_people(m), WORLD_UP


WORLD_UP = np.array([0.0, 0.0, 1.0])  # the 3-D stage's and a calibration's world: Z up, the floor at Z = 0


def camera_up(world_from_camera) -> np.ndarray | None:
    """The floor's up in the camera frame of a world-from-camera transform [4, 4] (None: no floor)."""
    return None if world_from_camera is None else np.asarray(world_from_camera)[:3, :3].T @ WORLD_UP


def world_up(folder: Path) -> np.ndarray | None:
    """The floor's up in the camera frame from a run's world.json (None without a floor)."""
    path = folder / "world.json"
    return camera_up(json.loads(path.read_text()).get("world_from_camera")) if path.exists() else None


def recompute(label: str, frames, times: list[float], cfg: AnglesConfig, out: Path) -> dict:
    """One source's (or group's) angles through the live code, written to `out`: angles.jsonl, events.jsonl, each
    track's .mot, CSV and plot, summary.json. Returns the summary."""
    angles = TrackAngles(cfg, fps_of(times))
    out.mkdir(parents=True, exist_ok=True)
    events_found = 0
    with open(out / "angles.jsonl", "w") as lines, open(out / "events.jsonl", "w") as events:
        for time_s, frame, people, up in frames:
            records, found = angles.frame(time_s, frame, people, up)
            people_out = [{"track_id": p.track_id, "angles": r} for p, r in zip(people, records, strict=True) if r]
            lines.write(json.dumps({"source": label, "frame": frame, "pts": time_s, "people": people_out}) + "\n")
            for e in found:
                events.write(json.dumps({**e, "source": label, "frame": frame}) + "\n")
            events_found += len(found)
    tracks = angles.all_tracks()
    files = sum(len(write_track(out, track_id, t.rows, cfg, angles.fps)) for track_id, t in sorted(tracks.items()))
    summary = {"source": label, "fps": round(angles.fps, 3), "tracks": angles.summary(), "files": files,
               "gait_events": events_found}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def recompute_run(run: Path, output: Path | None, cfg: AnglesConfig) -> list[dict]:
    """Every source of a run folder (results.jsonl there or in its sources' folders) and its camera group, if any.
    Each writes to its folder's `angles/` (under `output` instead, by source, when given)."""
    if not run.is_dir():
        raise Sapiens2StreamError(f"{run}: no such run folder")
    sources = source_folders(run)
    group = run / "3d" / "keypoints_3d.jsonl"
    if not sources and not group.exists():
        raise Sapiens2StreamError(f"{run}: no results.jsonl (nor 3d/keypoints_3d.jsonl) to compute angles from")
    done = []
    for folder in sources:
        label = folder.name if folder != run else run.name
        records = read_frames(folder / "results.jsonl")
        target = (output / folder.relative_to(run) if output else folder) / "angles"
        frames = source_frames(records, world_up(folder))
        done.append(recompute(label, frames, [r.pts for r in records], cfg, target))
    if group.exists():
        moments = read_moments(group)
        target = (output / "3d" if output else run / "3d") / "angles"
        done.append(recompute("3d", moment_frames(moments), [m.time for m in moments], cfg, target))
    return done
