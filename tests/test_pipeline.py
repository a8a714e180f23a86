"""The streaming pipeline end to end: generated clips, a camera-paced lavfi source, a real RTSP server."""

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest

from sapiens2_stream.config import from_dict
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig
from tests.conftest import read_jsonl

SMALL = [256, 192]


def config(tmp_path, tiny_dir, uri, tasks=("pose",), **sections):
    data = {
        "source": {"uri": str(uri)},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {m: {"source": str(tiny_dir[m]), "input_size": SMALL, "max_batch": 4} for m in tasks},
        "outputs": {"dir": str(tmp_path / "out")},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return from_dict(PipelineConfig, data)


def assert_same_records(expected, got, px=0.05):
    """Two runs that must agree: the same frames, times, track ids and boxes, and keypoints (raw and smoothed)
    and scores equal up to float rounding. Rounding differs with the batch neighbours, the thread count and the
    CPU's kernels (AVX-512 or AVX2); the bounded sub-pixel refinement keeps it from moving a keypoint further
    than that, so `px` is a bound for every keypoint, not a share of them."""
    assert [r["frame"] for r in expected] == [r["frame"] for r in got]
    assert [r["pts"] for r in expected] == [r["pts"] for r in got]
    for a, b in zip(expected, got, strict=True):
        assert [p["track_id"] for p in a["people"]] == [p["track_id"] for p in b["people"]], a["frame"]
        for pa, pb in zip(a["people"], b["people"], strict=True):
            assert pa["box"] == pb["box"]
            for key, tolerance in (("keypoints", px), ("keypoints_smoothed", px), ("keypoint_scores", 1e-3)):
                if pa.get(key) is not None or pb.get(key) is not None:
                    assert np.allclose(pa[key], pb[key], atol=tolerance, rtol=0), (a["frame"], key)


def frame_age_bound_ms(pipeline, fps, q=95, own_output_ms=0.0):
    """The frame age (arrival to written) a live run may show at percentile q, from what the same run measured:
    a frame waits for at most the batch in progress, then takes a batch of its own (detect + infer), waits for at
    most one earlier result's output and has its own written, plus one frame interval of arrival jitter.
    `own_output_ms`: what the test's own result callback adds to each output (the write stage measures it too)."""
    m, written = pipeline.times, pipeline.streams[0].numbers.times
    batch = sum(np.percentile(np.multiply(m.stage_ms[s], m.batch_sizes[s]), q) for s in ("detect", "track", "infer"))
    output = sum(np.percentile(times, q) for s, times in written.stage_ms.items())  # temporal, smooth, write
    return 2 * batch + 2 * (output + own_output_ms) + 1000 / fps


def video_times(path):
    with av.open(str(path)) as c:
        return [float(f.time) for f in c.decode(video=0)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "walk.mp4"
    make_clip(path, frames=24, size=(240, 320), people=2, audio=True)
    return path


def test_every_frame_in_order_in_every_sink(tmp_path, tiny_dir, clip):
    cfg = config(
        tmp_path, tiny_dir, clip, tasks=("pose", "seg", "matting"),
        outputs={"tracks": {"enabled": True, "formats": ["npz", "parquet", "trc"]},
                 "video": {"draw": ["seg", "boxes", "pose"]}, "matting": {"alpha": True}},
        runtime={"max_frames_per_batch": 3},
    )  # fmt: skip
    summary = Pipeline(cfg).run()
    out = tmp_path / "out"
    with av.open(str(clip)) as c:
        source_times = [float(f.time) for f in c.decode(video=0)]
    records = read_jsonl(out / "results.jsonl")
    assert [r["frame"] for r in records] == list(range(24))
    assert [r["pts"] for r in records] == pytest.approx(source_times, abs=1e-6)
    for name in ("annotated.mp4", "composite.mp4", "alpha.mp4"):
        assert video_times(out / name) == pytest.approx(source_times, abs=1e-3), name
    with av.open(str(out / "annotated.mp4")) as c:
        assert c.streams.video[0].codec_context.name == "h264" and c.streams.video[0].pix_fmt == "yuv420p"
        assert len(c.streams.audio) == 1  # copied from the source
    person = records[5]["people"][0]
    assert len(person["keypoints"]) == 308 and len(person["keypoint_scores"]) == 308
    assert {"track_id", "box", "keypoints_smoothed"} <= set(person) and records[5]["flip"] == {
        "pose": True, "seg": True, "matting": True}  # fmt: skip
    assert records[0]["source"] == str(clip) and "pose" in records[0]["models"]
    assert sum(records[3]["seg_pixels"].values()) == 240 * 320
    tracks = sorted((out / "tracks").glob("*.npz"))
    assert len(tracks) == 2 and len(list((out / "tracks").glob("*.parquet"))) == 2
    data = np.load(tracks[0])
    assert data["keypoints_raw"].shape == (24, 308, 2) and data["coco17_smoothed"].shape == (24, 17, 2)
    source = source_summary(summary)
    assert source["frames_in"] == source["frames_out"] == 24 and not source["dropped"]
    assert summary["batch_size"]["infer"]["max"] == 3


def test_image_folder_source(tmp_path, tiny_dir):
    import cv2

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    cv2.imwrite(str(folder / "a.png"), rng.integers(0, 255, (120, 160, 3), dtype=np.uint8))
    cv2.imwrite(str(folder / "b.png"), rng.integers(0, 255, (120, 160), dtype=np.uint8))  # grayscale
    cv2.imwrite(str(folder / "c.png"), rng.integers(0, 255, (120, 160, 4), dtype=np.uint8))  # RGBA
    cfg = config(tmp_path, tiny_dir, folder, source={"fps": 2}, detector={"type": "full_frame"})
    Pipeline(cfg).run()
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert [r["pts"] for r in records] == [0.0, 0.5, 1.0]


def test_live_source_bounded_age_and_counted_drops(tmp_path, tiny_dir):
    """A camera-paced lavfi source at 30 fps faster than the models: frames are dropped, never queued up."""
    cfg = config(
        tmp_path, tiny_dir, "lavfi:testsrc2=size=320x240:rate=30,realtime", tasks=("pose", "seg"),
        source={"max_frames": 60},
        models={"seg": {"source": str(tiny_dir["seg"]), "input_size": [512, 384], "flip": "on"}},
        runtime={"queue_size": 2, "max_frames_per_batch": 1, "max_frame_age_s": 0.5},
        outputs={"video": {"enabled": False}},
    )  # fmt: skip
    pipeline = Pipeline(cfg)
    assert pipeline.streams[0].waiting.policy == "latest"
    summary = source_summary(pipeline.run())
    dropped = sum(summary["dropped"].values())
    assert summary["frames_in"] == 60
    assert dropped > 0 and summary["frames_out"] + dropped == 60
    # bounded by two batches of the work this run measured, not by the input's length
    age = summary["frame_age_ms"]
    assert age["p95"] <= frame_age_bound_ms(pipeline, 30) and age["max"] <= frame_age_bound_ms(pipeline, 30, 100), (
        age, frame_age_bound_ms(pipeline, 30), frame_age_bound_ms(pipeline, 30, 100))  # fmt: skip
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    frames = [r["frame"] for r in records]
    assert frames == sorted(frames) and len(set(frames)) == len(frames)


def test_slow_output_cannot_pile_up_latency(tmp_path, tiny_dir):
    """A live source whose outputs are slow (200 ms a frame, e.g. a slow screen): while the output is still busy
    with a batch of earlier results, the oldest waiting result is dropped (counted as output too slow), so what is
    written does not queue up behind the output."""
    cfg = config(
        tmp_path, tiny_dir, "lavfi:testsrc2=size=320x240:rate=30,realtime", source={"max_frames": 60},
        runtime={"queue_size": 4, "max_frames_per_batch": 1, "max_frame_age_s": 0.5},
        outputs={"video": {"enabled": False}},
    )  # fmt: skip
    slept = []

    def slow_output(result, pipeline):
        start = time.perf_counter()
        time.sleep(0.2)
        slept.append((time.perf_counter() - start) * 1e3)

    pipeline = Pipeline(cfg, on_result=slow_output)
    summary = source_summary(pipeline.run())
    assert summary["dropped"].get("output_too_slow", 0) > 0
    assert summary["frames_out"] + sum(summary["dropped"].values()) == summary["frames_in"] == 60
    # results did not queue up behind the slow output (without the drop the age grows with the run: 1.5 s here)
    bound = frame_age_bound_ms(pipeline, 30, 100, own_output_ms=max(slept))
    assert summary["frame_age_ms"]["max"] <= bound, (summary["frame_age_ms"], bound)


def test_normals_and_depth_videos_and_per_frame_maps(tmp_path, tiny_dir, clip):
    """Normal and pointmap models: a normals video and a depth video, one frame per input frame, and with
    geometry.maps the per-frame maps equal (to float16) what the models gave."""
    from sapiens2_stream.io.draw import depth_image, normals_image

    cfg = config(
        tmp_path, tiny_dir, clip, tasks=("normal", "pointmap"), detector={"type": "full_frame"},
        outputs={"video": {"enabled": False}, "geometry": {"maps": True}},
    )  # fmt: skip
    seen = {}
    Pipeline(cfg, on_result=lambda r, _: seen.setdefault(r.frame.index, (r.normals, r.pointmap))).run()
    out = tmp_path / "out"
    assert len(seen) == 24 and sorted(p.name for p in out.iterdir()) == [
        "depth.mp4", "maps", "normals.mp4", "results.jsonl"
    ]  # fmt: skip
    pts = [r["pts"] for r in read_jsonl(out / "results.jsonl")]
    assert np.allclose(video_times(out / "normals.mp4"), pts) and np.allclose(video_times(out / "depth.mp4"), pts)
    for index, (normals, pointmap) in seen.items():
        saved = np.load(out / "maps" / f"frame_{index:06d}.npz")
        assert saved["normals"].shape == saved["pointmap"].shape == (240, 320, 3)
        assert np.allclose(saved["normals"], normals, atol=1e-3)
        assert np.allclose(saved["pointmap"], pointmap, rtol=1e-3, atol=1e-3)
    # the videos show the colour maps of the first frame; compared in 8x8 block means, which the compression of
    # random-weight (noisy) maps keeps while it smears single pixels
    blocks = lambda image: image.astype(np.float32).reshape(30, 8, 40, 8, 3).mean(axis=(1, 3))  # noqa: E731
    for name, expected in (("depth", depth_image(seen[0][1][..., 2])), ("normals", normals_image(seen[0][0]))):
        with av.open(str(out / f"{name}.mp4")) as video:
            first = next(video.decode(video=0)).to_ndarray(format="rgb24")
        assert np.abs(blocks(first) - blocks(expected)).mean() < 5, name  # about 2-3; shifted by 8 px: 11-20


def _quiet_ports():
    """Ports no other process is handed meanwhile: above Ray's worker ports (10002-19999) and below the kernel's
    ephemeral range, from which every bind to port 0 (Ray's gRPC servers, any client) draws. A port taken from the
    ephemeral range can be given to such a process before the server under test binds it (seen in CI: the console's
    port answered in gRPC). Walked in order from a random start, so two calls in one test never return the same."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low <= 20000 + 100:
        while True:
            yield 0
    span = low - 20000
    start = random.randrange(span)
    for i in range(span):
        yield 20000 + (start + i) % span


QUIET_PORTS = _quiet_ports()


def source_summary(summary: dict) -> dict:
    """The part of a one-source run's summary that is its source's (summary.json has one shape for any number)."""
    (source,) = summary["sources"].values()
    return source


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and that no process binding port 0 will take before the test uses it."""
    for port in QUIET_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port left below the ephemeral range")


def wait_for_port(port: int, proc: subprocess.Popen, what: str) -> subprocess.Popen:
    """Until the server in `proc` accepts connections on 127.0.0.1:port (a run's console comes after torch and the
    models are loaded: well over 10 s on two cores shared with another suite)."""
    deadline = time.time() + 40
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{what} did not start")


def start_rtsp_server(folder, port):
    code = ("import asyncio, sys; from aio_rtsp_toolkit.server import serve; "
            "asyncio.run(serve(sys.argv[1], '127.0.0.1', int(sys.argv[2])))")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder), str(port)], stderr=subprocess.DEVNULL)
    return wait_for_port(port, proc, "RTSP test server")


