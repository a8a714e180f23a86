"""Live input faster than the models: results come at the rate this machine processes the pipeline (measured on a
file in the same test), the freshest frames are taken and older waiting ones dropped before any work, no
computed result is thrown away while the output keeps up, and the frame age stays within about a batch of
processing. Also after a camera drop: results flow again at the machine's rate within seconds."""

import threading
import time

import av
import numpy as np

from benchmarks.common import steady_run
from sapiens2_stream.io.synthetic import make_clip, record_lavfi
from sapiens2_stream.runtime.pipeline import Pipeline
from tests.test_faults import run_in_thread
from tests.test_pipeline import config, frame_age_bound_ms, free_port, source_summary, start_rtsp_server

# slower than real time on this CPU (about 3 frames/s) for a 15 fps camera
SLOW = {m: {"input_size": [512, 384], "flip": "off"} for m in ("pose", "seg")}


def slow_config(tmp_path, tiny_dir, uri, out, **sections):
    models = {m: {"source": str(tiny_dir[m]), **v} for m, v in SLOW.items()}
    return config(tmp_path / out, tiny_dir, uri, tasks=("pose", "seg"), models=models,
                  detector={"every": "auto"}, outputs={"video": {"enabled": True}}, **sections)  # fmt: skip


def test_live_camera_faster_than_the_models_delivers_at_the_file_rate(tmp_path, tiny_dir):
    fps, seconds, frames = 15, 32, 24  # half a minute of camera: about 90 results at the machine's rate, 30 batches
    clip = tmp_path / "recorded.mp4"
    record_lavfi(clip, frames, fps)  # what the camera sends, as a file
    # the file rate of the same configuration, before and after the live run (this shared host's speed drifts)
    files = []
    for when in ("before", "after"):
        if when == "after":
            camera = f"lavfi:testsrc2=size=320x240:rate={fps},realtime"
            live = Pipeline(slow_config(tmp_path, tiny_dir, camera, "live", source={"max_frames": fps * seconds}))
            on_camera = steady_run(live)
            summary = source_summary(on_camera.summary)
        on_file = steady_run(Pipeline(slow_config(tmp_path, tiny_dir, clip, f"file-{when}")))
        file_summary = source_summary(on_file.summary)
        assert file_summary["frames_out"] == frames and on_file.fps < fps / 2  # the models are slower than the camera
        files.append(on_file)
    stream = live.streams[0]
    assert summary["seconds"] >= seconds - 2  # the camera ran its whole length
    # The other test worker may be busy through the half minute of camera and not through the file runs: one busy
    # process for 20 s of it made the live run 0.8x the file rate. So the file rate is taken at the CPU the live
    # run had: frames per CPU-second of this process (3.1-3.6 on the file runs here, 3.3-3.4 live, idle or not);
    # and the live run must have used all the CPU the other processes left it.
    file_fps = float(np.mean([f.fps * on_camera.own_cores / f.own_cores for f in files]))
    numbers = [(round(r.fps, 2), round(r.own_cores, 2), round(r.other_cores, 2)) for r in (on_camera, *files)]
    assert on_camera.fps >= 0.9 * file_fps, numbers
    assert on_camera.own_cores >= min(f.own_cores for f in files) - on_camera.other_cores - 0.1, numbers
    # nothing computed is thrown away while the output keeps up; every frame is written or counted as dropped
    assert stream.numbers.processed == summary["frames_out"] and "output_too_slow" not in summary["dropped"]
    assert summary["frames_out"] + summary["dropped"]["waiting_too_long"] == summary["frames_in"] == fps * seconds
    # frame age within two batches of processing (detect and infer) and outputs, plus one frame interval
    bound = frame_age_bound_ms(live, fps)
    assert summary["frame_age_ms"]["p95"] <= bound, (summary["frame_age_ms"], bound)
    # degraded by choice, visibly: behind nearly all the time, so the detector ran on about every 3rd frame; the
    # share of the camera's frames served is said in the summary, the status line and /metrics
    assert summary["under_load_share"] > 0.8 and on_camera.summary["live_batch_sizes"]
    assert summary["served_share"] == round(stream.numbers.processed / summary["frames_in"], 3) < 0.7
    from sapiens2_stream.runtime.progress import Progress, format_source
    from sapiens2_stream.runtime.prometheus import RunCollector

    assert f"served {summary['served_share']:.0%} of the camera's frames" in "\n".join(format_source(summary))
    assert "served" in Progress.status(stream) or stream.numbers.recent_fps()["in"] == 0  # recent: the camera ended
    metric = next(m for m in RunCollector(live).collect() if m.name == "sapiens2_served_share")
    assert [s.value for s in metric.samples] == [summary["served_share"]]
    assert summary["detector"]["frames_detected"] <= summary["frames_out"] / 2
    assert file_summary["detector"]["frames_detected"] == frames  # a file never falls behind: every frame
    with av.open(str(tmp_path / "live" / "out" / "annotated.mp4")) as video:
        assert video.streams.video[0].frames == summary["frames_out"]


