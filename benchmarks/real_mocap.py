"""Real footage to OpenSim, ours against Pose2Sim's on the same 2-D keypoints (issue 60's proof on real video):

    python -m benchmarks.real_mocap [--json benchmarks/results/real_mocap.json] [--figure docs/images/real_mocap.png]

The footage is Pose2Sim's own demo in its wheel (`Demo_SinglePerson`: four real cameras, 60 frames/s, 1088x1920,
one person, calibrated by a Qualisys system in `calibration/Calib.qca.txt`). Nothing of it is copied anywhere but
this machine's cache (`~/.cache/sapiens2-stream/real_mocap/`), and nothing of it is committed.

1. The teacher: MediaPipe's BlazePose in video mode on each camera's whole frames (`benchmarks/mediapipe_teacher.py
   whole`, in its own virtual environment), its 33 landmarks put on the 308 by the research table
   (`shared/research/bp33_to_sapiens308.json`: the points graded the same or approximately the same), written as
   each camera's run (`results.jsonl`, what `sapiens2-stream run` writes).
2. The calibration: Pose2Sim's own conversion of the Qualisys file (`calib_qca_fun`), used by both sides.
3. Ours: the runs triangulated by the `triangulate` stage's own state (`LiveMocap`, as a run with `threed:` does)
   into `3d/keypoints_3d.jsonl`, then `sapiens2-stream kinematics` on it (the simple model).
4. Pose2Sim's: `sapiens2-stream export pose2sim` of the same runs (COCO_133, Pose2Sim's whole-body layout, the one
   our markers use), then Pose2Sim's own `triangulation()` and `kinematics()` (no filtering or augmentation, the
   simple model), in a process of its own.
5. Compared: the triangulated markers (distance, mm) and each OpenSim coordinate frame by frame (RMS difference,
   the same after a constant offset, correlation); the time each IK takes per person-frame (ours offline, ours
   live frame by frame as the `group_kinematics` stage solves, Pose2Sim's); and `calibrate people` on the same
   keypoints against the Qualisys calibration (each camera's rotation and centre, after the similarity transform
   that best maps one set of centres on the other: the people calibration has its own world and scale).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.real_footage import CACHE, cached, in_teacher_venv, mediapipe_python, say

WORK = CACHE / "real_mocap"
RESEARCH_TABLE = Path(__file__).resolve().parents[2] / "shared" / "research" / "bp33_to_sapiens308.json"
CAMERAS = ("cam01", "cam02", "cam03", "cam04")
FPS = 60.0
CLI = str(Path(sys.executable).with_name("sapiens2-stream"))
HEIGHT_M = 1.7  # only the people calibration's scale, which the comparison takes out (similarity transform)
SHOWN = ("hip_flexion_r", "knee_angle_r", "ankle_angle_r", "arm_flex_r", "elbow_flex_r", "pelvis_tilt")


def demo_folder() -> Path:
    import Pose2Sim

    return Path(Pose2Sim.__file__).parent / "Demo_SinglePerson"


def bp33_to_308() -> dict[int, int]:
    """BlazePose index -> the 308's index, for the pairs the research table grades the same or approximately so."""
    pairs = json.loads(RESEARCH_TABLE.read_text())["pairs"]
    return {p["bp_index"]: p["sapiens_index"] for p in pairs if p["grade"] in ("same", "approx")}


def teacher(demo: Path) -> dict:
    python = mediapipe_python()
    timings = {}
    for cam in CAMERAS:
        video = demo / "videos" / f"{cam}.mp4"
        out = WORK / "teacher" / f"{cam}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        timings[cam] = cached(out, lambda path, video=video: in_teacher_venv(python, "whole", str(video), str(path)))
    return timings


