"""`sapiens2-stream kinematics`: OpenSim scaling and IK of the people a run put in metres.

The truth is synthetic bodies posed by known OpenSim-style coordinates (`humans.kinematics`), written as a camera
group's moments; the anchor is Pose2Sim's own scaling and IK (`Pose2Sim.kinematics`, on the markers TRC ours saw).
A model's zero is not the geometric one, so a coordinate is compared after its constant offset."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from benchmarks.kinematics_anchor import cli, squatting, walking, write_run
from benchmarks.real_mocap import read_mot
from sapiens2_stream.humans.kinematics import body_points, keypoints_308
from sapiens2_stream.kinematics.markers import MARKERS
from sapiens2_stream.kinematics.opensim_files import setup_dir
from sapiens2_stream.models.metadata import pose_metadata


def test_every_marker_is_a_point_of_the_308_and_of_the_marker_set():
    names = {m.get("name") for m in ET.parse(setup_dir() / "Markers_Coco133.xml").getroot().iter("Marker")}
    assert set(MARKERS) == names  # every marker the model carries is made, and no other
    from sapiens2_stream.export.skeletons import COCO_133

    known = set(pose_metadata().names)
    for marker, point in MARKERS.items():
        sources = [name for name, _ in COCO_133[point].sources]
        assert sources and set(sources) <= known, marker
    assert [n for n, _ in COCO_133[MARKERS["RIndex"]].sources] == ["right_forefinger_third_joint"]


def test_bad_inputs_are_one_line_and_exit_2(tmp_path, monkeypatch, tiny_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, said = cli("kinematics", empty)
    assert code == 2 and said.count("\n") == 1 and "no people in metres" in said
    short = tmp_path / "short"
    write_run(short, squatting, seconds=0.2)  # 6 frames: too few to measure the person in
    code, said = cli("kinematics", short)
    assert code == 2 and "person 1: not scaled, skipped" in said and "Traceback" not in said
    assert not list((short / "kinematics").glob("*.osim"))  # no partial model passed off as done
    code, said = cli("kinematics", short, "--height", "tall")
    assert code == 2 and said.strip().endswith("--height 'tall' is not a number")
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name == "opensim" else real_import(name, *a, **k))  # fmt: skip
    code, said = cli("kinematics", short)
    assert code == 2 and said.count("\n") == 1 and "pip install -e '.[opensim]'" in said
    from sapiens2_stream.threed.calibration import write_calibration
    from tests import scenes3d as S

    write_calibration(tmp_path / "Calib.toml", S.rig(2))
    spec = tmp_path / "live.yaml"
    spec.write_text(json.dumps({"sources": [{"name": f"cam{i}", "uri": f"rtsp://127.0.0.1/cam{i}"} for i in (1, 2)],
                                "detector": {"type": "full_frame"},
                                "models": {"pose": {"source": str(tiny_dir["pose"])}},
                                "threed": {"calibration": str(tmp_path / "Calib.toml")},
                                "kinematics": {"enabled": True}}))  # fmt: skip
    code, said = cli("validate", spec)  # a live run's build says it before its first frame
    assert code == 2 and said.count("\n") == 1 and "pip install -e '.[opensim]'" in said, said


def test_live_kinematics_of_a_camera_group_equals_the_command_on_its_files(tmp_path):
    """Four calibrated cameras see a walking body (1 px of noise); `kinematics: on`: each moment's person gets its
    coordinates once scaled (null with the reason before), the files land in OUTPUT/kinematics/ at the end, and
    `sapiens2-stream kinematics` on the run's files gives the same values (to 0.01 degree)."""
    from tests import scenes3d as S

    rig, stages, enabled = S.camera_group(tmp_path, kinematics={"enabled": True, "scale_frames": 15})
    assert enabled == ["triangulate", "group_kinematics", "write_3d"]
    bodies = []
    for i in range(60):
        q, yaw = walking(i / 10)
        bodies.append({n: p[[2, 0, 1]] for n, p in body_points(q, yaw=yaw).items()})  # OpenSim's Y up -> Z up
    S.film(stages, rig, bodies, np.random.default_rng(11))
    records = [json.loads(line) for line in (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]
    people = [r["people"][0] for r in records]
    assert len(people) == 60 and people[0]["kinematics"] is None and "scaling: 1 of 15" in people[0]["kinematics_why"]
    solved = [k for k, p in enumerate(people) if p["kinematics"] is not None]
    assert solved and solved[0] <= 20 and solved == list(range(solved[0], 60))
    written = read_mot(tmp_path / "out" / "kinematics" / "person_0001_ik.mot")[1]
    code, said = cli("kinematics", tmp_path / "out", "--scale-frames", 15, "--output", tmp_path / "again")
    assert code == 0, said
    again = read_mot(tmp_path / "again" / "person_0001_ik.mot")[1]
    for name in ("knee_angle_r", "hip_flexion_l", "arm_flex_r", "pelvis_tilt"):
        assert np.allclose(written[name], again[name], atol=1e-3), name  # the run's files are the command's
        live_values = np.array([people[k]["kinematics"][name] for k in solved])
        assert np.allclose(live_values, again[name][solved], atol=0.01), name


def test_a_resumed_run_goes_on_solving_as_the_command_solves_its_files(tmp_path):
    """A camera group's run cut after 25 frames (the walker scaled at 15) and continued (`--resume`: the stages
    get the moments written): the person is scaled again from the same frames and solved on from their last pose,
    so every solved moment of the whole take still equals `sapiens2-stream kinematics` on the run's files."""
    from tests import scenes3d as S

    section = {"enabled": True, "scale_frames": 15}
    bodies = []
    for i in range(40):
        q, yaw = walking(i / 10)
        bodies.append({n: p[[2, 0, 1]] for n, p in body_points(q, yaw=yaw).items()})
    rig, stages, _ = S.camera_group(tmp_path, kinematics=section)
    S.film(stages, rig, bodies[:25], np.random.default_rng(3))
    path = tmp_path / "out" / "3d" / "keypoints_3d.jsonl"
    written = [json.loads(line) for line in path.read_text().splitlines()]
    from sapiens2_stream.io.records import recorded_moment

    _, again, _ = S.camera_group(tmp_path, kinematics=section, resumed=[recorded_moment(m) for m in written])
    S.film(again, rig, bodies[25:], np.random.default_rng(4), first=25)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[:25] == written and len(records) == 40
    people = [r["people"][0] for r in records]
    solved = [k for k, p in enumerate(people) if p["kinematics"] is not None]
    assert solved == list(range(solved[0], 40)) and solved[0] <= 20
    code, said = cli("kinematics", tmp_path / "out", "--scale-frames", 15, "--output", tmp_path / "again")
    assert code == 0, said
    again_mot = read_mot(tmp_path / "again" / "person_0001_ik.mot")[1]
    assert np.allclose(read_mot(tmp_path / "out" / "kinematics" / "person_0001_ik.mot")[1]["knee_angle_r"],
                       again_mot["knee_angle_r"], atol=1e-3)  # fmt: skip  # the run's files: the whole take
    for name in ("knee_angle_r", "hip_flexion_l", "arm_flex_r", "pelvis_tilt"):
        live_values = np.array([people[k]["kinematics"][name] for k in solved])
        assert np.allclose(live_values, again_mot[name][solved], atol=0.01), name


def tilted(world: np.ndarray, degrees: float) -> np.ndarray:
    """A world-from-camera transform turned about the world's X axis (a floor found again, a little different)."""
    a = np.radians(degrees)
    turn = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    out = world.copy()
    out[:3] = turn @ world[:3]
    return out


class Lifted:
    """After the 3-D stage of a real run (random weights, so its people are nothing): the first person is a
    walking body in metres in the camera's frame, and the floor the run has found is `first` until frame 25, then
    the same turned by 3 degrees (a floor found again)."""

    after = "threed"

    def __init__(self, first: np.ndarray) -> None:
        self.first = first

    def __call__(self, state, result) -> None:
        q, yaw = walking(result.frame.pts_s)
        keypoints, confidence = keypoints_308(body_points(q, yaw=yaw))
        world = keypoints[:, [2, 0, 1]]  # OpenSim's Y up -> Z up
        camera = (world - self.first[:3, 3]) @ self.first[:3, :3]
        for person in result.people[:1]:
            person.keypoints_3d = camera.astype(np.float32)
            person.keypoints_3d_confidence = (0.9 * confidence).astype(np.float32)
        result.people[1:] = []
        result.world_from_camera = self.first if result.frame.index < 25 else tilted(self.first, 3.0)


def test_live_kinematics_of_one_camera_equals_the_command_on_its_files(tmp_path, tiny_dir):
    """A camera with pose and pointmap, `kinematics: on`: each person in metres is solved as the frames come, in
    the world the run's floor gives at that frame (kept in the record: the floor is found again as the run goes),
    the track's files go through the outputs when it ends, and `sapiens2-stream kinematics` on the run's files
    gives the live values (to 0.01 degree) and the same files. Without the world kept, the command would stand the
    person on the floor of world.json."""
    import sapiens2_stream as s2
    from sapiens2_stream.io.records import read_frames
    from sapiens2_stream.io.synthetic import make_clip

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=45, size=(240, 320), people=1)
    first = np.eye(4)
    first[:3, :3] = [[1, 0, 0], [0, 0, 1], [0, -1, 0]]  # a camera looking along the world's Y, 3 m back, 1 m up
    first[:3, 3] = [0.0, -3.0, 1.0]
    models = {"pose": str(tiny_dir["pose"]), "pointmap": str(tiny_dir["pointmap"])}
    s2.run(str(clip), lambda result: None, models=models, device="cpu", stages=[Lifted(first)],
           detector={"type": "fixed", "boxes": [[100, 20, 80, 200]]}, output=str(tmp_path / "out"),
           set={"models.pose.input_size": [64, 48], "models.pointmap.input_size": [64, 48],
                "kinematics": {"enabled": True, "scale_frames": 15}})  # fmt: skip
    people = [r.people[0] for r in read_frames(tmp_path / "out" / "results.jsonl")]
    assert len(people) == 45 and "scaling: 1 of 15" in people[0].fields["kinematics_why"]
    solved = [k for k, p in enumerate(people) if p.fields.get("kinematics")]
    assert solved and solved[0] <= 20 and solved == list(range(solved[0], 45))
    assert people[30].fields["kinematics_world"] != people[10].fields["kinematics_world"]
    code, said = cli("kinematics", tmp_path / "out", "--scale-frames", 15, "--output", tmp_path / "again")
    assert code == 0, said
    again = read_mot(tmp_path / "again" / "person_0001_ik.mot")[1]
    written = read_mot(tmp_path / "out" / "kinematics" / "person_0001_ik.mot")[1]
    for name in ("knee_angle_r", "hip_flexion_l", "arm_flex_r", "pelvis_tilt"):
        assert np.allclose(written[name], again[name], atol=1e-3), name  # the run's files are the command's
        live_values = np.array([people[k].fields["kinematics"][name] for k in solved])
        assert np.allclose(live_values, again[name][solved], atol=0.01), name
    tilt = again["pelvis_tilt"]
    assert abs(np.mean(tilt[30:]) - np.mean(tilt[15:25]) - 3.0) < 1.5  # the floor turned 3 degrees: so did the body


