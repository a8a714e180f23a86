"""Several sources in one process, one set of models: per-source outputs equal single-source runs, cameras keep
delivering when another one dies or comes back, files and cameras mix, a broken source ends only itself."""

import json
import threading
import time

import numpy as np
import pytest
import yaml

from sapiens2_stream.config import from_dict
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.pipeline import Pipeline, SourceFailed
from sapiens2_stream.runtime.pipeline_config import PipelineConfig, config_from, load_config
from tests.test_faults import cli, run_in_thread
from tests.test_pipeline import assert_same_records, free_port, read_jsonl, start_rtsp_server

BOXES = [[40, 40, 60, 150], [180, 50, 60, 150]]


def multi_config(tiny_dir, out, sources, **sections):
    data = {
        "sources": sources,
        "detector": {"type": "fixed", "boxes": BOXES},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96], "max_batch": 8}},
        "outputs": {"dir": str(out), "tracks": {"enabled": True}},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return from_dict(PipelineConfig, data)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clips")
    paths = {"a": folder / "a.mp4", "b": folder / "b.mp4", "c": folder / "c.mp4"}
    for i, path in enumerate(paths.values()):
        make_clip(path, frames=20 + 5 * i, size=(240, 320), people=1 + i % 2)
    return paths


def test_several_files_in_one_process_equal_single_runs(tmp_path, tiny_dir, clips):
    cfg = multi_config(tiny_dir, tmp_path / "multi", [{"name": n, "uri": str(p)} for n, p in clips.items()],
                       runtime={"max_frames_per_batch": 4})  # fmt: skip
    pipeline = Pipeline(cfg)
    summary = pipeline.run()
    assert set(summary["sources"]) == {"a", "b", "c"}
    assert summary["totals"]["frames_out"] == 20 + 25 + 30 == summary["totals"]["frames_in"]
    # batches mixed frames of different sources
    assert summary["batch_size"]["infer"]["max"] == 4
    for name, path in clips.items():
        single = tmp_path / f"single-{name}"
        one = from_dict(PipelineConfig, {
            "source": {"uri": str(path)}, "detector": {"type": "fixed", "boxes": BOXES},
            "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96], "max_batch": 8}},
            "outputs": {"dir": str(single), "tracks": {"enabled": True}}, "runtime": {"max_frames_per_batch": 4},
        })  # fmt: skip
        Pipeline(one).run()
        multi = tmp_path / "multi" / name
        assert sorted(p.name for p in multi.iterdir()) == sorted(p.name for p in single.iterdir())
        assert_same_records(read_jsonl(single / "results.jsonl"), read_jsonl(multi / "results.jsonl"))
        tracks = sorted(p.name for p in (multi / "tracks").iterdir())
        assert tracks == sorted(p.name for p in (single / "tracks").iterdir())


def test_cli_sources_named_and_summaries_per_source_and_total(tmp_path, tiny_dir, clips):
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({
        "source": {"uri": "replaced.mp4"}, "detector": {"type": "fixed", "boxes": BOXES},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [64, 48]}},
    }))  # fmt: skip
    out = tmp_path / "out"
    run = cli("run", spec, "--source", clips["a"], "--source", f"door={clips['b']}", "--output", out, "--no-progress")
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a", "door", "summary.json"]
    total = json.loads((out / "summary.json").read_text())
    for name, frames in (("a", 20), ("door", 25)):
        own = json.loads((out / name / "summary.json").read_text())
        assert own["frames_out"] == frames == len(read_jsonl(out / name / "results.jsonl"))
        assert total["sources"][name]["frames_out"] == frames
    assert total["totals"]["frames_out"] == 45 and "[door]" in run.stderr
    valid = cli("validate", spec, "--source", f"door={clips['b']}")
    assert valid.returncode == 0 and f"door={clips['b']}" in valid.stdout


@pytest.mark.parametrize(
    "text,message",
    [
        ("source: {uri: a.mp4}\nsources: [{name: x, uri: b.mp4}]\n", "both source: and sources: are given"),
        ("sources: [{name: 'bad name', uri: b.mp4}]\n", "sources[0].name 'bad name' must be letters"),
        ("sources: [{name: x, uri: a.mp4}, {name: x, uri: b.mp4}]\n", "sources[1].name 'x' is used twice"),
        ("sources: [{name: x}]\n", "sources[0].uri is missing"),
        ("sources: [{name: x, uri: a.mp4, transprt: udp}]\n", "did you mean 'transport'"),
    ],
)
def test_sources_errors_name_the_fix(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text + "models: {pose: {source: x}}\n")
    with pytest.raises(Sapiens2StreamError) as err:
        load_config(path)
    assert message in str(err.value)


