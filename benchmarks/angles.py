"""Joint angles: the stage's cost per person-frame (2-D and 3-D together, with filters, bones and gait), against
Sports2D's own per-person code computing the 2-D angles alone on the same keypoints; and the 3-D angles' error
against a body whose joint angles are known, for exact keypoints and with 1 and 2 cm of noise.

Run: `python -m benchmarks.angles` (`--picture docs/angles.png` also draws the conventions picture of the docs).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import print_table
from sapiens2_stream.angles.anatomical import COLUMN, NAMES_3D, anatomical_angles
from sapiens2_stream.angles.options import AnglesConfig
from sapiens2_stream.angles.points import NAMES, named_points
from sapiens2_stream.angles.tracks import Seen, TrackAngles
from sapiens2_stream.humans.kinematics import body_points, keypoints_308
from tests.test_angles import RANGES, pose_in_camera, random_pose, side_view, sports2d, walker

FRAMES, PEOPLE = 300, 4


def people_frames() -> list[list[Seen]]:
    frames = []
    for i, (_, points) in enumerate(walker(FRAMES / 30)):
        flat, conf = side_view(points)
        kp, c = keypoints_308(points)
        frames.append([Seen(p, flat + 50 * p, conf, kp + [p, 0, 0], c) for p in range(PEOPLE)])
        if i + 1 == FRAMES:
            break
    return frames


def run() -> list[dict]:
    frames = people_frames()
    angles = TrackAngles(AnglesConfig(enabled=True), 30.0)
    start = time.perf_counter()
    for i, people in enumerate(frames):
        angles.frame(i / 30, i, people, np.array([0.0, 1.0, 0.0]))
    ours = (time.perf_counter() - start) / (len(frames) * PEOPLE)
    compute, table = sports2d()
    lr = [NAMES.index(n) for n in ("LBigToe", "LHeel", "RBigToe", "RHeel")]
    names = list(table)
    start = time.perf_counter()
    for people in frames:
        for p in people:
            named, _ = named_points(p.keypoints[None], p.scores[None])
            compute(named[0, :, 0], named[0, :, 1], "auto", True, list(range(len(NAMES))), list(NAMES), names, table,
                    lr)  # fmt: skip
    theirs = (time.perf_counter() - start) / (len(frames) * PEOPLE)
    return [dict(name="angles stage, 2-D + 3-D + gait, per person-frame", ours_s=ours,
                 baseline="Sports2D's 2-D angles alone", baseline_s=theirs,
                 note=f"{ours * 1e3:.3f} ms per person-frame")]  # fmt: skip


def errors(trials: int = 300) -> dict[str, dict[str, float]]:
    """Mean absolute error per 3-D angle (degrees) for exact keypoints and 1 and 2 cm of noise."""
    rng = np.random.default_rng(0)
    out: dict[str, dict[str, list]] = {f"{cm} cm": {n: [] for n in NAMES_3D} for cm in (0, 1, 2)}
    for _ in range(trials):
        q = random_pose(rng, RANGES)
        for cm in (0, 1, 2):
            kp, conf, up = pose_in_camera(q, rng, cm / 100)
            angles, _, _ = anatomical_angles(kp[None], conf[None], up)
            for n in NAMES_3D:
                out[f"{cm} cm"][n].append(abs((angles[0, COLUMN[n]] - q[n] + 180) % 360 - 180))
    return {k: {n: round(float(np.nanmean(v)), 2) for n, v in table.items()} for k, table in out.items()}


def through_toy_models(frames: int = 60) -> dict[str, float]:
    """Mean error (degrees) of the 3-D angles a run of the toy pose and pointmap models gives on a rendered clip of
    two walkers, against the angles of the renderer's true keypoints (each person matched by box)."""
    import json
    import tempfile
    from pathlib import Path

    from sapiens2_stream.config import from_dict
    from sapiens2_stream.humans.clips import crossing, render_clip, write_clip
    from sapiens2_stream.models.toy import toy_model
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    scene, fps, size = crossing(), 15, (240, 320)
    truth_views = [view for _, (_, _, view) in zip(range(frames), render_clip(scene, fps, size), strict=False)]
    up = scene.camera_for(size).rotation @ [0.0, 0.0, 1.0]
    errors: dict[str, list[float]] = {n: [] for n in NAMES_3D}
    with tempfile.TemporaryDirectory() as tmp:
        truth = write_clip(Path(tmp) / "walk.mp4", scene, fps=fps, size=size)
        cfg = from_dict(PipelineConfig, {
            "source": {"uri": str(Path(tmp) / "walk.mp4"), "max_frames": frames},
            "detector": {"type": "file", "path": truth["path"]},
            "models": {task: {"source": str(toy_model(task))} for task in ("pose", "pointmap")},
            "outputs": {"dir": str(Path(tmp) / "run"), "video": {"enabled": False}},
            "angles": {"enabled": True, "filter": "none", "files": False},
        })  # fmt: skip
        Pipeline(cfg).run()
        records = [json.loads(line) for line in (Path(tmp) / "run" / "results.jsonl").read_text().splitlines()]
    for record, view in zip(records, truth_views, strict=False):
        for person in record["people"]:
            box = np.array(person["box"])
            seen = min(view.people, key=lambda t: np.abs(np.asarray(t.box, np.float64) - box).sum(), default=None)
            if seen is None or not person.get("angles", {}).get("3d"):
                continue
            kp, conf = keypoints_308(seen.camera_points)
            exact, _, _ = anatomical_angles(kp[None], conf[None], up)
            for n in NAMES_3D:
                ours = person["angles"]["3d"][n]
                if ours is not None and not np.isnan(exact[0, COLUMN[n]]):
                    errors[n].append(abs((ours - exact[0, COLUMN[n]] + 180) % 360 - 180))
    return {n: round(float(np.mean(e)), 1) for n, e in errors.items() if e}


