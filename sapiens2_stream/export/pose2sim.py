"""`sapiens2-stream export pose2sim RUN_DIR... --output PROJECT`: the runs of one take's cameras as a Pose2Sim
project, synchronised, ready for Pose2Sim's triangulation, filtering and OpenSim kinematics.

PROJECT/pose/<cam>_json/<cam>_{frame:06d}.json   OpenPose's format; frames from 0 without gaps, frame 0 the same
                                                 instant in every camera; one `people` slot per track (sorted by
                                                 track id), zeros where that person is absent; scores in [0, 1]
PROJECT/Config.toml                              skeleton, frame rate, single or multi-person filled in
PROJECT/calibration/Calib.toml                   with --calibration: the cameras in the order Pose2Sim pairs them
                                                 with the pose folders (by the last number in the folder name),
                                                 points undistorted here and the distortions written as zeros
PROJECT/sync.json                                each camera's offset, how it was found, and a confidence

Cameras are named after their run folders. The keypoints are the raw decoded ones (Pose2Sim filters after
triangulating); each camera is sampled at the common frame times from its own timestamps (variable frame rates
allowed), exactly where a frame falls on the time and linearly between the two frames around it otherwise.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import Sapiens2StreamError
from ..io.records import RecordedFrame, read_frames
from ..io.soundtracks import sound_offsets, soundtrack
from ..threed.calibration import Camera, cameras_named, write_calibration
from ..threed.motion_sync import BODY, Offset, Track2D, motion_offsets, run_tracks
from .skeletons import SKELETONS, Layout, layout

STALE = ("pose", "pose-sync", "pose-associated")  # what Pose2Sim would read instead of a fresh pose/


@dataclass
class CameraRun:
    """One camera's run: its records (frame, pts, people) and where its sound is."""

    name: str
    folder: Path
    records: list[RecordedFrame]

    @property
    def times(self) -> np.ndarray:
        return np.array([r.pts for r in self.records], np.float64)

    def track_ids(self) -> list[int]:
        return sorted(self.tracks)

    def track(self, track_id: int) -> Track2D:
        """The track's 308 keypoints over the run's frames (scores 0 where it is absent)."""
        return self.tracks[track_id]

    @cached_property
    def tracks(self) -> dict[int, Track2D]:
        return run_tracks(self.records)

    def main_person(self) -> Track2D:
        """Per frame, the person with the largest box: what synchronisation follows."""
        n = len(self.records)
        points, scores = np.zeros((n, len(BODY), 2)), np.zeros((n, len(BODY)))
        for i, r in enumerate(self.records):
            people = [p for p in r.people if p.keypoints is not None]
            if people:
                p = max(people, key=lambda q: q.box[2] * q.box[3])
                points[i], scores[i] = p.keypoints[list(BODY)], p.keypoint_scores[list(BODY)]
        return Track2D(self.times, points, scores)

    def sound(self):
        """The camera's soundtrack: from its annotated video (audio copied there) or its source file."""
        candidates = [self.folder / "annotated.mp4", Path(self.records[0].source)]
        for path in candidates:
            if path.is_file() and (sound := soundtrack(path)) is not None:
                return sound
        return None


def read_run(folder: str | Path) -> CameraRun:
    folder = Path(folder)
    jsonl = folder / "results.jsonl"
    if not jsonl.is_file():
        raise Sapiens2StreamError(f"{folder}: no results.jsonl (give the output folder of a run, one per camera)")
    records = read_frames(jsonl)
    if len(records) < 2:
        raise Sapiens2StreamError(f"{jsonl}: fewer than two frames")
    if not any(p.keypoints is not None for r in records for p in r.people):
        raise Sapiens2StreamError(f"{jsonl}: no keypoints (was the pose model on?)")
    return CameraRun(folder.resolve().name, folder, records)


def pose2sim_order(names: list[str]) -> list[str]:
    """The order Pose2Sim gives the <cam>_json folders (by the last number in the name; names without one last,
    alphabetically), which is the order it pairs them with the calibration's cameras."""

    def key(name: str):
        numbers = re.findall(r"\d+", f"{name}_json")
        return (False, int(numbers[-1]), "") if numbers else (True, 0, name)

    return sorted(names, key=key)


def synchronise(runs: list[CameraRun], method: str, cameras: dict[str, Camera] | None) -> dict[str, Offset]:
    """Each camera's offset against the first; `auto`: the soundtracks when every camera has a clear one."""
    step = float(np.median(np.diff(runs[0].times)))
    if method == "none":
        return {run.name: Offset(0.0, 0, 1.0, "none") for run in runs}
    if method in ("audio", "auto"):
        try:
            offsets = sound_offsets({run.name: run.sound() for run in runs}, step, method)
        except ValueError as e:
            raise Sapiens2StreamError(f"--sync audio: {e}; use --sync motion") from None
        if offsets:
            return offsets
    tracks = {run.name: run.main_person() for run in runs}
    if cameras is not None:  # the calibration's epipolar geometry holds for undistorted points
        for name, track in tracks.items():
            track.points = cameras[name].undistort(track.points.reshape(-1, 2)).reshape(track.points.shape)
    return motion_offsets(tracks, cameras)


def openpose_frame(people: np.ndarray) -> dict:
    """OpenPose's JSON for one frame: people [P, n, 3]."""
    empty: list = []
    return {"version": 1.3, "people": [
        {"person_id": [-1], "pose_keypoints_2d": [round(float(v), 3) for v in person.ravel()],
         "face_keypoints_2d": empty, "hand_left_keypoints_2d": empty, "hand_right_keypoints_2d": empty,
         "pose_keypoints_3d": empty, "face_keypoints_3d": empty, "hand_left_keypoints_3d": empty,
         "hand_right_keypoints_3d": empty}
        for person in people
    ]}  # fmt: skip