def test_per_source_keys_and_names_from_the_command_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("sources:\n  - {name: door, uri: rtsp://10.0.0.5/s, transport: udp}\n"
                    "  - {name: hall, uri: rtsp://10.0.0.6/s}\nmodels: {pose: {source: x}}\n")  # fmt: skip
    cfg = load_config(path)
    assert [(c.source.name, c.source.transport, c.outputs.dir) for c in cfg.per_source()] == [
        ("door", "udp", "out/door"), ("hall", "tcp", "out/hall")]  # fmt: skip
    cfg = load_config(path, source=["clips/walk.mp4", "rtsp://cam/x?a=b", "lavfi:testsrc2=size=8x8", "yard=webcam:1"])
    assert [(s.name, s.uri) for s in cfg.sources] == [
        ("walk", "clips/walk.mp4"), ("cam2", "rtsp://cam/x?a=b"), ("cam3", "lavfi:testsrc2=size=8x8"),
        ("yard", "webcam:1")]  # fmt: skip
    single = load_config(path, source="lavfi:testsrc2=size=8x8")  # one plain --source: the single-source layout
    assert single.sources is None and single.source.uri == "lavfi:testsrc2=size=8x8"


def test_a_source_failing_mid_run_ends_only_its_own_stream(tmp_path, tiny_dir, clips):
    """A read error after 5 frames of one source (a disk or decoder failure, injected): the other source
    finishes, the failing one's outputs hold its 5 frames, and the run reports the failure at the end."""
    cfg = multi_config(tiny_dir, tmp_path / "out", [{"name": "good", "uri": str(clips["c"])},
                                                   {"name": "bad", "uri": str(clips["b"])}])  # fmt: skip
    pipeline = Pipeline(cfg)
    bad = pipeline.streams[1]
    real = bad.source.frames

    def failing(stop):
        for i, frame in enumerate(real(stop)):
            if i == 5:
                raise OSError("read error (injected)")
            yield frame

    bad.source.frames = failing
    with pytest.raises(SourceFailed, match="source bad: OSError: read error") as failed:
        pipeline.run()
    summary = failed.value.summary["sources"]
    assert summary["good"]["frames_out"] == 30 and summary["bad"]["frames_out"] == 5
    assert summary["bad"]["error"] == "read error (injected)"
    assert len(read_jsonl(tmp_path / "out" / "good" / "results.jsonl")) == 30
    assert len(read_jsonl(tmp_path / "out" / "bad" / "results.jsonl")) == 5


def test_file_and_camera_mixed(tmp_path, tiny_dir, clips):
    """The file's frames are never dropped; the camera is served while the file runs and after it ended."""
    camera = "lavfi:testsrc2=size=320x240:rate=30,realtime"
    cfg = multi_config(tiny_dir, tmp_path / "out", [{"name": "file", "uri": str(clips["c"])},
                                                   {"name": "cam", "uri": camera, "max_frames": 150}])  # fmt: skip
    seen = []
    summary = Pipeline(cfg, on_result=lambda r, p: seen.append((r.source, time.time()))).run()
    assert summary["sources"]["file"]["frames_out"] == 30 and not summary["sources"]["file"]["dropped"]
    cam = [t for s, t in seen if s == "cam"]
    file_end = max(t for s, t in seen if s == "file")
    assert sum(t < file_end for t in cam) >= 3 and sum(t > file_end for t in cam) >= 3


