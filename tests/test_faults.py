"""Faults users hit, each with the real thing: signals to a real CLI process, a real RTSP server killed and
restarted or stalled, real broken files. Outputs are opened and checked with PyAV and a JSON parser."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import av
import numpy as np
import pytest
import yaml

from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.pipeline import Pipeline
from tests.test_pipeline import config, free_port, read_jsonl, source_summary, start_rtsp_server, video_times


def cli(*args, timeout=240, **kwargs):
    return subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kwargs)  # fmt: skip


def pipeline_yaml(tmp_path, tiny_dir, uri, out, **extra):
    data = {
        "source": {"uri": str(uri)},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [256, 192], "flip": "on"}},
        "runtime": {"max_frames_per_batch": 2, "queue_size": 2},
        "outputs": {"dir": str(out), "tracks": {"enabled": True}},
        **extra,
    }
    path = tmp_path / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("long") / "long.mp4"
    make_clip(path, frames=90, size=(240, 320), people=2)
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_complete_outputs_and_resume_finishes(tmp_path, tiny_dir, long_clip, sig):
    """Ctrl-C or SIGTERM mid-run: exit 130, said once, every output whole (JSONL lines, a finalised video, the
    track files); after Ctrl-C, --resume finishes the run as an uninterrupted one would have made it."""
    out = tmp_path / "run"
    spec = pipeline_yaml(tmp_path, tiny_dir, long_clip, out)
    proc = subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    jsonl = out / "results.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not jsonl.exists() or jsonl.read_text().count("\n") < 6):
        time.sleep(0.05)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    text = jsonl.read_text()
    assert text.endswith("\n")
    done = [json.loads(line) for line in text.splitlines()]
    frames = [r["frame"] for r in done]
    assert frames == list(range(len(frames))) and 6 <= len(frames) < 90
    assert len(video_times(out / "annotated.mp4")) == len(frames)  # finalised mp4, one frame per result
    assert len(list((out / "tracks").glob("*.npz"))) == 2
    if sig == signal.SIGTERM:  # its outputs are as complete as SIGINT's (above): resuming them is the same, below
        return

    resumed = cli("run", spec, "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    records = read_jsonl(jsonl)
    assert [r["frame"] for r in records] == list(range(90))  # no gap, no duplicate
    assert len(video_times(out / "annotated.mp4")) == 90

    full_out = tmp_path / "full"
    cli("run", pipeline_yaml(tmp_path, tiny_dir, long_clip, full_out), "--no-progress")
    reference = read_jsonl(full_out / "results.jsonl")
    for a, b in zip(records, reference, strict=True):
        assert a["pts"] == b["pts"]
        for pa, pb in zip(a["people"], b["people"], strict=True):
            assert np.allclose(pa["keypoints"], pb["keypoints"], atol=0.02) and pa["box"] == pb["box"]
            assert pa["track_id"] == pb["track_id"]  # identities carry across the cut
            assert np.allclose(pa["keypoints_smoothed"], pb["keypoints_smoothed"], atol=0.05)  # so does smoothing
    tracks = sorted((out / "tracks").glob("*.npz"))
    assert len(tracks) == 2  # one file per person, not a second pair of ids after the resume
    track = np.load(tracks[0])
    assert list(track["frame_index"]) == list(range(90))


def test_resume_cuts_a_partial_last_line(tmp_path, tiny_dir, long_clip):
    out = tmp_path / "partial"
    spec = pipeline_yaml(tmp_path, tiny_dir, long_clip, out, source={"uri": str(long_clip), "max_frames": 12})
    assert cli("run", spec, "--no-progress").returncode == 0
    jsonl = out / "results.jsonl"
    lines = jsonl.read_text().splitlines(keepends=True)
    jsonl.write_text("".join(lines[:5]) + lines[5][:40])  # killed in the middle of writing line 6
    assert cli("run", spec, "--resume", "--no-progress").returncode == 0
    assert [r["frame"] for r in read_jsonl(jsonl)] == list(range(12))


def run_in_thread(pipeline):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("summary", pipeline.run()))
    thread.start()
    return thread, box


def wait_for_frames(pipeline, n, timeout=60):
    """Until the source has read n frames (the camera is demonstrably streaming)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pipeline.source.stats.frames >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"the source never read {n} frames")


