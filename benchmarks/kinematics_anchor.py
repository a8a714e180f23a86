"""Our OpenSim scaling and IK against Pose2Sim's own, on synthetic people whose joint angles are known (issue 60's
anchor), and how far apart the two are once noise is drawn again and again:

    python -m benchmarks.kinematics_anchor [--draws 20] [--json benchmarks/results/kinematics_anchor.json]

A body posed by known coordinates (`humans.kinematics`) walks while turning, turns on the spot, squats, raises the
arms to the front, raises them overhead with the hands going behind the head, rises on tiptoe, does jumping jacks
and swings as in golf (`MOTIONS`); its 308 keypoints are written as a camera group's moments, exact and with 1 cm
of noise. Ours: `sapiens2-stream kinematics` on that run. Pose2Sim's: its own `perform_scaling` and `perform_IK`
(the COCO-133 setups, the simple model) on the markers TRC ours saw. Each coordinate the motion moves is compared
with the truth after its constant offset (a model's zero is not the geometric one), RMS degrees; each tool's time
per person-frame (scaling, IK and files, in this process).

With 1 cm of noise on every keypoint the two differ by a few hundredths of a degree either way, from one draw of
the noise to the next. So the walking clip is run `--draws` times, each with noise of its own: per coordinate, the
mean of (ours - Pose2Sim's), its standard error, and the draws in which ours was the nearer (or as near).
`tests/test_kinematics.py` runs one draw of each case.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.real_mocap import read_mot
from sapiens2_stream.cli import main as cli_main
from sapiens2_stream.humans.kinematics import body_points, keypoints_308
from sapiens2_stream.kinematics.opensim_files import setup_dir

FPS = 30
OPENSIM_NAMES = {"lumbar_extension": "L5_S1_Flex_Ext", "lumbar_bending": "L5_S1_Lat_Bending",
                 "lumbar_rotation": "L5_S1_axial_rotation"}  # fmt: skip
Motion = Callable[[float], tuple[dict, float]]


def walking(t: float) -> tuple[dict, float]:
    """Walking on the spot as it turns (a quarter turn over the clip), arms swinging: (coordinates, yaw)."""
    s = np.sin(2 * np.pi * t / 1.2)
    return {"knee_angle_r": 10 + 25 * (1 - np.cos(2 * np.pi * t / 1.2)), "hip_flexion_r": 20 * s,
            "knee_angle_l": 10 + 25 * (1 + np.cos(2 * np.pi * t / 1.2)), "hip_flexion_l": -20 * s,
            "arm_flex_r": -15 * s, "arm_flex_l": 15 * s, "elbow_flex_r": 20, "elbow_flex_l": 20}, 22.5 * t  # fmt: skip


def squatting(t: float) -> tuple[dict, float]:
    """Stands for a second, then squats and rises twice."""
    d = 0.5 * (1 - np.cos(2 * np.pi * max(t - 1, 0) / 1.5))
    return {"knee_angle_r": 95 * d, "knee_angle_l": 95 * d, "hip_flexion_r": 80 * d, "hip_flexion_l": 80 * d,
            "ankle_angle_r": 20 * d, "ankle_angle_l": 20 * d, "lumbar_extension": -20 * d}, 0.0  # fmt: skip


def arms_up(t: float) -> tuple[dict, float]:
    """Raises both arms to the front and bends the elbows."""
    d = 0.5 * (1 - np.cos(2 * np.pi * t / 2))
    return {"arm_flex_r": 120 * d, "arm_flex_l": 100 * d, "elbow_flex_r": 10 + 60 * d, "elbow_flex_l": 10 + 80 * d,
            "arm_add_r": -10 * d}, 0.0  # fmt: skip


def tiptoe(t: float) -> tuple[dict, float]:
    """Rises on tiptoe and back down, twice."""
    d = 0.5 * (1 - np.cos(2 * np.pi * t / 1.5))
    return {"ankle_angle_r": -30 * d, "ankle_angle_l": -30 * d}, 0.0


def turning(t: float) -> tuple[dict, float]:
    """Turns half round on the spot, stepping (knees and hips bending in turn), arms hanging."""
    s = np.sin(2 * np.pi * t / 1.0)
    yaw = 90 * (1 - np.cos(np.pi * t / 4))
    return {"knee_angle_r": 15 + 15 * s, "knee_angle_l": 15 - 15 * s, "hip_flexion_r": 10 + 10 * s,
            "hip_flexion_l": 10 - 10 * s, "elbow_flex_r": 15, "elbow_flex_l": 15}, yaw  # fmt: skip


def arms_overhead(t: float) -> tuple[dict, float]:
    """Raises both arms overhead to 170 degrees and lowers them, twice; the elbows bend as the hands pass the head,
    to 110 degrees (the hands behind it). Straight elbows on the way up let the solve from the last pose turn the
    upper arms about themselves unseen, into a wrong basin, before issue 71 (`kinematics.starts`)."""
    d = 0.5 * (1 - np.cos(2 * np.pi * t / 2))
    return {"arm_flex_r": 170 * d, "arm_flex_l": 170 * d, "elbow_flex_r": 110 * d**3,
            "elbow_flex_l": 110 * d**3}, 0.0  # fmt: skip


def jumping_jack(t: float) -> tuple[dict, float]:
    """Jumping jacks: the arms swing up sideways to 150 degrees as the legs spread, twice."""
    d = 0.5 * (1 - np.cos(2 * np.pi * t / 2))
    return {"arm_add_r": -150 * d, "arm_add_l": -150 * d, "elbow_flex_r": 10, "elbow_flex_l": 10,
            "hip_adduction_r": -15 * d, "hip_adduction_l": -15 * d, "knee_angle_r": 10 + 10 * d,
            "knee_angle_l": 10 + 10 * d}, 0.0  # fmt: skip


def golf_swing(t: float) -> tuple[dict, float]:
    """A golf-like swing, twice: knees and hips bent at address, the trunk turning 45 degrees either way with both
    arms across the body, the elbows bending at the top."""
    s = np.sin(2 * np.pi * t / 2)
    return {"knee_angle_r": 20, "knee_angle_l": 20, "hip_flexion_r": 25, "hip_flexion_l": 25,
            "lumbar_rotation": 45 * s, "arm_flex_r": 60 + 20 * s, "arm_flex_l": 60 - 20 * s,
            "arm_add_r": 25 + 15 * s, "arm_add_l": 25 - 15 * s, "elbow_flex_r": 15 + 35 * max(s, 0),
            "elbow_flex_l": 15 + 35 * max(-s, 0)}, 0.0  # fmt: skip


MOTIONS: dict[str, Motion] = {"walking": walking, "turning": turning, "squatting": squatting, "arms_up": arms_up,
                              "arms_overhead": arms_overhead, "tiptoe": tiptoe, "jumping_jack": jumping_jack,
                              "golf_swing": golf_swing}  # fmt: skip


def write_run(run: Path, motion: Motion, seconds: float = 4.0, noise_m: float = 0.0, seed: int = 7) -> list[dict]:
    """A camera group's moments (world frame, Z up) of one body moving as `motion` says, with `noise_m` of noise
    drawn from `seed` on every keypoint; the true coordinates."""
    rng = np.random.default_rng(seed)
    truth, lines = [], []
    for i in range(int(seconds * FPS)):
        q, yaw = motion(i / FPS)
        truth.append(q)
        keypoints, confidence = keypoints_308(body_points(q, yaw=yaw))
        world = keypoints[:, [2, 0, 1]] + rng.normal(0, noise_m, keypoints.shape)  # OpenSim's Y up -> Z up
        lines.append({"time": round(i / FPS, 6), "views": ["cam1", "cam2"], "people": [{
            "id": 1, "confidence": confidence.round(4).tolist(),
            "keypoints_3d": [None if not np.isfinite(p).all() else p.round(5).tolist() for p in world]}]})  # fmt: skip
    (run / "3d").mkdir(parents=True)
    (run / "3d" / "keypoints_3d.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return truth


def cli(*args) -> tuple[int, str]:
    """`sapiens2-stream ARGS` in this process: (exit code, what it said on stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main([*map(str, args)])
    return code, err.getvalue()


def pose2sim_ik(trc: Path, out: Path) -> dict[str, np.ndarray]:
    """Pose2Sim's own scaling and IK of the TRC (its COCO-133 setups, the simple model)."""
    from Pose2Sim.kinematics import perform_IK, perform_scaling

    out.mkdir()
    (out / "person.trc").write_bytes(trc.read_bytes())
    level = logging.getLogger().level
    try:
        perform_scaling(out / "person.trc", "COCO_133", out, setup_dir(), use_simple_model=True, subject_mass=70)
        perform_IK(out / "person.trc", out, setup_dir(), "COCO_133")
    finally:
        logging.getLogger().setLevel(level)  # Pose2Sim sets the root logger's level
    return read_mot(out / "person.mot")[1]


def off_truth(values: np.ndarray, truth: np.ndarray) -> float:
    """RMS distance from the truth after the constant offset (a model's zero is not the geometric one)."""
    d = values - truth
    return float(np.sqrt(np.nanmean((d - np.nanmean(d)) ** 2)))


@dataclass
class Comparison:
    """Ours and Pose2Sim's on one clip: each coordinate the motion moves (by 5 degrees or more) -> (ours,
    Pose2Sim's) RMS degrees from the truth after the offset; each tool's seconds for the clip (scaling, IK and
    files: ours `sapiens2-stream kinematics` in this process, Pose2Sim's `perform_scaling` and `perform_IK`), the
    frames, and ours' frames doubted and fresh starts kept (`kinematics.fit.TrackIK`)."""

    report: dict[str, tuple[float, float]]
    ours_s: float
    theirs_s: float
    frames: int
    doubtful: int
    fresh_kept: dict[str, int]


def compare(folder: Path, motion: Motion, noise_m: float = 0.0, seed: int = 7, ours: tuple = ()) -> Comparison:
    """Ours (`sapiens2-stream kinematics`, with the options `ours`) and Pose2Sim's on one clip, in `folder`.
    Raises if ours fails."""
    run = folder / "run"
    truth = write_run(run, motion, noise_m=noise_m, seed=seed)
    started = time.perf_counter()
    code, said = cli("kinematics", run, "--mass", "72", *ours)
    ours_s = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(said)
    solved = read_mot(run / "kinematics" / "person_0001_ik.mot")[1]
    started = time.perf_counter()
    theirs = pose2sim_ik(run / "kinematics" / "person_0001_markers.trc", folder / "pose2sim")
    theirs_s = time.perf_counter() - started
    report = {}
    for name in sorted({n for q in truth for n, v in q.items() if abs(v) > 1e-9}):
        true = np.array([q.get(name, 0.0) for q in truth])
        column = OPENSIM_NAMES.get(name, name)
        if np.ptp(true) >= 5:
            report[column] = (off_truth(solved[column], true), off_truth(theirs[column], true))
    person = json.loads((run / "kinematics" / "summary.json").read_text())["people"]["person 1"]
    return Comparison(report, ours_s, theirs_s, len(truth), person["doubtful_frames"], person["fresh_start_kept"])


def in_scratch(fn: Callable[[Path], Comparison]) -> Comparison:
    """`fn(folder)` in a scratch folder that is also the working directory (OpenSim writes beside the user)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            return fn(Path(scratch))
        finally:
            os.chdir(here)


def noise_draws(draws: int, noise_m: float = 0.01, ours: tuple = ()) -> dict[str, dict]:
    """The walking clip with `draws` draws of the noise: per coordinate, ours - Pose2Sim's (mean, standard error,
    draws where ours was as near or nearer)."""
    differences: dict[str, list[float]] = {}
    for seed in range(draws):
        report = in_scratch(lambda folder, seed=seed: compare(folder, walking, noise_m, seed, ours)).report
        for name, (mine, theirs) in report.items():
            differences.setdefault(name, []).append(mine - theirs)
        print(f"draw {seed + 1}/{draws}", flush=True)
    return {name: {"mean_deg": round(float(np.mean(d)), 4),
                   "standard_error_deg": round(float(np.std(d, ddof=1) / np.sqrt(len(d))), 4),
                   "ours_nearer_or_as_near": int(np.sum(np.array(d) <= 0)), "draws": len(d),
                   "largest_either_way_deg": [round(float(min(d)), 3), round(float(max(d)), 3)]}
            for name, d in differences.items()}  # fmt: skip


def motions(noise_m: float, ours: tuple) -> dict[str, dict]:
    """Every motion once with `noise_m` of noise: per coordinate [ours, Pose2Sim's] RMS degrees from the truth,
    both tools' milliseconds per person-frame (scaling, IK and files), and ours' doubtful frames."""
    out = {}
    for name, motion in MOTIONS.items():
        c = in_scratch(lambda folder, m=motion: compare(folder, m, noise_m, ours=ours))
        degrees = {k: [round(a, 2), round(b, 2)] for k, (a, b) in c.report.items()}
        out[name] = {"deg_rms_from_truth_ours_pose2sims": degrees,
                     "ms_per_person_frame_ours_pose2sims": [round(1000 * c.ours_s / c.frames, 1),
                                                            round(1000 * c.theirs_s / c.frames, 1)],
                     "doubtful_frames": c.doubtful, "fresh_start_kept": c.fresh_kept, "frames": c.frames}  # fmt: skip
        print(f"{name} ({noise_m * 100:g} cm noise): {out[name]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20, help="draws of the 1 cm noise on the walking clip")
    parser.add_argument("--scale-frames", type=int, help="ours scales from this many frames (default: the command's)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    ours = () if args.scale_frames is None else ("--scale-frames", args.scale_frames)
    report = {
        "exact": motions(0.0, ours),
        "noise_1cm": motions(0.01, ours),
        "walking_1cm_noise_ours_minus_pose2sims": noise_draws(args.draws, ours=ours),
        "ours_scale_frames": args.scale_frames or "the command's default",
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