def test_camera_drop_under_overload_recovers_within_seconds(tmp_path, tiny_dir):
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1)
    port = free_port()
    server = start_rtsp_server(folder, port)
    cfg = slow_config(tmp_path, tiny_dir, f"rtsp://127.0.0.1:{port}/cam.mp4?play_count=0", "rtsp",
                      source={"timeout_s": 2.0, "reconnect": {"initial_s": 0.2, "max_s": 1.0}})  # fmt: skip
    written = []
    lock = threading.Lock()

    def on_result(result, pipeline):
        with lock:
            written.append(time.time())

    pipeline = Pipeline(cfg, on_result=on_result)
    thread, box = run_in_thread(pipeline)
    try:
        deadline = time.time() + 60
        while len(written) < 15 and time.time() < deadline:
            time.sleep(0.1)
        assert len(written) >= 15, "no results before the drop"
        before = (len(written) - 5) / (written[-1] - written[4])  # the machine's rate, after warm-up
        server.kill()
        server.wait()
        time.sleep(2.0)
        server = start_rtsp_server(folder, port)
        back = time.time()
        time.sleep(9.0)
    finally:
        pipeline.request_stop()
        thread.join(timeout=60)
        server.kill()
    summary = source_summary(box["summary"])
    after = [t for t in written if t > back]
    assert summary["reconnects"] >= 1
    assert after and after[0] - back < 5.0, "results did not come back within seconds"
    steady = [t for t in after if t > after[0] + 2.0]  # a warm-up after the first result back
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    assert rate >= 0.7 * before, (rate, before)


def test_live_matting_that_keeps_up_writes_every_frame_promptly(tmp_path, tiny_dir):
    """The virtual-background pipeline on a machine that keeps up (the tiny matting model at 128x96 runs at
    30-60 frames/s here, the camera sends 10): every frame is written (a few may go while the first forward warms
    up or the shared host stalls), promptly: within two batches of the work this run measured."""
    from pathlib import Path

    from sapiens2_stream.runtime.pipeline_config import load_config

    cfg = load_config(
        Path(__file__).parent.parent / "pipelines" / "webcam_matting.yaml",
        [f"models.matting.source={tiny_dir['matting']}", "models.matting.input_size=[128,96]",
         "outputs.display=false", f"outputs.dir={tmp_path / 'out'}", "source.max_frames=100", "runtime.device=cpu"],
        source="lavfi:testsrc2=size=640x360:rate=10,realtime",
    )  # fmt: skip
    pipeline = Pipeline(cfg)
    summary = source_summary(pipeline.run())
    assert summary["frames_in"] == 100 and summary["frames_out"] >= 95 and "output_too_slow" not in summary["dropped"]
    age = summary["frame_age_ms"]
    assert age["p50"] <= frame_age_bound_ms(pipeline, 10, 50) and age["p95"] <= frame_age_bound_ms(pipeline, 10), age
    with av.open(str(tmp_path / "out" / "composite.mp4")) as video:
        assert video.streams.video[0].frames == summary["frames_out"]
