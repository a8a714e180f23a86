"""`outputs.virtual_camera`: this machine has no v4l2loopback (its kernel has no modules), so the sending path is
tested through a pyvirtualcam backend registered here that records what it receives, as a video-call program
would see it; and the missing device through the real check, on this machine without one."""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import yaml

from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.video_sinks import annotated
from sapiens2_stream.runtime.pipeline import Pipeline
from tests.test_pipeline import config, source_summary

pyvirtualcam = pytest.importorskip("pyvirtualcam")  # part of the dev extra

CAMERA = "lavfi:testsrc2=size=320x240:rate=10,realtime"


class RecordingCamera(pyvirtualcam.camera.Backend):
    """A virtual camera that keeps what it is sent (a copy, with the time), optionally slow to take a frame."""

    received: list = []
    opened: list = []
    send_s = 0.0

    def __init__(self, *, width, height, fps, fourcc, device, **kw):
        RecordingCamera.opened.append((width, height, fps, device))
        self.shape = (height, width, 3)

    def send(self, frame):  # pyvirtualcam hands backends the pixels flat, as a device takes them
        RecordingCamera.received.append((time.monotonic(), frame.reshape(self.shape).copy()))
        time.sleep(RecordingCamera.send_s)

    def close(self):
        pass

    def device(self):
        return "recording"

    def native_fourcc(self):
        return None


@pytest.fixture
def recording():
    pyvirtualcam.register_backend("recording", RecordingCamera)
    RecordingCamera.received, RecordingCamera.opened, RecordingCamera.send_s = [], [], 0.0
    return RecordingCamera


def run_for(pipeline, seconds):
    box = {}
    thread = threading.Thread(target=lambda: box.update(summary=pipeline.run()))
    thread.start()
    time.sleep(seconds)
    pipeline.request_stop()
    thread.join(60)
    return box["summary"]


def test_the_camera_gets_the_pictures_at_its_own_pace(tmp_path, tiny_dir, recording):
    cfg = config(tmp_path, tiny_dir, CAMERA, outputs={"virtual_camera": {"enabled": True, "backend": "recording"}},
                 runtime={"threads": 1})  # fmt: skip
    video, seen = cfg.outputs.video, []
    shown = lambda r, p: seen.append(annotated(r, video.draw, video.keypoint_threshold))  # noqa: E731
    pipeline = Pipeline(cfg, on_result=shown)
    summary = source_summary(run_for(pipeline, 8))
    assert recording.opened == [(320, 240, 10.0, None)]  # the source's size and rate (fps: auto)
    times = [t for t, _ in recording.received]
    frames = [f for _, f in recording.received]
    assert len(frames) > 30 and all(f.shape == (240, 320, 3) and f.dtype == np.uint8 for f in frames)
    gaps = np.diff(times)
    assert abs(np.median(gaps) - 0.1) < 0.02  # paced to the camera's 10 frames/s
    # what it shows is the annotated picture (the frame with boxes and skeletons), the very one the video draws
    assert all(any(np.array_equal(f, picture) for picture in seen) for f in frames[::10])
    assert summary["outputs"]["virtual_camera"]["sent"] == len(frames)


def test_a_slow_camera_never_slows_the_pipeline(tmp_path, tiny_dir, recording):
    recording.send_s = 0.5  # a consumer that takes half a second a frame
    cfg = config(tmp_path, tiny_dir, CAMERA, outputs={"virtual_camera": {"enabled": True, "backend": "recording"}},
                 runtime={"threads": 1})  # fmt: skip
    summary = source_summary(run_for(Pipeline(cfg), 8))
    stats = summary["outputs"]["virtual_camera"]
    # had the pipeline waited for the consumer, it would have written about as many frames as were sent (2 a
    # second); it wrote more than twice as many, however busy the host (about 6x idle, 3x beside two busy cores)
    assert stats["pictures"] == summary["frames_out"] and summary["frames_out"] > 2 * stats["sent"]
    assert not summary["dropped"].get("output_too_slow") and stats["replaced"] > 0


def test_no_virtual_camera_here_is_one_clear_line(tmp_path, tiny_dir):
    spec = tmp_path / "vc.yaml"
    spec.write_text(yaml.safe_dump({
        "source": {"uri": CAMERA}, "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150]]},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
        "outputs": {"dir": str(tmp_path / "out"), "virtual_camera": {"enabled": True}},
    }))  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--no-progress"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "no virtual camera device on this machine" in done.stderr and "modprobe v4l2loopback" in done.stderr


def test_an_unknown_backend_is_named_with_those_there_are(tmp_path, tiny_dir):
    cfg = config(tmp_path, tiny_dir, CAMERA, outputs={"virtual_camera": {"enabled": True, "backend": "nope"}})
    with pytest.raises(Sapiens2StreamError, match="'nope' is not available here .*v4l2loopback"):
        Pipeline(cfg)