def write_runs() -> list[Path]:
    """Each camera's teacher lines as the run `sapiens2-stream run` would have written: results.jsonl."""
    table = bp33_to_308()
    folders = []
    for cam in CAMERAS:
        lines = [json.loads(line) for line in (WORK / "teacher" / f"{cam}.jsonl").read_text().splitlines()]
        records = []
        for line in lines:
            people = []
            if line["landmarks"] is not None:
                landmarks = np.array(line["landmarks"])
                keypoints, scores = np.zeros((308, 2)), np.zeros(308)
                for bp, index in table.items():
                    keypoints[index], scores[index] = landmarks[bp, :2], landmarks[bp, 2]
                seen = landmarks[landmarks[:, 2] > 0.5, :2]
                lo, hi = seen.min(0), seen.max(0)
                people.append({"track_id": 1, "box": [*lo.round(1), *(hi - lo).round(1)], "score": 0.9,
                               "keypoints": keypoints.round(2).tolist(),
                               "keypoint_scores": scores.round(4).tolist()})  # fmt: skip
            records.append({"source": f"{cam}.mp4", "frame": line["frame"], "pts": round(line["frame"] / FPS, 6),
                            "people": people})  # fmt: skip
        folder = WORK / "runs" / cam
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        folders.append(folder)
    return folders


def qualisys_calibration(demo: Path) -> Path:
    """Pose2Sim's own conversion of the Qualisys file to its Calib.toml."""
    from Pose2Sim.calibration import calib_qca_fun, toml_write

    path = WORK / "Calib_qualisys.toml"
    _, names, sizes, distortions, matrices, rotations, translations = calib_qca_fun(
        str(demo / "calibration" / "Calib.qca.txt"))  # fmt: skip
    toml_write(str(path), names, sizes, distortions, matrices, rotations, translations)
    return path


def ours(runs: list[Path], calibration: Path) -> dict:
    """The runs triangulated as the triangulate stage does, then `sapiens2-stream kinematics`."""
    from sapiens2_stream.io.options import SourceConfig
    from sapiens2_stream.io.records import read_frames
    from sapiens2_stream.kinematics.run import kinematics
    from sapiens2_stream.runtime.live_mocap import LiveMocap
    from sapiens2_stream.threed.options import ThreeDConfig

    out = WORK / "ours"
    (out / "3d").mkdir(parents=True, exist_ok=True)
    moments: list[dict] = []
    sources = [SourceConfig(name=run.name, uri=str(run / "video.mp4")) for run in runs]
    mocap = LiveMocap(ThreeDConfig(calibration=str(calibration), sync="none"), sources, list(CAMERAS),
                      dict.fromkeys(CAMERAS, FPS), lambda moment: moments.append(moment.record))  # fmt: skip
    started = time.perf_counter()
    for run in runs:
        for record in read_frames(run / "results.jsonl"):
            people = [p for p in record.people if p.keypoints is not None]
            keypoints = np.array([p.keypoints for p in people]).reshape(-1, 308, 2)
            scores = np.array([p.keypoint_scores for p in people]).reshape(-1, 308)
            mocap.add(run.name, record.pts, keypoints, scores, arrived=0.0)
    mocap.flush()
    triangulate_s = time.perf_counter() - started
    (out / "3d" / "keypoints_3d.jsonl").write_text("".join(json.dumps(m) + "\n" for m in moments))
    started = time.perf_counter()
    summary = kinematics(out, out / "kinematics", say=say)
    return {"moments": len(moments), "triangulate_s": triangulate_s, "ik_s": time.perf_counter() - started,
            "summary": summary}  # fmt: skip


def pose2sims(runs: list[Path], calibration: Path) -> dict:
    """Pose2Sim's triangulation and kinematics on the same runs, exported by `sapiens2-stream export pose2sim`."""
    project = WORK / "pose2sim"
    cli = [CLI, "export", "pose2sim", *map(str, runs), "--output",
           str(project), "--skeleton", "COCO_133", "--calibration", str(calibration), "--sync", "none"]  # fmt: skip
    subprocess.run(cli, check=True, capture_output=True)
    config = project / "Config.toml"
    config.write_text(config.read_text().replace("use_simple_model = false", "use_simple_model = true"))
    env = {**os.environ, "MPLBACKEND": "Agg", "QT_QPA_PLATFORM": "offscreen"}
    seconds = {}
    for step in ("triangulation", "kinematics"):
        code = f"from Pose2Sim import Pose2Sim; Pose2Sim.{step}()"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, env=env)
        seconds[step] = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"Pose2Sim.{step}() failed:\n{done.stderr[-3000:]}")
        if step == "triangulation":
            unseen = never_seen_left_out(next((project / "pose-3d").glob("*.trc")))
    return {"project": project, "seconds": seconds, "never_seen_markers": unseen}