@pytest.fixture
def rtsp_server(tmp_path):
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1)
    port = free_port()
    proc = start_rtsp_server(folder, port)
    yield f"rtsp://127.0.0.1:{port}/cam.mp4", folder, port, proc
    proc.kill()
    proc.wait()


def test_rtsp_stream(tmp_path, tiny_dir, rtsp_server):
    url, *_ = rtsp_server
    cfg = config(tmp_path, tiny_dir, url + "?play_count=0", source={"max_frames": 20}, runtime={"policy": "block"})
    summary = source_summary(Pipeline(cfg).run())
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert summary["frames_out"] == len(records) == 20
    pts = [r["pts"] for r in records]
    assert all(b > a for a, b in zip(pts, pts[1:], strict=False)), pts


NGINX_RTMP = Path("/usr/lib/nginx/modules/ngx_rtmp_module.so")
NGINX = shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin")  # root's programs, not always on PATH

# Publishes a clip to an RTMP server in real time, over and over, as a camera or OBS would.
PUBLISH = """
import sys, time, av
clip, url = sys.argv[1], sys.argv[2]
out = av.open(url, "w", format="flv")
stream, start, offset = None, time.time(), 0.0
while True:
    with av.open(clip) as inp:
        video = inp.streams.video[0]
        stream = stream or out.add_stream_from_template(video)
        for packet in inp.demux(video):
            if packet.dts is None:
                continue
            shift = int(round(offset / video.time_base))
            packet.pts, packet.dts = packet.pts + shift, packet.dts + shift
            time.sleep(max(0.0, float(packet.pts * video.time_base) - (time.time() - start)))
            packet.stream = stream
            out.mux(packet)
        offset += float(video.duration * video.time_base)
"""