def test_ctrl_c_stops_kinematics_at_once_and_leaves_no_half_person(tmp_path):
    """Ctrl-C while a person is solved (their model is scaled, IK under way): exit 130 within seconds, nothing of
    that person left (a scaled model without its IK would pass for done), summary.json saying it was interrupted."""
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    write_run(run, walking, seconds=60.0)  # 1,800 frames: several seconds of IK
    proc = subprocess.Popen(
        [sys.executable, "-m", "sapiens2_stream.cli", "kinematics", str(run)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as a terminal starts it
    scaled = run / "kinematics" / "person_0001_scaled.osim"
    deadline = time.time() + 60
    while not scaled.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    sent = time.time()
    _, said = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.time() - sent < 10, said
    assert "Traceback" not in said
    assert sorted(p.name for p in (run / "kinematics").iterdir()) == ["summary.json"]
    summary = json.loads((run / "kinematics" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["people"] == {}


def test_a_body_two_measurements_scale_takes_the_mean_of_both(tmp_path):
    """The head is scaled by the torso's measurement and the face's: a person whose face is 1.5 times the model's
    and whose torso is the model's gets a head 1.25 times as large (Pose2Sim's merge), not the first one alone."""
    from sapiens2_stream.kinematics.fit import load_model, scale_model
    from sapiens2_stream.kinematics.markers import NAMES
    from sapiens2_stream.kinematics.opensim_files import MODELS, need_opensim

    opensim, folder = need_opensim(), setup_dir()
    generic = load_model(opensim, folder, folder / MODELS["simple"])
    state = generic.initSystem()
    where = {m.getName(): m.getLocationInGround(state).to_numpy() for m in generic.getMarkerSet()}
    points = np.array([where[n] for n in NAMES])
    for eye in ("REye", "LEye"):
        i, nose = NAMES.index(eye), where["Nose"]
        points[i] = nose + 1.5 * (where[eye] - nose)
    scaled = scale_model(opensim, folder, "simple", np.repeat(points[None], 20, 0), 70.0, tmp_path / "p.osim", 20)
    assert scaled.factors["head"] == pytest.approx(1.5) and scaled.factors["torso"] == pytest.approx(1.0)
    model = load_model(opensim, folder, scaled.path)
    after = {m.getName(): m.getLocationInGround(model.initSystem()).to_numpy() for m in model.getMarkerSet()}
    ratio = np.linalg.norm(after["Nose"] - after["REye"]) / np.linalg.norm(where["Nose"] - where["REye"])
    assert ratio == pytest.approx(1.25, abs=1e-6)
