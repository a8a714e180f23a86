"""Threads: none started per frame or per request (a run over weeks must not churn or grow them), none kept after
a run, the census of threads by kind in summary.json and the console, and a source's numbers read on one thread
while another adds to them."""

import gc
import json
import multiprocessing
import os
import threading
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sapiens2_stream.config import from_dict
from sapiens2_stream.console.pipeline_backend import PipelineConsole
from sapiens2_stream.io.sources import SourceStats
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.numbers import SourceNumbers
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig
from tests.test_integrations import wait_until
from tests.test_pipeline import config, free_port, source_summary

CAMERA = "lavfi:testsrc2=size=320x240:rate=10,realtime"


def task_ids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def thread_name(tid: int) -> str:
    """A thread's name: Python's for a Python thread (Python 3.11 gives the system none), else what a native
    library calls itself (its `comm`), or "?" once it has ended."""
    python = {t.native_id: t.name for t in threading.enumerate()}
    if tid in python:
        return f"{python[tid]} (Python)"
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def test_no_thread_is_started_per_frame_or_per_request(tmp_path, tiny_dir):
    """Two live cameras with their annotated videos, the console and /metrics: once every kind of work has run once,
    seconds of frames decoded, inferred, drawn and encoded, and of snapshots, status and metrics requests, start no
    thread at all. (Before: swscale made a pool of threads per converted picture, dozens a frame; the metrics server
    a thread per request.) Watched in a process of its own, after a run of its own: what earlier tests leave in
    theirs (a Ray client, servers, codecs waiting for a garbage collection) is not counted, and the check that an
    earlier run left no thread behind always has one."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        seen = child.submit(watched_run, tiny_dir, tmp_path).result(timeout=300)
    assert seen["frames"] >= 20  # the cameras ran through the window
    started = seen["started"]
    assert not started, (f"{len(started)} threads started during {seen['frames']} frames: {started}; "
                         f"Python's: {seen['python']}; reconnects {seen['reconnects']}")  # fmt: skip
    # the census: every thread of ours by what it does, the rest native
    threads = seen["census"]
    for kind in ("stream-cam1", "stream-cam2", "sapiens2-device", "sapiens2-detect", "metrics", "MainThread"):
        assert threads.get(kind, 0) >= 1, (kind, threads)
    assert threads["stream-cam1"] == 2 and threads["native"] >= 1
    assert seen["device_threads"] == 1  # the earlier run left none behind


def watched_run(tiny_dir: dict, out: Path) -> dict:
    """`test_no_thread_is_started_per_frame_or_per_request`'s run, in its process: a short file run first, then the
    two cameras watched; what it saw."""
    make_clip(out / "clip.mp4", frames=4)
    Pipeline(config(out / "earlier", tiny_dir, out / "clip.mp4")).run()
    console, metrics = free_port(), free_port()
    cfg = from_dict(PipelineConfig, {
        "sources": [{"name": f"cam{i}", "uri": CAMERA} for i in (1, 2)],
        "detector": {"type": "full_frame"},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96], "flip": "off"}},
        "outputs": {"dir": str(out / "out")},
        "runtime": {"device": "cpu", "threads": 1, "console": {"port": console}, "metrics": {"port": metrics}},
    })  # fmt: skip
    pipeline = Pipeline(cfg, serve=True)
    pipeline.observe(PipelineConsole(pipeline))
    box = {}
    runner = threading.Thread(target=lambda: box.update(summary=pipeline.run()), name="test-run")
    runner.start()
    base = f"http://127.0.0.1:{console}/api/v1"
    requests = [f"{base}/sources/cam1/snapshot.jpg", f"{base}/sources", f"{base}/threads",
                f"http://127.0.0.1:{metrics}/metrics", f"http://127.0.0.1:{metrics}/healthz"]  # fmt: skip
    try:
        wait_until(lambda: min(s.numbers.written for s in pipeline.streams) >= 10, 120, "results from both cameras")
        for url in requests:  # every kind of work once: lazily started pools are started now
            get(url)
        written = sum(s.numbers.written for s in pipeline.streams)
        seen, stop = task_ids(), threading.Event()
        new: dict[int, str] = {}  # each thread started since, by what it calls itself (for the message)

        def watch() -> None:
            while not stop.is_set():
                for tid in task_ids() - seen - new.keys():
                    new[tid] = thread_name(tid)
                time.sleep(0.001)

        watcher = threading.Thread(target=watch, name="test-watch")
        watcher.start()
        ends = time.time() + 4.0
        while time.time() < ends:
            for url in requests:
                get(url)
            time.sleep(0.1)
        stop.set()
        watcher.join()
        frames = sum(s.numbers.written for s in pipeline.streams) - written
        census = json.loads(get(f"{base}/threads"))
    finally:
        pipeline.request_stop()
        runner.join(60)
    return {"frames": frames, "started": sorted(name for tid, name in new.items() if tid != watcher.native_id),
            "python": sorted(t.name for t in threading.enumerate()), "census": census,
            "reconnects": [s.source.stats.reconnects for s in pipeline.streams],  # a camera reopened: new decoders
            "device_threads": box["summary"]["threads"]["sapiens2-device"]}  # fmt: skip


def test_a_finished_run_keeps_no_encoder_or_decoder_until_a_garbage_collection(tmp_path, tiny_dir):
    """A run's codecs (the source's decoder, the annotated video's x264 encoder, the console's hold on it) are freed
    when the run ends, not when the garbage collector next breaks the cycles a finished pipeline is left in: each
    holds its threads (x264: four on two cores) and its buffers, and a process that runs pipeline after pipeline
    (`batch`'s workers, the Python API, a fleet worker's cameras coming and going) gathered them (before: 25 threads
    after ten runs, 5-8 now)."""
    import av

    from sapiens2_stream.console.live import LiveViews

    def codecs() -> dict[int, str]:
        kind = av.codec.context.CodecContext  # by type(): isinstance would touch lazy objects (a torch warning)
        return {id(o): type(o).__name__ for o in gc.get_objects() if issubclass(type(o), kind)}

    make_clip(tmp_path / "clip.mp4", frames=4)
    cfg = config(tmp_path, tiny_dir, tmp_path / "clip.mp4")
    gc.collect()
    before = codecs()
    gc.disable()  # the finished pipeline's cycles stay: only what the run itself let go is gone
    try:
        pipeline = Pipeline(cfg)
        pipeline.observe(LiveViews())  # the console's live view, which holds the recorder's stream while it runs
        summary = pipeline.run()
        left = {key: name for key, name in codecs().items() if key not in before}
    finally:
        gc.enable()
    assert source_summary(summary)["frames_out"] == 4 and (tmp_path / "out" / "annotated.mp4").stat().st_size > 0
    assert not left, f"codecs still held after the run: {sorted(left.values())}"


def test_a_sources_numbers_are_read_while_its_writer_adds_to_them():
    """A stream's writer thread times each stage (its first time adds the stage) and samples the rates while the
    console's loop and /metrics read them: no reader may meet a dict changing under it (the console answered 500 to
    a status request at the start of a run, when each stage has its first time). Runs start one after another on
    the writer's side, each with its stages' first times; the reader reads the latest for 2 s."""
    current = [SourceNumbers(SourceStats(), live=True)]
    stop, errors, reads = threading.Event(), [], 0

    def writer() -> None:
        while not stop.is_set():
            numbers = SourceNumbers(SourceStats(), live=True)
            current[0] = numbers
            for i in range(90):
                numbers.times.stage(f"stage{i % 9}", 1.0)
                numbers.wrote(i, 1, time.time())

    thread = threading.Thread(target=writer, name="test-writer")
    thread.start()
    try:
        ends = time.time() + 2.0
        while time.time() < ends:
            try:
                current[0].snapshot()
                reads += 1
            except RuntimeError as e:
                errors.append(str(e))
    finally:
        stop.set()
        thread.join()
    assert reads > 10 and not errors, errors[:3]