needs_nginx_rtmp = pytest.mark.skipif(
    not (NGINX and NGINX_RTMP.exists()),
    reason="needs Debian's nginx-core and libnginx-mod-rtmp (.ci/run installs them)",
)


def start_nginx_rtmp(folder, port):
    """A real RTMP server: nginx's RTMP module on 127.0.0.1:port, relaying what is published to live/NAME."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "nginx.conf"
    conf.write_text(f"""load_module {NGINX_RTMP};
daemon off; master_process off; pid {folder}/nginx.pid; error_log {folder}/nginx.log;
events {{ worker_connections 64; }}
rtmp {{ server {{ listen 127.0.0.1:{port}; application live {{ live on; }} }} }}
""")
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(folder), "-e", str(folder / "nginx.log")])
    return wait_for_port(port, proc, "nginx RTMP server")


@needs_nginx_rtmp
def test_rtmp_stream(tmp_path, tiny_dir, clip):
    """A real RTMP server (nginx's RTMP module on 127.0.0.1) relaying a clip that a publisher pushes in real time."""
    port = free_port()
    server = start_nginx_rtmp(tmp_path / "nginx", port)
    url = f"rtmp://127.0.0.1:{port}/live/cam"
    publisher = subprocess.Popen([sys.executable, "-c", PUBLISH, str(clip), url], stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # the publisher is on air
        cfg = config(tmp_path, tiny_dir, url, source={"max_frames": 30}, runtime={"policy": "block"})
        summary = source_summary(Pipeline(cfg).run())
    finally:
        publisher.kill()
        server.kill()
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert summary["frames_out"] == len(records) == 30  # more than the clip holds: the loop plays on
    pts = [r["pts"] for r in records]
    assert all(b > a for a, b in zip(pts, pts[1:], strict=False)), pts
    assert all(len(r["people"]) == 2 for r in records)
    assert len(video_times(tmp_path / "out" / "annotated.mp4")) == 30


def test_demo_runs_offline(tmp_path):
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path / "yolo")}
    out = subprocess.run(
        [sys.executable, "-m", "sapiens2_stream.cli", "demo", "--output", str(tmp_path / "demo"), "--max-frames", "6",
         "--no-progress"], capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "toy Sapiens2 models" in out.stderr  # says what it runs
    records = read_jsonl(tmp_path / "demo" / "results.jsonl")
    assert len(records) == 6 and all(len(r["people"]) == 2 and r["seg_pixels"] for r in records)
    assert len(video_times(tmp_path / "demo" / "annotated.mp4")) == 6
    with av.open(str(tmp_path / "demo" / "annotated.mp4")) as video:  # big enough to see the skeleton follow
        assert (video.streams.video[0].width, video.streams.video[0].height) == (640, 360)
    assert min(p["box"][3] for r in records for p in r["people"]) >= 200


def test_track_exports_parquet_and_trc(tmp_path, tiny_dir, clip):
    import pyarrow.parquet as pq

    tracks = {"enabled": True, "formats": ["npz", "parquet", "trc"]}
    cfg = config(tmp_path, tiny_dir, clip, outputs={"tracks": tracks, "video": {"enabled": False}},
                 smoothing={"method": "rts"})  # fmt: skip
    Pipeline(cfg).run()
    tracks = tmp_path / "out" / "tracks"
    npz = np.load(tracks / "track_0001.npz")
    table = pq.read_table(tracks / "track_0001.parquet")
    assert table.num_rows == 24 and {"frame_index", "pts", "keypoints_smoothed", "coco17_scores"} <= set(
        table.column_names
    )
    assert np.allclose(np.array(table["keypoints_raw"].to_pylist()).reshape(24, 308, 2), npz["keypoints_raw"])
    assert list(npz["coco17_names"][[9, 10]]) == ["left_wrist", "right_wrist"]
    assert np.allclose(npz["coco17_raw"][:, 9], npz["keypoints_raw"][:, 62])  # COCO left wrist is 308-index 62
    lines = (tracks / "track_0001.trc").read_text().splitlines()
    assert lines[0].startswith("PathFileType\t4") and lines[2].split("\t")[2:4] == ["24", "17"]
    first = lines[6].split("\t")
    assert float(first[2]) == pytest.approx(npz["coco17_smoothed"][0, 0, 0], abs=1e-3)
    assert float(first[3]) == pytest.approx(-npz["coco17_smoothed"][0, 0, 1], abs=1e-3)  # Y up


def test_yolo_detector_offline(tmp_path, monkeypatch):
    """Ultralytics from a model .yaml (random init, no download): persons only, COCO xywh + score."""
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "yolo"))
    from sapiens2_stream.detect import make_detector
    from sapiens2_stream.detect.options import DetectorConfig

    detector = make_detector(DetectorConfig(weights="yolo11n.yaml", conf=0.0, min_size=0, max_people=7))
    frame = np.random.default_rng(0).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    (boxes,) = detector.detect([frame])
    assert boxes.shape[1] == 5 and len(boxes) <= 7 and boxes.dtype == np.float32
    if len(boxes):
        assert (boxes[:, 2:4] >= 0).all() and (boxes[:, 0] + boxes[:, 2] <= 320 + 1).all()
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    from sapiens2_stream.errors import Sapiens2StreamError

    with pytest.raises(Sapiens2StreamError, match="not a local file and YOLO_OFFLINE is set"):
        make_detector(DetectorConfig(weights="yolo11n.pt"))


