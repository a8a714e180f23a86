"""`export pose2sim`: a synthetic calibrated rig (4 virtual cameras around a known 3-D body), each camera's results
written as our JSONL from the projections with noise and dropouts, one camera starting late. The export finds the
late camera's offset exactly (also for a steady walking gait, where correlating speeds fails), and Pose2Sim itself
(a test-only dependency, headless) triangulates the project to within 5 mm of the truth."""

import json
import os
import subprocess
import sys
from fractions import Fraction

import av
import cv2
import numpy as np
import pytest

from sapiens2_stream.export.pose2sim import export_pose2sim, pose2sim_order
from sapiens2_stream.export.skeletons import layout
from sapiens2_stream.models.metadata import pose_metadata
from sapiens2_stream.threed.calibration import Camera, read_calibration, write_calibration

try:
    import Pose2Sim  # noqa: F401

    HAVE_POSE2SIM = True
except ImportError:
    HAVE_POSE2SIM = False
needs_pose2sim = pytest.mark.skipif(
    not HAVE_POSE2SIM, reason="needs pose2sim==0.10.49 (installed --no-deps: see README)"
)

FPS, W, H = 30, 1920, 1080
NAMES = pose_metadata().names
INDEX = {n: i for i, n in enumerate(NAMES)}
SIDES = {"left": 1.0, "right": -1.0}


def rot_z(v, a):
    c, s = np.cos(a), np.sin(a)
    return np.array([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1], v[..., 2]]).T


def body(t, walking):
    """World points (metres, Z up) of the keypoints the skeletons use, at time t. `walking`: a steady gait across
    the room (periodic limbs); otherwise a gait speeding up with an arm raise and a jump (nothing periodic)."""
    phase = 2 * np.pi * (1.0 * t + (0 if walking else 0.2 * t * t))
    p = {"neck": [0, 0, 1.45], "center_of_glabella": [0.09, 0, 1.66], "tip_of_chin": [0.08, 0, 1.50],
         "nose": [0.11, 0, 1.60]}  # fmt: skip
    for side, sg in SIDES.items():
        swing = sg * 0.35 * np.sin(phase)
        knee = 0.25 * (1 + np.sin(phase + sg * np.pi / 2))
        hip = np.array([0, sg * 0.1, 0.93])

        def leg(d, bend=0.0, hip=hip, swing=swing):
            return hip + np.array([np.sin(swing) * d + bend, 0, -np.cos(swing) * d])

        raise_arm = 0 if walking else 2.0 * np.exp(-(((t - 1.2) / 0.25) ** 2))
        arm = -0.6 * swing - raise_arm * (sg > 0)
        shoulder = np.array([0, sg * 0.18, 1.42])
        p.update({
            f"{side}_hip": hip, f"{side}_knee": leg(0.43, 0.05 * knee), f"{side}_ankle": leg(0.85, -0.1 * knee),
            f"{side}_heel": leg(0.9, -0.15 * knee), f"{side}_big_toe": leg(0.88, 0.12),
            f"{side}_small_toe": leg(0.88, 0.08) + [0, sg * 0.05, 0], f"{side}_shoulder": shoulder,
            f"{side}_elbow": shoulder + [np.sin(arm) * 0.28, sg * 0.02, -np.cos(arm) * 0.28],
            f"{side}_wrist": shoulder + [np.sin(arm) * 0.52 + 0.05, sg * 0.03, -np.cos(arm) * 0.52],
            f"{side}_eye": [0.08, sg * 0.035, 1.64], f"{side}_ear": [0.0, sg * 0.075, 1.61],
        })  # fmt: skip
    names = list(p)
    pts = np.array([p[n] for n in names], np.float64)
    jump = 0 if walking else 0.25 * np.exp(-(((t - 2.6) / 0.15) ** 2))
    pts = rot_z(pts, 0.3 * np.sin(0.5 * t))
    pts += [-0.8 + 0.8 * t, 0.2 * np.sin(0.7 * t), 0.03 * np.sin(2 * phase) + jump]
    return dict(zip(names, pts, strict=True))


def rig(distort=False):
    """4 cameras on a 4.5 m circle, 1.6 m high, looking at the middle of the walk; two with strong lens distortion."""
    cams = []
    for i in range(4):
        az = np.deg2rad(30 + 90 * i)
        centre = np.array([4.5 * np.cos(az), 4.5 * np.sin(az), 1.6])
        z = np.array([0.2, 0, 0.9]) - centre
        z /= np.linalg.norm(z)
        x = np.cross(z, [0, 0, 1])
        x /= np.linalg.norm(x)
        r = np.vstack([x, np.cross(z, x), z])
        k = np.array([[1500.0, 0, W / 2 + 7 * i], [0, 1500.0, H / 2 - 5 * i], [0, 0, 1]])
        d = np.array([-0.25, 0.1, 0.001, -0.001]) if distort and i % 2 else np.zeros(4)
        cams.append(Camera(f"cam{i + 1:02d}", (W, H), k, d, cv2.Rodrigues(r)[0].ravel(), -r @ centre))
    return cams


