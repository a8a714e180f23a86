"""Pipeline YAML: every shipped pipeline validates; broken ones give one line that names the key and the fix."""

import subprocess
import sys
from pathlib import Path

import pytest

from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.source_kinds import resolve_kind, webcam_input
from sapiens2_stream.runtime.pipeline_config import load_config

PIPELINES = sorted((Path(__file__).parent.parent / "pipelines").glob("*.yaml"))


def test_shipped_pipelines_exist():
    names = {p.stem for p in PIPELINES}
    assert {"webcam_matting", "rtsp_pose", "offline_mocap", "annotate_video"} <= names


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.stem)
def test_shipped_pipeline_validates(path):
    cfg = load_config(path)
    assert cfg.enabled_models()


def write(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


BASE = "source: {uri: a.mp4}\nmodels: {pose: {source: facebook/sapiens2-pose-0.4b}}\n"


@pytest.mark.parametrize(
    "text,message",
    [
        ("source: {uri: a.mp4\n", "invalid YAML at line 2"),
        (BASE + "detectr: {type: yolo}\n", "unknown key 'detectr' (did you mean 'detector'?)"),
        (BASE + "detector: {conf: high}\n", "detector.conf must be a number, got 'high'"),
        (BASE + "detector: {type: rcnn}\n", "detector.type must be one of 'yolo', 'fixed', 'full_frame'"),
        (BASE + "runtime: {policy: sometimes}\n", "runtime.policy must be one of"),
        (BASE + "models: {pose: {source: x, max_batch: many}}\n", "models.pose.max_batch must be an integer"),
        ("models: {pose: {source: x}}\n", "source.uri is missing"),
        ("source: {uri: a.mp4}\n", "models: enable at least one"),
        (BASE + "detector: {type: fixed}\n", "detector.boxes is empty"),
        (BASE + "models: {pose: {source: x, input_size: [1000, 768]}}\n", "multiples of 16"),
        ("- just\n- a list\n", "the top level must be a mapping"),
    ],
)
def test_broken_files_name_the_key_and_fix(tmp_path, text, message):
    with pytest.raises(Sapiens2StreamError) as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_overrides(tmp_path):
    cfg = load_config(
        write(tmp_path, BASE), ["runtime.device=cpu", "detector.conf=0.5", "models.pose.flip=off"], "b.mp4", "o"
    )
    assert (cfg.runtime.device, cfg.detector.conf, cfg.models.pose.flip) == ("cpu", 0.5, "off")
    assert (cfg.source.uri, cfg.outputs.dir) == ("b.mp4", "o")
    with pytest.raises(Sapiens2StreamError, match="expected KEY=VALUE"):
        load_config(write(tmp_path, BASE), ["runtime.device"])


def test_yaml_is_loaded_safely(tmp_path):
    with pytest.raises(Sapiens2StreamError, match="invalid YAML"):
        load_config(write(tmp_path, BASE + "name: !!python/object/apply:os.system ['true']\n"))


def test_source_kinds():
    assert resolve_kind("rtsp://cam/stream") == "stream"
    assert resolve_kind("webcam:1") == "webcam" and resolve_kind("/dev/video0") == "webcam"
    assert resolve_kind("lavfi:testsrc2") == "lavfi" and resolve_kind("photos/*.jpg") == "images"
    assert resolve_kind("clip.mp4") == "file"


def test_webcam_arguments_per_platform():
    assert webcam_input("webcam:0", "linux", 1280, 720, 30) == (
        "/dev/video0", "v4l2", {"video_size": "1280x720", "framerate": "30"})  # fmt: skip
    assert webcam_input("/dev/video2", "linux") == ("/dev/video2", "v4l2", {})
    assert webcam_input("webcam:1", "darwin") == ("1:none", "avfoundation", {"framerate": "30"})
    assert webcam_input("webcam:Integrated Camera", "win32", fps=15) == (
        "video=Integrated Camera", "dshow", {"framerate": "15"})  # fmt: skip


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_cli_validate_and_exit_codes(tmp_path):
    rtsp = next(p for p in PIPELINES if p.name == "rtsp_pose.yaml")  # validate probes files: this one reads none
    ok = run_cli("validate", str(rtsp), "--set", "detector.type=full_frame")
    assert ok.returncode == 0 and "ok" in ok.stdout
    bad = run_cli("run", str(write(tmp_path, BASE + "detectr: {}\n")))
    assert bad.returncode == 2 and "did you mean 'detector'" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_cli("run", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such pipeline file" in missing.stderr
    no_video = run_cli("run", str(write(tmp_path, BASE)), "--source", str(tmp_path / "absent.mp4"))
    assert no_video.returncode == 2 and "absent.mp4" in no_video.stderr and "Traceback" not in no_video.stderr
