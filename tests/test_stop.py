"""Ctrl-C answers in seconds: the first one finishes only the micro-batch already on the models (frames that were
just waiting are left, and `--resume` continues a file from them), the second one exits at once. Real CLI
processes, real signals, models slower than real time; time bounds come from the batch time the same run
measured, never from fixed milliseconds."""

import json
import signal
import subprocess
import sys
import time

import pytest
import yaml

from sapiens2_stream.io.synthetic import make_clip
from tests.test_faults import cli, pipeline_yaml
from tests.test_pipeline import read_jsonl, source_summary, video_times

# slower than real time here: 4 frames of two 512x384 people with flip TTA take one to several seconds a batch
SLOW = {"input_size": [512, 384], "flip": "on"}
RUNTIME = {"max_frames_per_batch": 4, "queue_size": 16}


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("stop") / "clip.mp4"
    make_clip(path, frames=60, size=(240, 320), people=2)
    return path


def slow_spec(tmp_path, tiny_dir, uri, out, **extra):
    spec = pipeline_yaml(tmp_path, tiny_dir, uri, out, runtime=RUNTIME, **extra)
    data = yaml.safe_load(spec.read_text())
    data["models"]["pose"].update(SLOW)
    spec.write_text(yaml.safe_dump(data))
    return spec


def start_and_wait(spec, jsonl, lines):
    proc = subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 180
    while time.time() < deadline and (not jsonl.exists() or jsonl.read_text().count("\n") < lines):
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    return proc


def batch_seconds(summary):
    """The longest micro-batch the run processed, from its own measurements (p95 per frame x largest batch)."""
    infer = summary["stage_ms_per_frame"]["infer"]["p95"] * summary["batch_size"]["infer"]["max"]
    detect = summary["stage_ms_per_frame"].get("detect", {"p95": 0})["p95"] * summary["batch_size"]["infer"]["max"]
    return (infer + detect) / 1000


def stop_and_time(proc, out, *signals):
    """Send the signals (0.3 s apart); the exit's delay after the last one, the stderr and the run's summary."""
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    return took, stderr, json.loads((out / "summary.json").read_text())


def check_complete(out):
    """Every written frame has its JSON line (whole lines, in order) and the video plays with one frame each."""
    text = (out / "results.jsonl").read_text()
    assert text.endswith("\n")
    frames = [r["frame"] for r in read_jsonl(out / "results.jsonl")]
    assert frames == sorted(frames) and len(set(frames)) == len(frames)
    assert len(video_times(out / "annotated.mp4")) == len(frames)
    return frames


def test_first_ctrl_c_on_a_file_finishes_one_batch_and_resume_completes(tmp_path, tiny_dir, clip):
    out = tmp_path / "file"
    spec = slow_spec(tmp_path, tiny_dir, clip, out)
    proc = start_and_wait(spec, out / "results.jsonl", 4)
    took, stderr, summary = stop_and_time(proc, out, signal.SIGINT)
    assert took < batch_seconds(summary) + 3, (took, batch_seconds(summary))
    frames = check_complete(out)
    assert frames == list(range(len(frames))) and len(frames) < 60
    # the waiting frames were not run
    assert source_summary(summary)["left_unprocessed"] > 0 and "left unprocessed" in stderr
    resumed = cli("run", spec, "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert check_complete(out) == list(range(60))


def test_first_ctrl_c_on_a_live_source_slower_than_the_models(tmp_path, tiny_dir):
    out = tmp_path / "live"
    spec = slow_spec(tmp_path, tiny_dir, "lavfi:testsrc2=size=320x240:rate=15,realtime", out,
                     source={"uri": "lavfi:testsrc2=size=320x240:rate=15,realtime", "max_frames": 100000})  # fmt: skip
    proc = start_and_wait(spec, out / "results.jsonl", 4)
    took, _, summary = stop_and_time(proc, out, signal.SIGTERM)
    assert took < batch_seconds(summary) + 3, (took, batch_seconds(summary))
    check_complete(out)


def test_second_ctrl_c_exits_without_waiting_for_the_batch(tmp_path, tiny_dir, clip):
    """Batches of 24 frames (seconds each here): the second Ctrl-C does not wait for the one running."""
    out = tmp_path / "twice"
    spec = slow_spec(tmp_path, tiny_dir, clip, out)
    data = yaml.safe_load(spec.read_text())
    data["runtime"] = {"max_frames_per_batch": 24, "queue_size": 24}
    spec.write_text(yaml.safe_dump(data))
    proc = start_and_wait(spec, out / "results.jsonl", 24)  # the first batch is written: the next one is running
    took, _, summary = stop_and_time(proc, out, signal.SIGINT, signal.SIGINT)
    assert took < batch_seconds(summary) / 2, (took, batch_seconds(summary))
    check_complete(out)