def test_three_cameras_one_dies_one_comes_back(tmp_path, tiny_dir):
    """Three RTSP servers (separate processes): cam2 is killed for good, cam3 killed and restarted. cam1 keeps
    delivering throughout, cam3 continues after it comes back, and nothing waits for cam2."""
    servers, sources = {}, []
    for i in (1, 2, 3):
        folder = tmp_path / f"served{i}"
        make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1 + i % 2)
        port = free_port()
        servers[i] = (folder, port, start_rtsp_server(folder, port))
        sources.append({"name": f"cam{i}", "uri": f"rtsp://127.0.0.1:{port}/cam.mp4?play_count=0", "timeout_s": 2.0,
                        "reconnect": {"initial_s": 0.2, "max_s": 1.0}})  # fmt: skip
    cfg = multi_config(tiny_dir, tmp_path / "out", sources, outputs={"tracks": {"enabled": False}})
    seen = []
    lock = threading.Lock()

    def on_result(result, pipeline):
        with lock:
            seen.append((result.source, time.time()))

    pipeline = Pipeline(cfg, on_result=on_result)
    thread, box = run_in_thread(pipeline)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and min(sum(s == f"cam{i}" for s, _ in seen) for i in (1, 2, 3)) < 5:
            time.sleep(0.1)
        for i in (2, 3):
            servers[i][2].kill()
            servers[i][2].wait()
        killed = time.time()
        time.sleep(2.0)
        folder, port, _ = servers[3]
        servers[3] = (folder, port, start_rtsp_server(folder, port))
        back = time.time()
        time.sleep(8.0)
        end = time.time()
    finally:
        pipeline.request_stop()
        thread.join(timeout=60)
        for _, _, proc in servers.values():
            proc.kill()
    summary = box["summary"]["sources"]
    times = {i: [t for s, t in seen if s == f"cam{i}"] for i in (1, 2, 3)}
    # cam1 delivered in every second after the other two went down
    for second in np.arange(killed + 0.5, end - 1.0, 1.0):
        assert any(second <= t < second + 1.0 for t in times[1]), f"cam1 silent at {second - killed:.1f}s"
    assert sum(t > back + 3 for t in times[3]) >= 5  # cam3 continued after it came back
    assert not [t for t in times[2] if t > killed + 3]  # cam2 is gone (its last buffered frames may drain)
    assert summary["cam3"]["reconnects"] >= 1 and summary["cam2"]["reconnects"] >= 1
    for i in (1, 2, 3):
        assert len(read_jsonl(tmp_path / "out" / f"cam{i}" / "results.jsonl")) == summary[f"cam{i}"]["frames_out"]


def test_each_source_resumes_from_its_own_record(tmp_path, tiny_dir, clips):
    """Stopped part-way (Ctrl-C: what is queued finishes), then resumed: each source continues after its own last
    JSON line, with no gap and no duplicate, and its video has one frame per input frame."""
    from tests.test_pipeline import video_times

    sources = [{"name": "a", "uri": str(clips["a"])}, {"name": "c", "uri": str(clips["c"])}]
    cfg = multi_config(tiny_dir, tmp_path / "out", sources, runtime={"max_frames_per_batch": 2, "queue_size": 2})
    pipeline = Pipeline(cfg)
    thread, box = run_in_thread(pipeline)
    wait = time.time() + 60
    while time.time() < wait and min(s.numbers.written for s in pipeline.streams) < 4:
        time.sleep(0.02)
    pipeline.request_stop()
    thread.join(timeout=60)
    first = {n: len(read_jsonl(tmp_path / "out" / n / "results.jsonl")) for n in ("a", "c")}
    assert box["summary"]["interrupted"] and first["a"] < 20 and first["c"] < 30
    summary = Pipeline(cfg, resume=True).run()
    assert {n: s["resumed_from_frame"] for n, s in summary["sources"].items()} == first
    for name, total in (("a", 20), ("c", 30)):
        records = read_jsonl(tmp_path / "out" / name / "results.jsonl")
        assert [r["frame"] for r in records] == list(range(total))
        assert len(video_times(tmp_path / "out" / name / "annotated.mp4")) == total


def test_a_file_detector_without_a_path_reads_each_cameras_own_detections(tmp_path, tiny_dir, clips):
    """`detector: {type: file}` with several videos: each reads the MOT det.txt beside it (one camera's boxes are
    not another's); a video without one is a configuration error naming its source, before any frame."""
    import shutil

    own = {"a": [40, 40, 60, 150], "b": [180, 50, 60, 150]}
    sources = []
    for name, box in own.items():
        video = tmp_path / f"{name}.mp4"
        shutil.copy(clips[name], video)
        video.with_suffix(".det.txt").write_text("".join(f"{i},-1,{','.join(map(str, box))},0.9\n"
                                                         for i in range(1, 31)))  # fmt: skip
        sources.append({"name": name, "uri": str(video)})
    cfg = multi_config(tiny_dir, tmp_path / "out", sources, detector={"type": "file"})
    assert not cfg.detector.path
    Pipeline(cfg).run()
    for name, box in own.items():
        records = read_jsonl(tmp_path / "out" / name / "results.jsonl")
        assert records and all(len(r["people"]) == 1 for r in records)
        assert all(np.allclose(r["people"][0]["box"], box, atol=1) for r in records), name
    shutil.copy(clips["c"], tmp_path / "c.mp4")
    with pytest.raises(Sapiens2StreamError, match="source c: .*c.mp4: detector type file without a path reads the "
                                                  "detections beside the video"):  # fmt: skip
        config_from({"sources": [*sources, {"name": "c", "uri": str(tmp_path / "c.mp4")}], "detector": {"type": "file"},
                     "models": {"pose": {"source": str(tiny_dir["pose"])}}})  # fmt: skip