def test_http_stream(tmp_path, tiny_dir, clip):
    """An HTTP source (a local http.server on 127.0.0.1 serving the clip)."""
    folder = tmp_path / "web"
    folder.mkdir()
    shutil.copy(clip, folder / "clip.mp4")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_port(port, server, "HTTP test server")
        cfg = config(tmp_path, tiny_dir, f"http://127.0.0.1:{port}/clip.mp4", source={"max_frames": 10},
                     runtime={"policy": "block"})  # fmt: skip
        summary = source_summary(Pipeline(cfg).run())
    finally:
        server.kill()
    assert summary["frames_out"] == 10 and [r["frame"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")] == list(
        range(10)
    )


def test_a_file_never_drops_frames_whatever_the_policy(tmp_path, tiny_dir, clip):
    """`latest` and `drop_oldest` are for live sources: a file's frames are all processed and written."""
    for policy in ("latest", "drop_oldest"):
        cfg = config(tmp_path / policy, tiny_dir, clip, runtime={"policy": policy, "queue_size": 1},
                     outputs={"video": {"enabled": False}})  # fmt: skip
        summary = source_summary(Pipeline(cfg).run())
        assert summary["frames_out"] == 24 and not summary["dropped"], policy
        assert [r["frame"] for r in read_jsonl(tmp_path / policy / "out" / "results.jsonl")] == list(range(24))


@pytest.mark.parametrize("kind", ["video", "photos", "camera"])
def test_demo_on_your_own_footage_picks_a_detector_that_works(tmp_path, clip, kind, request):
    """`demo --source` without --detector: YOLO where its weights are, else the whole frame; it says which. On a
    file, a folder of photos and an RTSP camera."""
    import cv2

    source = clip
    if kind == "camera":
        source = request.getfixturevalue("rtsp_server")[0] + "?play_count=0"
    if kind == "photos":
        source = tmp_path / "photos"
        source.mkdir()
        for n, frame in enumerate(av.open(str(clip)).decode(video=0)):
            if n < 3:
                cv2.imwrite(str(source / f"{n}.jpg"), frame.to_ndarray(format="bgr24"))
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path / "yolo")}
    out = subprocess.run(
        [sys.executable, "-m", "sapiens2_stream.cli", "demo", "--source", str(source), "--output",
         str(tmp_path / "demo"), "--max-frames", "3", "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "detector: the whole frame" in out.stderr  # no yolo11n.pt here, and it says so
    records = read_jsonl(tmp_path / "demo" / "results.jsonl")
    assert len(records) == 3 and all(len(r["people"]) == 1 for r in records)