def camera_frames(run: CameraRun, times: np.ndarray, shape: Layout, camera: Camera | None) -> np.ndarray:
    """[K, P, n, 3]: every track of the camera at the common frame times, in the skeleton's layout."""
    ids = run.track_ids()
    out = np.zeros((len(times), len(ids), len(shape), 3))
    for slot, track_id in enumerate(ids):
        frames = shape.apply(*run.track(track_id).at(times))
        if camera is not None and camera.distorted:
            xy = camera.undistort(frames[..., :2].reshape(-1, 2)).reshape(frames.shape[:-1] + (2,))
            frames[..., :2] = np.where(frames[..., 2:] > 0, xy, 0.0)
        out[:, slot] = frames
    return out


def export_pose2sim(
    run_dirs: list[str | Path], output: str | Path, skeleton: str = "HALPE_26", calibration: str | Path | None = None,
    sync: str = "auto", fps: float | None = None,
) -> dict:  # fmt: skip
    """Write the Pose2Sim project; returns what sync.json holds (offsets, frames, cameras)."""
    if skeleton not in SKELETONS:
        raise Sapiens2StreamError(f"--skeleton {skeleton}: use one of {', '.join(SKELETONS)}")
    runs = [read_run(d) for d in run_dirs]
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise Sapiens2StreamError(f"camera names repeat ({', '.join(names)}): each run folder names its camera")
    cameras = None
    if calibration is not None:
        cameras = cameras_named(calibration, names, "--calibration", "; name the run folders after the cameras")
    offsets = synchronise(runs, sync, cameras)
    rate = fps or 1 / float(np.median(np.diff(runs[0].times)))
    start = max(run.times[0] + offsets[run.name].offset_s for run in runs)  # in the reference's clock
    end = min(run.times[-1] + offsets[run.name].offset_s for run in runs)
    count = int(np.floor((end - start) * rate + 1e-6)) + 1
    if count < 2:
        raise Sapiens2StreamError("the cameras' recordings do not overlap in time once synchronised")
    common = start + np.arange(count) / rate

    project = Path(output)
    for stale in STALE:
        shutil.rmtree(project / stale, ignore_errors=True)
    shape = layout(skeleton)
    slots = {}
    for run in runs:
        frames = camera_frames(run, common - offsets[run.name].offset_s, shape, cameras and cameras[run.name])
        folder = project / "pose" / f"{run.name}_json"
        folder.mkdir(parents=True, exist_ok=True)
        for k, people in enumerate(frames):
            (folder / f"{run.name}_{k:06d}.json").write_text(json.dumps(openpose_frame(people)))
        slots[run.name] = frames.shape[1]
    if cameras is not None:
        write_calibration(project / "calibration" / "Calib.toml",
                          [cameras[n].undistorted() for n in pose2sim_order(names)])  # fmt: skip
    multi = max(slots.values()) > 1
    (project / "Config.toml").write_text(config_toml(skeleton, rate, multi))
    report = {
        "reference": names[0], "frames": count, "frame_rate": rate, "skeleton": skeleton, "multi_person": multi,
        "start_s": round(start, 6), "cameras": {n: {**offsets[n].as_dict(), "people": slots[n]} for n in names},
        "calibration_order": pose2sim_order(names) if cameras is not None else None,
    }  # fmt: skip
    (project / "sync.json").write_text(json.dumps(report, indent=2))
    return report


def config_toml(skeleton: str, rate: float, multi_person: bool) -> str:
    """Pose2Sim's Config.toml for an exported project: our skeleton, frame rate and people; sync and pose
    estimation already done (their steps are off); the rest Pose2Sim's usual values."""
    return f"""# Written by sapiens2-stream export pose2sim. Run Pose2Sim's triangulation, filtering,
# markerAugmentation and kinematics on this project; not its poseEstimation or synchronization (done:
# see sync.json).
[project]
project_dir = '.'
multi_person = {str(multi_person).lower()}
participant_height = 'auto'
participant_mass = 70.0
frame_rate = {rate:.6g}
frame_range = 'all'
exclude_from_batch = []

[pose]
pose_model = '{skeleton}'
overwrite_pose = false
output_format = 'openpose'

[synchronization]
synchronization_gui = false
display_sync_plots = false
save_sync_plots = false
keypoints_to_consider = 'all'
approx_time_maxspeed = 'auto'
time_range_around_maxspeed = 2.0
likelihood_threshold_synchronization = 0.4
filter_cutoff = 6
filter_order = 4

[personAssociation]
   [personAssociation.single_person]
   likelihood_threshold_association = 0.3
   reproj_error_threshold_association = 20
   tracked_keypoint = 'Neck'
   [personAssociation.multi_person]
   reconstruction_error_threshold = 0.1
   min_affinity = 0.2

[triangulation]
reproj_error_threshold_triangulation = 15
likelihood_threshold_triangulation = 0.3
min_cameras_for_triangulation = 2
interp_if_gap_smaller_than = 20
interpolation = 'linear'
remove_incomplete_frames = false
sections_to_keep = 'all'
min_chunk_size = 10
fill_large_gaps_with = 'last_value'
show_interp_indices = false
handle_LR_swap = false
undistort_points = false
make_c3d = false

[filtering]
reject_outliers = false
filter = true
type = 'butterworth'
display_figures = false
save_filt_plots = false
make_c3d = false
   [filtering.butterworth]
   cut_off_frequency = 6
   order = 4

[markerAugmentation]
feet_on_floor = false
make_c3d = false

[kinematics]
use_augmentation = false
use_simple_model = false
right_left_symmetry = true
default_height = 1.7
remove_individual_scaling_setup = true
remove_individual_ik_setup = true

[logging]
use_custom_logging = false
"""
