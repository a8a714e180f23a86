"""`validate` gives every configuration error `run` gives before its first frame, with the same line and exit 2, and
prints the stages in order; `run` refuses them before any frame's work (nothing written, nothing lost)."""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from sapiens2_stream.cli import main
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.threed.calibration import write_calibration
from tests import scenes3d as S

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "walk.mp4"
    make_clip(path, frames=3, size=(120, 160), people=1)
    return path


def named_rig(names: list[str]) -> list:
    return [replace(camera, name=name) for camera, name in zip(S.rig(len(names)), names, strict=True)]


def test_every_shipped_pipeline_validates_and_says_its_stages(tmp_path, clip, monkeypatch, capsys):
    """In a folder holding what the pipelines name (input.mp4, photos/, take/, Calib.toml), each validates with the
    order of the stages that run for it (the detector's hub name is left to ultralytics: validate asks no network)."""
    monkeypatch.delenv("YOLO_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    shutil.copy(clip, "input.mp4")
    Path("photos").mkdir()
    import cv2

    cv2.imwrite("photos/a.jpg", np.full((64, 48, 3), 127, np.uint8))
    Path("take").mkdir()
    for i in (1, 2, 3):
        shutil.copy(clip, f"take/cam0{i}.mp4")
    write_calibration(Path("take/Calib.toml"), named_rig(["cam01", "cam02", "cam03"]))
    write_calibration(Path("Calib.toml"), named_rig(["cam01", "cam02", "cam03", "cam04"]))
    pipelines = sorted((ROOT / "pipelines").glob("*.yaml"))
    assert len(pipelines) >= 12
    said = {}
    for path in pipelines:
        code = main(["validate", str(path)])
        out, err = capsys.readouterr()
        assert code == 0, (path.name, err)
        said[path.stem] = out.strip().splitlines()[-1]
        assert said[path.stem].startswith("stages: take -> detect -> track -> infer -> ") and " -> write" in out
    assert said["site_events"] == "stages: take -> detect -> track -> infer -> smooth -> events -> write"
    assert said["live_mocap"].endswith(" -> write -> triangulate -> group_angles -> write_3d")  # the group stages
    assert said["multi_camera_mocap"].endswith(" -> write -> pose2sim")


def base(tmp_path: Path, clip: Path, tiny_dir) -> dict:
    return {"source": {"uri": str(clip)}, "detector": {"type": "full_frame"},
            "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [64, 48]}},
            "outputs": {"dir": str(tmp_path / "out")}}  # fmt: skip


def pickle_file(tmp_path: Path) -> str:
    path = tmp_path / "model.pt"
    path.write_bytes(b"\x80\x04" + b"\0" * 20)
    return str(path)


def existing_file(tmp_path: Path) -> str:
    path = tmp_path / "taken"
    path.write_text("a file where the outputs would go\n")
    return str(path)


def calibrated(tmp_path: Path, names: list[str]) -> str:
    write_calibration(tmp_path / "Calib.toml", named_rig(names))
    return str(tmp_path / "Calib.toml")


def two_cameras(data: dict, clip: Path) -> None:
    del data["source"]
    data["sources"] = [{"name": "cam1", "uri": str(clip)}, {"name": "cam2", "uri": str(clip)}]


# (what is wrong, how to make it wrong, a fragment of the line both commands say)
ERRORS = [
    ("matting background", lambda d, t, c: d["models"].update(matting={"source": d["models"]["pose"]["source"].replace(
        "pose", "matting")}) or d["outputs"].update(matting={"background": "/nonexistent.png"}),
     "outputs.matting.background: cannot read image '/nonexistent.png'"),
    ("detector weights", lambda d, t, c: d.update(detector={"type": "yolo", "weights": "/missing.pt"}),
     "detector.weights '/missing.pt': no such file"),
    ("boxes file", lambda d, t, c: d.update(detector={"type": "file", "path": str(t / "absent.json")}),
     "detector.path"),
    ("model folder", lambda d, t, c: d["models"]["pose"].update(source="/missing-folder"),
     "/missing-folder: no such file or folder"),
    ("pickle model", lambda d, t, c: d["models"]["pose"].update(source=pickle_file(t)),
     "pickle checkpoints are never loaded"),
    ("outputs.dir a file", lambda d, t, c: d["outputs"].update(dir=existing_file(t)), "is a file, not a folder"),
    ("missing video", lambda d, t, c: d["source"].update(uri=str(t / "absent.mp4")), "absent.mp4"),
    ("users' stage", lambda d, t, c: d.update(stages=[{"name": "x", "use": "no_such_module:Thing"}]),
     "stages[0].use: cannot import no_such_module"),
    ("stage anchor", lambda d, t, c: d.update(stages=[{"name": "x", "use": "tests.test_stages:Counter",
                                                       "after": "nowhere"}]), "which is no stage"),
    ("camera not calibrated", lambda d, t, c: d["models"].update(pointmap={"source": d["models"]["pose"][
        "source"].replace("pose", "pointmap")}) or d.update(threed={"calibration": calibrated(t, ["other"])}),
     "threed.calibration"),
    ("MQTT certificate", lambda d, t, c: d["outputs"].update(mqtt={"host": "127.0.0.1", "tls": {
        "ca_certs": str(t / "absent-ca.pem")}}), "outputs.mqtt.tls.ca_certs"),
    ("group camera", lambda d, t, c: two_cameras(d, c) or d.update(threed={"calibration": calibrated(
        t, ["cam1", "cam2"]), "cameras": ["cam1", "cam3"]}), "threed.cameras: cam3"),
    ("group offsets", lambda d, t, c: two_cameras(d, c) or d.update(threed={"calibration": calibrated(
        t, ["cam1", "cam2"]), "offsets_s": {"cam9": 0.1}}), "threed.offsets_s: cam9"),
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(ERRORS)), ids=[e[0] for e in ERRORS])
def test_validate_says_what_run_says_before_its_first_frame(tmp_path, clip, tiny_dir, capsys, index):
    what, spoil, fragment = ERRORS[index]
    data = copy.deepcopy(base(tmp_path, clip, tiny_dir))
    spoil(data, tmp_path, clip)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump(data))
    before = sorted(os.listdir(tmp_path))
    said = []
    for command in ("validate", "run"):
        code = main([command, str(pipeline), "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and fragment in err[0], (command, what, err)
        said.append(err[0])
    assert said[0] == said[1]  # the same line
    assert sorted(os.listdir(tmp_path)) == before  # run wrote nothing: no output folder, no summary