def conventions_picture(path: str) -> None:
    """A body seen from its right with its sagittal angles drawn and named (2-D name / 3-D name)."""
    import cv2

    q = {"hip_flexion_r": 35, "knee_angle_r": 55, "ankle_angle_r": 15, "arm_flex_r": 50, "elbow_flex_r": 70,
         "lumbar_extension": -10, "hip_flexion_l": -10, "knee_angle_l": 10}  # fmt: skip
    points = body_points(q)
    scale, origin = 330.0, np.array([300.0, 720.0])

    def px(name):
        p = points[name]
        return (origin + [p[0] * scale, -p[1] * scale]).round().astype(int)

    picture = np.full((760, 900, 3), 255, np.uint8)
    cv2.line(picture, (0, int(origin[1])), (900, int(origin[1])), (180, 180, 180), 2)
    bones = [
        ("right_hip", "right_knee"),
        ("right_knee", "right_ankle"),
        ("right_heel", "right_big_toe"),
        ("right_ankle", "right_heel"),
        ("right_shoulder", "right_elbow"),
        ("right_elbow", "right_wrist"),
        ("left_hip", "left_knee"),
        ("left_knee", "left_ankle"),
        ("right_wrist", "right_forefinger_third_joint"),
        ("left_ankle", "left_heel"),
        ("left_heel", "left_big_toe"),
        ("left_shoulder", "left_elbow"),
        ("left_elbow", "left_wrist"),
    ]
    for a, b in bones:
        colour = (60, 60, 200) if a.startswith("right") else (190, 190, 190)
        cv2.line(picture, tuple(px(a)), tuple(px(b)), colour, 4, cv2.LINE_AA)
    hip = ((px("left_hip") + px("right_hip")) / 2).astype(int)
    neck = ((px("left_shoulder") + px("right_shoulder")) / 2).astype(int)
    cv2.line(picture, tuple(hip), tuple(neck), (60, 60, 60), 4, cv2.LINE_AA)
    head = ((px("left_ear") + px("right_ear")) / 2).astype(int)
    cv2.circle(picture, tuple(head), int(0.1 * scale), (60, 60, 60), 3, cv2.LINE_AA)
    cv2.line(picture, tuple(neck), tuple(head + [0, int(0.1 * scale)]), (60, 60, 60), 3, cv2.LINE_AA)
    labels = [("right_knee", f"knee {q['knee_angle_r']:.0f}: 'right knee' / knee_angle_r (flexion +)", (20, 10)),
              ("right_hip", f"hip {q['hip_flexion_r']:.0f}: 'right hip' / hip_flexion_r (flexion +)", (20, -10)),
              ("right_ankle", f"ankle {q['ankle_angle_r']:.0f}: 'right ankle' / ankle_angle_r (dorsiflexion +)",
               (20, 30)),
              ("right_elbow", f"elbow {q['elbow_flex_r']:.0f}: 'right elbow' / elbow_flex_r (flexion +)", (30, 14)),
              ("right_shoulder", f"shoulder {q['arm_flex_r']:.0f}: 'right shoulder' / arm_flex_r (flexion +)",
               (30, 8))]  # fmt: skip
    for name, text, (dx, dy) in labels:
        x, y = px(name)
        cv2.circle(picture, (int(x), int(y)), 6, (30, 140, 30), -1, cv2.LINE_AA)
        cv2.putText(picture, text, (int(x) + dx, int(y) + dy), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (20, 20, 20), 1,
                    cv2.LINE_AA)  # fmt: skip
    lines = ["Seen from the right (the person faces right). Zero: standing, arms hanging, palms forward.",
             "2-D (Sports2D's names) and 3-D (OpenSim's) agree on sagittal flexion; segment angles (trunk, thigh,",
             "shank, foot, arm, forearm, hand) are measured from the horizontal, anticlockwise as drawn.",
             f"lumbar_extension {q['lumbar_extension']:.0f} (extension +, here leaning forward)"]  # fmt: skip
    for i, text in enumerate(lines):
        cv2.putText(picture, text, (16, 24 + 20 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (60, 60, 60), 1, cv2.LINE_AA)
    cv2.imwrite(path, picture)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--picture", metavar="PNG", help="also draw the conventions picture there")
    parser.add_argument("--toy", action="store_true", help="also the 3-D angles through the toy models (a minute)")
    args = parser.parse_args()
    print_table(run())
    table = errors()
    print(f"{'angle':18s} " + " ".join(f"{k:>7s}" for k in table))
    for n in NAMES_3D:
        print(f"{n:18s} " + " ".join(f"{table[k][n]:7.2f}" for k in table))
    if args.toy:
        print("through the toy pose and pointmap models, against the renderer's truth:", through_toy_models())
    if args.picture:
        conventions_picture(args.picture)


if __name__ == "__main__":
    main()