def wait_until_caught_up(pipeline, fps=30, timeout=60):
    """Until the reader has drained what buffered while the models loaded and reads at the camera's pace."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        before = pipeline.source.stats.frames
        time.sleep(0.5)
        if 0 < pipeline.source.stats.frames - before <= 0.75 * fps:
            return
    raise AssertionError("the source never settled to the camera's pace")


def camera_pipeline(tmp_path, tiny_dir, max_frames, timeout_s, **sections):
    """A looping RTSP camera on 127.0.0.1 and a pipeline (block policy: nothing dropped) that reads it."""
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1)
    port = free_port()
    server = start_rtsp_server(folder, port)
    cfg = config(tmp_path, tiny_dir, f"rtsp://127.0.0.1:{port}/cam.mp4?play_count=0",
                 source={"max_frames": max_frames, "timeout_s": timeout_s,
                         "reconnect": {"initial_s": 0.2, "max_s": 1.0}},
                 runtime={"policy": "block"}, **sections)  # fmt: skip
    return folder, port, server, Pipeline(cfg)


def test_camera_drop_reconnects_and_resolution_change(tmp_path, tiny_dir):
    """The RTSP server is killed (a camera drop), then restarted serving a different resolution."""
    folder, port, server, pipeline = camera_pipeline(tmp_path, tiny_dir, max_frames=40, timeout_s=2)
    thread, box = run_in_thread(pipeline)
    jsonl = tmp_path / "out" / "results.jsonl"
    try:
        wait_for_frames(pipeline, 10)
        server.kill()
        server.wait()
        time.sleep(1.5)
        make_clip(folder / "cam.mp4", frames=60, size=(360, 480), people=1)  # the camera comes back bigger
        server = start_rtsp_server(folder, port)
        thread.join(timeout=90)
    finally:
        server.kill()
        pipeline.request_stop()
    summary = source_summary(box["summary"])
    assert summary["frames_out"] == 40 and summary["reconnects"] >= 1 and summary["gap_s"] > 1.0
    records = read_jsonl(jsonl)
    pts = [r["pts"] for r in records]
    assert all(b > a for a, b in zip(pts, pts[1:], strict=False))
    assert max(b - a for a, b in zip(pts, pts[1:], strict=False)) > 1.0  # the gap shows in the timestamps
    with av.open(str(tmp_path / "out" / "annotated.mp4")) as c:
        frames = list(c.decode(video=0))
    assert len(frames) == 40 and {(f.height, f.width) for f in frames} == {(240, 320)}  # output size kept


def test_stalled_stream_times_out_and_reconnects(tmp_path, tiny_dir):
    # a model clearly faster than the 30 fps camera, so the reader catches up and then starves during the stall
    # (a slower one reads frames still buffered in the connection and may never notice it)
    fast = {"pose": {"source": str(tiny_dir["pose"]), "input_size": [64, 48], "flip": "off"}}
    _, _, server, pipeline = camera_pipeline(tmp_path, tiny_dir, max_frames=150, timeout_s=1.5, models=fast)
    thread, box = run_in_thread(pipeline)
    try:
        wait_until_caught_up(pipeline)
        os.kill(server.pid, signal.SIGSTOP)  # connected, but no more frames
        time.sleep(4.0)
        os.kill(server.pid, signal.SIGCONT)
        thread.join(timeout=90)
    finally:
        server.kill()
        pipeline.request_stop()
    summary = source_summary(box["summary"])
    # (frames that arrived while the models loaded are still buffered, so the run must outlast them)
    assert summary["frames_out"] == 150 and summary["reconnects"] >= 1
    assert any("stream error" in e or "cannot open" in e for e in summary["source_log"])
    assert "events" not in summary  # the old name of source_log, written for one release, is gone