def never_seen_left_out(trc: Path) -> list[str]:
    """Pose2Sim's triangulation puts a marker no camera ever saw at the world's origin (0, 0, 0 on every frame: the
    teacher has no fingers, small toes or most face points), and its IK would pull the body towards it. Those
    columns are emptied, so OpenSim leaves them out, as ours leaves out unsure markers. The names."""
    lines = trc.read_text().splitlines()
    names = [m for m in lines[3].split("\t")[2::3] if m.strip()]
    rows = [line.split("\t") for line in lines[5:] if line.strip()]
    zero = [i for i in range(len(names)) if all(float(r[2 + 3 * i]) == 0 == float(r[3 + 3 * i]) for r in rows)]
    for r in rows:
        for i in zero:
            r[2 + 3 * i : 5 + 3 * i] = ["nan"] * 3
    trc.write_text("\n".join(lines[:5] + ["\t".join(r) for r in rows]) + "\n")
    return [names[i] for i in zero]


def read_mot(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    lines = path.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().lower() == "endheader")
    names = lines[head + 1].split("\t")
    rows = np.array([[float(v) for v in line.split("\t")] for line in lines[head + 2 :] if line.strip()])
    return rows[:, 0], {name: rows[:, i] for i, name in enumerate(names) if i}


def read_trc(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    lines = path.read_text().splitlines()
    names = [m for m in lines[3].split("\t")[2::3] if m.strip()]
    rows = np.array([[float(v) if v.strip() else np.nan for v in line.split("\t")[: 2 + 3 * len(names)]]
                     for line in lines[5:] if line.strip()])  # fmt: skip
    xyz = rows[:, 2:].reshape(len(rows), -1, 3)
    return rows[:, 1], {name: xyz[:, i] for i, name in enumerate(names)}


def same_frames(ours: np.ndarray, theirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the frames both have, matched by the nearest time within half a frame (Pose2Sim steps by
    0.016667 s, not 1/60)."""
    nearest = np.abs(ours[:, None] - theirs[None, :]).argmin(1)
    close = np.abs(theirs[nearest] - ours) < 0.5 / FPS
    return np.flatnonzero(close), nearest[close]


def compare_coordinates(ours_mot: Path, theirs_mot: Path, until_s: float = np.inf) -> dict:
    """Each coordinate both solved, on the frames both solved (before `until_s`): RMS difference (degrees; metres
    for translations), the same after taking out the mean difference, the correlation and each side's range."""
    t_ours, a = read_mot(ours_mot)
    t_theirs, b = read_mot(theirs_mot)
    pick_a, pick_b = same_frames(t_ours, t_theirs)
    keep = t_ours[pick_a] < until_s
    pick_a, pick_b = pick_a[keep], pick_b[keep]
    out = {}
    for name in a:
        if name not in b:
            continue
        x, y = a[name][pick_a], b[name][pick_b]
        both = np.isfinite(x) & np.isfinite(y)
        if both.sum() < 10 or np.std(y[both]) == 0:
            continue
        d = x[both] - y[both]
        out[name] = {"rms": round(float(np.sqrt(np.mean(d**2))), 3),
                     "rms_after_offset": round(float(np.std(d)), 3),
                     "correlation": round(float(np.corrcoef(x[both], y[both])[0, 1]), 4),
                     "range_ours": round(float(np.ptp(x[both])), 2),
                     "range_pose2sim": round(float(np.ptp(y[both])), 2)}  # fmt: skip
    return {"frames": int(len(pick_a)), "coordinates": out}


def compare_markers(ours_trc: Path, theirs_trc: Path) -> dict:
    """The markers both triangulated (ours as IK saw them, sure ones only): distance in mm per marker, median over
    frames, and over all."""
    t_ours, a = read_trc(ours_trc)
    t_theirs, b = read_trc(theirs_trc)
    pick_a, pick_b = same_frames(t_ours, t_theirs)
    per, every = {}, []
    for name in a:
        if name not in b:
            continue
        d = np.linalg.norm(a[name][pick_a] - b[name][pick_b], axis=1) * 1000
        d = d[np.isfinite(d)]
        if len(d):
            per[name] = round(float(np.median(d)), 1)
            every.extend(d)
    return {"median_mm": round(float(np.median(every)), 1), "p90_mm": round(float(np.percentile(every, 90)), 1),
            "per_marker_median_mm": per}  # fmt: skip


def live_ik_per_frame(out: Path) -> float:
    """Seconds per frame of the live stage's way (`TrackIK.frame`, one frame at a time from the last pose) on the
    scaled model our command made."""
    from sapiens2_stream.kinematics.fit import TrackIK
    from sapiens2_stream.kinematics.opensim_files import need_opensim, setup_dir
    from sapiens2_stream.kinematics.run import opensim_markers, people_in_metres

    (track,) = people_in_metres(out)
    ik = TrackIK(need_opensim(), setup_dir(), out / "kinematics" / "person_0001_scaled.osim")
    points, sure = opensim_markers(track.keypoints, track.confidence)
    started = time.perf_counter()
    for t, p, s in zip(track.times, points, sure, strict=True):
        ik.frame(t, p, s)
    return (time.perf_counter() - started) / len(track.times)


def people_calibration(runs: list[Path], calibration: Path) -> dict:
    """`calibrate people` on the same keypoints (the Qualisys intrinsics, the clocks as they are), against the
    Qualisys extrinsics: each camera's rotation and centre after the best similarity transform between the two
    worlds."""
    from sapiens2_stream.threed.calibration import read_calibration

    out = WORK / "Calib_people.toml"
    out.unlink(missing_ok=True)
    cameras = [f"--camera={run.name}={run}" for run in runs]
    cli = [CLI, "calibrate", "people", *cameras, "--intrinsics",
           str(calibration), "--height", str(HEIGHT_M), "--sync", "none", "--output", str(out)]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True)
    if done.returncode:
        return {"failed": (done.stderr or done.stdout).strip().splitlines()[-1]}
    truth, found = read_calibration(calibration), read_calibration(out)
    names = [n for n in CAMERAS if n in found]
    a = np.array([found[n].centre for n in names])
    b = np.array([truth[n].centre for n in names])
    scale, rotation, shift = similarity(a, b)
    out_cams = {}
    for n, centre in zip(names, a, strict=True):
        moved = scale * rotation @ centre + shift
        # a camera's world-to-camera rotation in the Qualisys world: R_people @ rotation.T
        r_found = cv2.Rodrigues(found[n].rotation)[0] @ rotation.T
        r_truth = cv2.Rodrigues(truth[n].rotation)[0]
        angle = np.degrees(np.arccos(np.clip((np.trace(r_found @ r_truth.T) - 1) / 2, -1, 1)))
        out_cams[n] = {"rotation_deg": round(float(angle), 2),
                       "centre_mm": round(float(np.linalg.norm(moved - truth[n].centre) * 1000), 1)}  # fmt: skip
    spread = np.linalg.norm(b - b.mean(0), axis=1).mean()
    return {"cameras": out_cams, "scale_to_qualisys": round(float(scale), 4),
            "camera_spread_mm": round(float(spread * 1000), 1)}  # fmt: skip


def similarity(a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Umeyama's s, R, t minimising |s R a + t - b|."""
    ma, mb = a.mean(0), b.mean(0)
    u, d, vt = np.linalg.svd((b - mb).T @ (a - ma) / len(a))
    fix = np.diag([1, 1, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ fix @ vt
    scale = np.trace(np.diag(d) @ fix) / ((a - ma) ** 2).sum(1).mean()
    return scale, rotation, mb - scale * rotation @ ma


def figure(ours_mot: Path, theirs_mot: Path, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_a, a = read_mot(ours_mot)
    t_b, b = read_mot(theirs_mot)
    fig, axes = plt.subplots(2, 3, figsize=(12, 6), sharex=True)
    for ax, name in zip(axes.ravel(), SHOWN, strict=True):
        ax.plot(t_b, b[name], color="#888", lw=2.5, label="Pose2Sim 0.10.49")
        ax.plot(t_a, a[name], color="#d33", lw=1.2, label="sapiens2-stream")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("degrees")
    for ax in axes[1]:
        ax.set_xlabel("seconds")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Pose2Sim's Demo_SinglePerson (4 real cameras), MediaPipe 2-D keypoints: OpenSim IK, ours and "
                 "Pose2Sim's", fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--figure", help="save the plot of six coordinates here")
    args = parser.parse_args()
    demo = demo_folder()
    WORK.mkdir(parents=True, exist_ok=True)
    say("1/5 the teacher on the four cameras")
    taught = teacher(demo)
    runs = write_runs()
    calibration = qualisys_calibration(demo)
    say("2/5 ours: triangulate and kinematics")
    mine = ours(runs, calibration)
    say("3/5 Pose2Sim: triangulation and kinematics")
    theirs = pose2sims(runs, calibration)
    ours_mot = WORK / "ours" / "kinematics" / "person_0001_ik.mot"
    (theirs_mot,) = (theirs["project"] / "kinematics").glob("*.mot")
    (theirs_trc,) = [p for p in (theirs["project"] / "pose-3d").glob("*.trc") if "_scaling" not in p.name]
    say("4/5 the live stage's way, frame by frame")
    live_s = live_ik_per_frame(WORK / "ours")
    say("5/5 calibrate people on the same keypoints")
    people = people_calibration(runs, calibration)
    frames = mine["moments"]
    person = mine["summary"]["people"]["person 1"]
    report = {
        "footage": "Pose2Sim 0.10.49 Demo_SinglePerson: cam01-04.mp4, 60 fps, 100 frames each; Qualisys calibration",
        "teacher": {"model": "MediaPipe 0.10.14 BlazePose Full, video mode, whole frames", "timings": taught},
        "ours": {
            "moments": frames,
            "solved": person["solved"],
            "marker_rms_m": person["marker_rms_m"],
            "scale_factors": person["scale_factors"],
        },
        "pose2sim_never_seen_markers_left_out": len(theirs["never_seen_markers"]),
        "markers_vs_pose2sim": compare_markers(WORK / "ours" / "kinematics" / "person_0001_markers.trc", theirs_trc),
        "coordinates_vs_pose2sim": compare_coordinates(ours_mot, theirs_mot),
        "coordinates_vs_pose2sim_first_second": compare_coordinates(ours_mot, theirs_mot, until_s=1.0),
        "ik_ms_per_person_frame": {
            "ours_offline": round(1000 * mine["ik_s"] / frames, 2),
            "ours_live": round(1000 * live_s, 2),
            "pose2sim_kinematics": round(1000 * theirs["seconds"]["kinematics"] / frames, 2),
            "note": "each whole step over the frames, scaling and files included; "
            "Pose2Sim's in a process of its own, its imports included; ours_live: "
            "TrackIK.frame alone",
        },  # fmt: skip
        "triangulate_ms_per_moment": {
            "ours": round(1000 * mine["triangulate_s"] / frames, 2),
            "pose2sim_step": round(1000 * theirs["seconds"]["triangulation"] / frames, 2),
        },
        "calibrate_people_vs_qualisys": people,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    if args.figure:
        figure(ours_mot, theirs_mot, args.figure)


if __name__ == "__main__":
    main()