def write_runs(tmp_path, cams, frames, late, walking, noise=0.5, dropout=0.03, seed=0):
    """Each camera's results as our JSONL: camera 3 started `late` frames after the others."""
    rng = np.random.default_rng(seed)
    truth = [body(f / FPS, walking) for f in range(frames + late)]
    runs = []
    for c, cam in enumerate(cams):
        start = late if c == 2 else 0
        folder = tmp_path / "runs" / cam.name
        folder.mkdir(parents=True)
        lines = []
        for k in range(frames):
            points = truth[start + k]
            xyz = np.array(list(points.values()))
            uv = cv2.projectPoints(xyz, cam.rotation, cam.translation, cam.matrix, cam.distortions)[0].reshape(-1, 2)
            uv += rng.normal(0, noise, uv.shape)
            keypoints, scores = np.zeros((308, 2)), np.zeros(308)
            for name, p in zip(points, uv, strict=True):
                keypoints[INDEX[name]] = p
                scores[INDEX[name]] = 0 if rng.random() < dropout else rng.uniform(0.6, 1.0)
            lo, hi = uv.min(0), uv.max(0)
            person = {
                "track_id": 1,
                "box": [*lo, *(hi - lo)],
                "score": 0.9,
                "keypoints": keypoints.round(3).tolist(),
                "keypoint_scores": scores.round(4).tolist(),
                "keypoints_smoothed": keypoints.tolist(),
            }
            lines.append(json.dumps({"source": f"{cam.name}.mp4", "frame": k, "pts": round(k / FPS, 6),
                                     "people": [person]}))  # fmt: skip
        (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
        runs.append(folder)
    return runs, truth


def halpe_truth(points):
    p = {n: np.asarray(v) for n, v in points.items()}
    head = 0.5 * (p["left_ear"] + p["right_ear"]) + 1.1 * (p["center_of_glabella"] - p["tip_of_chin"])
    return {"Nose": p["nose"], "LEye": p["left_eye"], "REye": p["right_eye"], "LEar": p["left_ear"],
            "REar": p["right_ear"], "LShoulder": p["left_shoulder"], "RShoulder": p["right_shoulder"],
            "LElbow": p["left_elbow"], "RElbow": p["right_elbow"], "LWrist": p["left_wrist"],
            "RWrist": p["right_wrist"],
            "LHip": p["left_hip"], "RHip": p["right_hip"], "LKnee": p["left_knee"], "RKnee": p["right_knee"],
            "LAnkle": p["left_ankle"], "RAnkle": p["right_ankle"], "Head": head, "Neck": p["neck"],
            "Hip": 0.5 * (p["left_hip"] + p["right_hip"]), "LBigToe": p["left_big_toe"], "RBigToe": p["right_big_toe"],
            "LSmallToe": p["left_small_toe"], "RSmallToe": p["right_small_toe"], "LHeel": p["left_heel"],
            "RHeel": p["right_heel"]}  # fmt: skip


def triangulate(project):
    """Pose2Sim's own triangulation of the project, headless, in a process of its own; the TRC it wrote."""
    code = "from Pose2Sim import Pose2Sim; Pose2Sim.triangulation()"
    env = {**os.environ, "MPLBACKEND": "Agg", "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, env=env,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (trc,) = (project / "pose-3d").glob("*.trc")
    return trc


def read_trc(path):
    lines = path.read_text().splitlines()
    markers = [m for m in lines[3].split("\t")[2::3] if m.strip()]
    data = np.array([[float(v) for v in line.split("\t")[: 2 + 3 * len(markers)]] for line in lines[5:] if line])
    return markers, data[:, 0].astype(int), data[:, 2:].reshape(len(data), -1, 3)


@needs_pose2sim
@pytest.mark.parametrize("walking", [False, True], ids=["non-periodic", "walking"])
def test_pose2sim_triangulates_our_export_within_5mm(tmp_path, walking):
    cams, late = rig(distort=True), 7
    runs, truth = write_runs(tmp_path, cams, frames=150, late=late, walking=walking)
    calib = tmp_path / "Calib.toml"
    write_calibration(calib, cams)
    project = tmp_path / "project"
    report = export_pose2sim(runs, project, calibration=calib, sync="motion")
    offsets = {n: c["offset_frames"] for n, c in report["cameras"].items()}
    assert offsets == {"cam01": 0, "cam02": 0, "cam03": late, "cam04": 0}  # found exactly
    assert min(c["confidence"] for c in report["cameras"].values()) > 0.8
    assert report["frames"] == 150 - late and json.loads((project / "sync.json").read_text()) == report
    written = read_calibration(project / "calibration" / "Calib.toml")
    assert not any(c.distorted for c in written.values())  # undistorted here instead of by Pose2Sim
    for n in ("cam01", "cam02", "cam03", "cam04"):
        assert len(list((project / "pose" / f"{n}_json").glob("*.json"))) == 150 - late

    markers, frames, xyz = read_trc(triangulate(project))
    assert len(markers) == 22 and len(frames) == 150 - late  # HALPE_26 without eyes and ears
    expected = np.array([[halpe_truth(truth[late + f])[m] for m in markers] for f in frames])
    expected = expected[..., [1, 2, 0]]  # Pose2Sim writes Y up: (world y, world z, world x)
    error_mm = np.linalg.norm(xyz - expected, axis=-1) * 1000
    rms = float(np.sqrt((error_mm**2).mean()))
    assert rms <= 5.0, rms


def test_motion_sync_without_a_calibration_finds_a_steady_walks_offset(tmp_path):
    """No calibration: the epipolar geometry is fitted; a steady gait across the room still gives the exact offset."""
    runs, _ = write_runs(tmp_path, rig(), frames=150, late=11, walking=True, seed=3)
    report = export_pose2sim(runs, tmp_path / "project", sync="motion")
    assert [c["offset_frames"] for c in report["cameras"].values()] == [0, 0, 11, 0]


@needs_pose2sim
def test_pose2sims_own_speed_correlation_gets_the_steady_walk_wrong(tmp_path):
    """The baseline: Pose2Sim's synchronisation (speed cross-correlation) on the same take, exported unsynchronised,
    returns wrong offsets (one or more gait periods away), where ours above is exact."""
    import re

    cams = rig()
    runs, _ = write_runs(tmp_path, cams, frames=150, late=11, walking=True, seed=3)
    write_calibration(tmp_path / "Calib.toml", cams)
    project = tmp_path / "project"
    export_pose2sim(runs, project, calibration=tmp_path / "Calib.toml", sync="none")
    code = "from Pose2Sim import Pose2Sim; Pose2Sim.synchronization()"
    env = {**os.environ, "MPLBACKEND": "Agg", "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, env=env,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    found = {int(cam): int(frames) for cam, frames in
             re.findall(r"Camera cam01 and cam0(\d): (-?\d+) frames offset", out.stdout + out.stderr)}  # fmt: skip
    assert set(found) == {2, 3, 4}
    assert found[3] != 11 and (found[2], found[4]) != (0, 0), found


def test_layouts_follow_the_keypoint_names_and_the_proposed_mapping():
    """The skeletons are defined by name; the indices they resolve to equal the team's proposed 308 -> Pose2Sim
    table (an independent one, made from the names and Pose2Sim's skeletons.py: tests/data, a copy of
    shared/data), and every direct point's name is the Sapiens2 name it claims."""
    from pathlib import Path

    proposed = json.loads((Path(__file__).parent / "data" / "sapiens2_to_pose2sim.json").read_text())
    halpe, coco = layout("HALPE_26"), layout("COCO_133")
    for entry in proposed["HALPE_26"]:
        row = np.flatnonzero(halpe.weights[entry["id"]])
        assert list(row) == ([entry["direct"]] if "direct" in entry else sorted(entry["from"])), entry
        if "direct" in entry:
            assert NAMES[entry["direct"]] == entry["name"]
    filled = 0
    for key, entry in proposed["COCO_133"].items():
        row = np.flatnonzero(coco.weights[int(key)])
        if "direct" in entry or "approx" in entry:
            index = entry.get("direct", entry.get("approx"))
            assert list(row) == [index] and NAMES[index] == entry["name"], (key, entry)
        elif entry.get("derive") == "mean":
            assert sorted(row) == sorted(entry["from"]) and [NAMES[i] for i in entry["from"]] == entry["names"]
        else:
            assert not len(row), key  # left empty: no verified counterpart
        filled += bool(len(row))
    assert filled == 89 and len(coco) == 133 and len(halpe) == 26
    # derived points: the hip centre is the mean, the score the lowest of its sources'
    kp, sc = np.zeros((308, 2)), np.zeros(308)
    kp[INDEX["left_hip"]], kp[INDEX["right_hip"]] = (10, 20), (30, 40)
    sc[INDEX["left_hip"]], sc[INDEX["right_hip"]] = 0.9, 1.7
    assert halpe.apply(kp, sc)[19].tolist() == [20, 30, 0.9]


def test_audio_sync_from_a_clap(tmp_path):
    """Every camera has a soundtrack with the same clap; camera 3 started 0.4 s late, so its clap is 0.4 s earlier."""
    cams = rig()
    runs, _ = write_runs(tmp_path, cams, frames=90, late=12, walking=False)
    rng = np.random.default_rng(7)
    for i, folder in enumerate(runs):
        clap = 1.8 - (0.4 if i == 2 else 0.0)
        rate, seconds = 48000, 3.0
        t = np.arange(int(rate * seconds)) / rate
        sound = 0.01 * rng.normal(size=t.size) + np.where((t >= clap) & (t < clap + 0.02), rng.normal(size=t.size), 0)
        path = folder / "annotated.mp4"
        with av.open(str(path), "w") as out:
            stream = out.add_stream("aac", rate=rate)
            for start in range(0, t.size, 1024):
                frame = av.AudioFrame.from_ndarray(sound[None, start:start + 1024].astype(np.float32), format="fltp",
                                                   layout="mono")  # fmt: skip
                frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
    report = export_pose2sim(runs, tmp_path / "project", sync="auto")
    cam3 = report["cameras"]["cam03"]
    assert cam3["method"] == "audio" and cam3["offset_frames"] == 12 and abs(cam3["offset_s"] - 0.4) < 0.01
    assert cam3["confidence"] > 0.5 and report["cameras"]["cam02"]["offset_frames"] == 0


def test_pose2sim_pairs_folders_and_calibration_by_position():
    assert pose2sim_order(["cam10", "cam2", "cam01"]) == ["cam01", "cam2", "cam10"]
    assert pose2sim_order(["side", "front", "cam3"]) == ["cam3", "front", "side"]  # no number: last, by name


@needs_pose2sim
def test_pipeline_runs_to_a_project_pose2sim_accepts(tmp_path, tiny_dir):
    """Two clips through one `run` with tiny models and outputs.pose2sim, then Pose2Sim's triangulation. The
    keypoints are noise, so its quality gates are opened in Config.toml; what is tested is that Pose2Sim takes the
    project whole: both cameras, every frame, the skeleton's markers."""
    import yaml

    from sapiens2_stream.io.synthetic import make_clip
    from tests.test_faults import cli

    for name in ("cam01", "cam02"):
        make_clip(tmp_path / f"{name}.mp4", frames=40, size=(240, 320), people=1)
    write_calibration(tmp_path / "Calib.toml", rig()[:2])
    spec = tmp_path / "take.yaml"
    spec.write_text(yaml.safe_dump({
        "sources": [{"name": n, "uri": str(tmp_path / f"{n}.mp4")} for n in ("cam01", "cam02")],
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150]]},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
        "outputs": {"dir": str(tmp_path / "out"),
                    "pose2sim": {"enabled": True, "calibration": str(tmp_path / "Calib.toml"), "sync": "none"}},
    }))  # fmt: skip
    run = cli("run", spec, "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "Pose2Sim project in" in run.stderr and "cam02: offset +0.000 s" in run.stderr
    project = tmp_path / "out" / "pose2sim"
    for name in ("cam01", "cam02"):
        files = sorted((project / "pose" / f"{name}_json").glob("*.json"))
        assert [f.name for f in files] == [f"{name}_{k:06d}.json" for k in range(40)]
        frame = json.loads(files[0].read_text())
        assert len(frame["people"]) == 1 and len(frame["people"][0]["pose_keypoints_2d"]) == 26 * 3
        assert all(0 <= c <= 1 for c in frame["people"][0]["pose_keypoints_2d"][2::3])
    config = (project / "Config.toml").read_text()
    assert "pose_model = 'HALPE_26'" in config and "multi_person = false" in config and "frame_rate = 30" in config
    for key, value in (("reproj_error_threshold_triangulation", "1e9"), ("likelihood_threshold_triangulation", "0.0"),
                       ("min_chunk_size", "1")):  # fmt: skip
        config = "\n".join(f"{key} = {value}" if line.startswith(f"{key} =") else line for line in config.splitlines())
    (project / "Config.toml").write_text(config)
    markers, frames, _ = read_trc(triangulate(project))
    assert len(markers) == 22 and list(frames) == list(range(40))
