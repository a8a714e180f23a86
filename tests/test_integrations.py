"""Results where operators look, each against the real thing: the annotated re-stream received from nginx's RTMP
module (killed and restarted mid-run), MQTT through a real mosquitto broker to a real paho subscriber (killed and
restarted mid-run), Prometheus scrapes and /healthz during a real RTSP run whose server is killed and restarted.
A slow or dead integration never slows or stops the pipeline, and what it could not take is counted."""

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

import av
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sapiens2_stream.detect.base import Detector
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.models.metadata import pose_metadata
from sapiens2_stream.runtime.pipeline import Pipeline
from tests.test_faults import run_in_thread
from tests.test_pipeline import (
    config,
    free_port,
    needs_nginx_rtmp,
    read_jsonl,
    source_summary,
    start_nginx_rtmp,
    start_rtsp_server,
    wait_for_port,
)  # fmt: skip

CAMERA = "lavfi:testsrc2=size=320x240:rate=15,realtime"


def outage(server, restart, seconds):
    """Kill a real server, wait, start it again: (the new server, when it went, when it came back)."""
    server.kill()
    server.wait()
    gone = time.time()
    time.sleep(seconds)
    return restart(), gone, time.time()


def wait_until(condition, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ------------------------------------------------------------------------------------------------ re-stream


class StreamWatcher:
    """A viewer: reads the re-stream from the RTMP server with PyAV, reconnecting, and keeps what it saw."""

    def __init__(self, url):
        self.url, self.seen, self.stop = url, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                options = {"probesize": "32768", "analyzeduration": "0"}  # join within a keyframe
                with av.open(self.url, options=options, timeout=(5, 3)) as stream:
                    for frame in stream.decode(video=0):
                        self.seen.append((time.time(), frame.to_ndarray(format="rgb24")))
                        if self.stop.is_set():
                            return
            except (av.FFmpegError, OSError):
                time.sleep(0.3)


@needs_nginx_rtmp
def test_restream_to_rtmp_survives_the_server_going_away(tmp_path, tiny_dir):
    port = free_port()
    server = start_nginx_rtmp(tmp_path / "nginx", port)
    cfg = config(tmp_path, tiny_dir, CAMERA, source={"max_frames": 15 * 16},
                 outputs={"stream": {"url": f"rtmp://127.0.0.1:{port}/live/{{source}}",
                                     "reconnect": {"initial_s": 0.3, "max_s": 1.0}}})  # fmt: skip
    written = []
    pipeline = Pipeline(cfg, on_result=lambda r, p: written.append(time.time()))
    watcher = StreamWatcher(f"rtmp://127.0.0.1:{port}/live/pipeline")  # {source}: the pipeline's name
    thread, box = run_in_thread(pipeline)
    try:
        wait_until(lambda: len(watcher.seen) >= 20, 60, "the re-stream")
        server, killed, back = outage(server, lambda: start_nginx_rtmp(tmp_path / "nginx", port), 2.5)
        wait_until(lambda: any(t > back for t, _ in watcher.seen[-5:]), 30, "the re-stream to come back")
        thread.join(timeout=60)
    finally:
        watcher.stop.set()
        server.kill()
        pipeline.request_stop()
    summary = source_summary(box["summary"])
    assert sum(killed < t < back for t in written) >= 15  # the run went on while the server was away
    stream = summary["outputs"]["stream"]
    assert stream["connections"] >= 2 and stream["dropped"] > 0 and stream["sent"] > 20
    # what the viewer got is our annotated picture at the frame's size
    with av.open(str(tmp_path / "out" / "annotated.mp4")) as video:
        ours = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
    blocks = lambda im: im.astype(np.float32).reshape(30, 8, 40, 8, 3).mean(axis=(1, 3))  # noqa: E731
    got = watcher.seen[5][1]
    assert got.shape == (240, 320, 3)
    assert min(np.abs(blocks(got) - blocks(o)).mean() for o in ours) < 4


RTSP_SERVER = shutil.which("rtsp-server-perl")


@pytest.mark.skipif(not RTSP_SERVER, reason="needs Debian's rtsp-server-perl (.ci/run installs it)")
def test_restream_to_an_rtsp_server_with_record(tmp_path, tiny_dir):
    """RTSP RECORD over UDP (the transport rtsp-server-perl takes) to a real server; a viewer reads it back."""
    source_port, client_port = free_port(), free_port()
    server = subprocess.Popen([RTSP_SERVER, "--clientport", str(client_port), "--serverport", str(source_port),
                               "--client_listen_address", "127.0.0.1", "--source_listen_address", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for_port(source_port, server, "rtsp-server-perl")
    cfg = config(
        tmp_path,
        tiny_dir,
        CAMERA,
        source={"max_frames": 15 * 8, "name": "door"},
        outputs={"stream": {"url": f"rtsp://127.0.0.1:{source_port}/{{source}}", "transport": "udp"}},
    )
    seen = []

    def watch():
        for _ in range(40):
            try:
                with av.open(f"rtsp://127.0.0.1:{client_port}/door", options={"rtsp_transport": "udp"},
                             timeout=(5, 3)) as stream:  # fmt: skip
                    for frame in stream.decode(video=0):
                        seen.append(frame.to_ndarray(format="rgb24"))
                        if len(seen) >= 30:
                            return
            except (av.FFmpegError, OSError):
                time.sleep(0.3)  # not published yet

    viewer = threading.Thread(target=watch, daemon=True)
    viewer.start()
    try:
        summary = source_summary(Pipeline(cfg).run())
        viewer.join(timeout=20)
    finally:
        server.kill()
    # the viewer joins late and UDP drops what a loaded host cannot take (18 of 30 seen beside two other suites)
    assert len(seen) >= 10 and seen[0].shape == (240, 320, 3)
    stream = summary["outputs"]["stream"]  # every frame written went out (a busy host writes fewer of the 120)
    assert stream["sent"] + stream["dropped"] == summary["frames_out"] and stream["sent"] >= 30
    assert stream["connections"] == 1


# ------------------------------------------------------------------------------------------------ MQTT

MOSQUITTO = shutil.which("mosquitto", path="/usr/sbin:/usr/bin")
needs_mosquitto = pytest.mark.skipif(not MOSQUITTO, reason="needs Debian's mosquitto (.ci/run installs it)")


def start_broker(folder, port):
    """A real MQTT broker: mosquitto as a plain process on 127.0.0.1:port."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return wait_for_port(port, proc, "mosquitto")


class Subscriber:
    """A real paho subscriber to sapiens2/#, subscribing again whenever it reconnects."""

    def __init__(self, port):
        import paho.mqtt.client as mqtt

        self.messages, self.lock = [], threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-sub-{port}")
        self.client.on_connect = lambda c, *_: c.subscribe("sapiens2/#", qos=1)
        self.client.on_message = self._message
        self.client.reconnect_delay_set(0.1, 0.5)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        wait_until(self.client.is_connected, 10, "the subscriber")

    def _message(self, client, userdata, message):
        with self.lock:
            self.messages.append((time.time(), message.topic, message.payload.decode(), message.retain))

    def on(self, topic):
        with self.lock:
            return [(t, json.loads(p) if p.startswith("{") else p) for t, top, p, _ in self.messages if top == topic]

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


class Scripted(Detector):
    """A detector that sees one person in frames 0-14 and another in frames 10-39 (in the order frames come)."""

    def __init__(self):
        self.calls = 0

    def detect(self, frames):
        out = []
        for _ in frames:
            i, self.calls = self.calls, self.calls + 1
            boxes = [[20 + i, 40, 60, 150, 0.9]] if i < 15 else []
            boxes += [[200 - i, 50, 60, 150, 0.9]] if i >= 10 else []
            out.append(np.array(boxes, np.float32).reshape(-1, 5))
        return out


@needs_mosquitto
def test_mqtt_frames_and_track_events_match_the_results(tmp_path, tiny_dir):
    port = free_port()
    broker = start_broker(tmp_path / "broker", port)
    sub = Subscriber(port)
    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=40, size=(240, 320), people=2)
    cfg = config(tmp_path, tiny_dir, clip, outputs={"mqtt": {"host": "127.0.0.1", "port": port}},
                 tracker={"max_lost_s": 0.2})  # fmt: skip
    try:
        pipeline = Pipeline(cfg)
        pipeline.loaded.detector = Scripted()
        summary = source_summary(pipeline.run())
        wait_until(lambda: len(sub.on("sapiens2/pipeline/frames")) >= 40, 10, "every frame message")
        time.sleep(0.5)
    finally:
        sub.close()
        broker.kill()
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    frames = [m for _, m in sub.on("sapiens2/pipeline/frames")]
    assert [m["frame"] for m in frames] == [r["frame"] for r in records] == list(range(40))  # in order, all
    coco = list(pose_metadata().coco17)
    for m, r in zip(frames, records, strict=True):
        assert m["pts"] == r["pts"] and m["source"] == "pipeline"
        for mp, rp in zip(m["people"], r["people"], strict=True):
            assert mp["track_id"] == rp["track_id"] and mp["box"] == rp["box"]
            kp = np.array(mp["keypoints"])
            assert kp.shape == (17, 3)
            assert np.allclose(kp[:, :2], np.array(rp["keypoints_smoothed"])[coco], atol=0.006)
            assert np.allclose(kp[:, 2], np.array(rp["keypoint_scores"])[coco], atol=0.006)
    events = [m for _, m in sub.on("sapiens2/pipeline/events")]
    tracks = {p["track_id"] for r in records for p in r["people"]}
    started = {e["track_id"]: e for e in events if e["event"] == "track_started"}
    ended = {e["track_id"]: e for e in events if e["event"] == "track_ended"}
    assert set(started) == set(ended) == tracks == {1, 2}
    assert ended[1]["reason"] == "lost" and ended[2]["reason"] == "run ended"  # the first left mid-run
    for track_id in tracks:
        seen = [r for r in records if any(p["track_id"] == track_id for p in r["people"])]
        assert started[track_id]["pts"] == seen[0]["pts"] and ended[track_id]["last_pts"] == seen[-1]["pts"]
        assert ended[track_id]["frames"] == len(seen) and ended[track_id]["last_box"] == next(
            p["box"] for p in seen[-1]["people"] if p["track_id"] == track_id)  # fmt: skip
    first_ended = events.index(ended[1])
    assert any(e["event"] == "track_started" and e["track_id"] == 2 for e in events[:first_ended])
    status = [m for _, m in sub.on("sapiens2/status")]
    assert status[0] == "online" and status[-1] == "offline"
    assert summary["outputs"]["mqtt"] == {"sent": 40 + 2 * len(tracks), "dropped": 0}


@needs_mosquitto
def test_mqtt_broker_killed_and_restarted_mid_run(tmp_path, tiny_dir):
    port = free_port()
    broker = start_broker(tmp_path / "broker", port)
    sub = Subscriber(port)
    cfg = config(
        tmp_path,
        tiny_dir,
        CAMERA,
        source={"max_frames": 15 * 14},
        outputs={"mqtt": {"host": "127.0.0.1", "port": port, "queue": 10}, "video": {"enabled": False}},
    )
    written = []
    pipeline = Pipeline(cfg, on_result=lambda r, p: written.append(time.time()))
    thread, box = run_in_thread(pipeline)
    try:
        wait_until(lambda: len(sub.on("sapiens2/pipeline/frames")) >= 15, 60, "frame messages")
        broker, killed, back = outage(broker, lambda: start_broker(tmp_path / "broker", port), 3.0)
        thread.join(timeout=60)
        time.sleep(1.0)
    finally:
        sub.close()
        broker.kill()
        pipeline.request_stop()
    summary = source_summary(box["summary"])
    # the run never waited for the broker: it wrote on through the outage at its usual pace (half of it or more:
    # the rate, not a count, so a host busy with other work slows both alike)
    during = sum(killed < t < back for t in written)
    usual = (len(written) - during) / (written[-1] - written[0] - (back - killed))
    assert during >= 3 and during / (back - killed) >= 0.5 * usual, (during, usual)
    after = [t for t, _ in sub.on("sapiens2/pipeline/frames") if t > back]
    assert len(after) >= 20  # messages flow again
    assert summary["outputs"]["mqtt"]["dropped"] > 0  # more than the queue of 10 waited: dropped, counted
    frames = [m["frame"] for _, m in sub.on("sapiens2/pipeline/frames")]
    assert frames == sorted(frames)


@needs_mosquitto
def test_mqtt_source_events_when_the_camera_drops(tmp_path, tiny_dir):
    port = free_port()
    broker = start_broker(tmp_path / "broker", port)
    sub = Subscriber(port)
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1)
    rtsp_port = free_port()
    server = start_rtsp_server(folder, rtsp_port)
    cfg = config(tmp_path, tiny_dir, f"rtsp://127.0.0.1:{rtsp_port}/cam.mp4?play_count=0",
                 source={"timeout_s": 1.5, "reconnect": {"initial_s": 0.2, "max_s": 1.0}, "name": "door"},
                 outputs={"mqtt": {"host": "127.0.0.1", "port": port, "topic": "sapiens2/site/{source}"}})  # fmt: skip
    pipeline = Pipeline(cfg)
    thread, box = run_in_thread(pipeline)
    try:
        wait_until(lambda: len(sub.on("sapiens2/site/door/frames")) >= 10, 60, "frame messages")
        server.kill()
        server.wait()
        time.sleep(2.0)
        server = start_rtsp_server(folder, rtsp_port)
        wait_until(lambda: any(m["event"] == "source_reconnected" for _, m in sub.on("sapiens2/site/door/events")),
                   30, "the reconnected event")  # fmt: skip
    finally:
        pipeline.request_stop()
        thread.join(timeout=60)
        server.kill()
        sub.close()
        broker.kill()
    events = [m["event"] for _, m in sub.on("sapiens2/site/door/events") if m["event"].startswith("source")]
    assert events[:2] == ["source_disconnected", "source_reconnected"]
    gap = next(m for _, m in sub.on("sapiens2/site/door/events") if m["event"] == "source_reconnected")["gap_s"]
    assert gap > 1.5 and source_summary(box["summary"])["reconnects"] >= 1


# ------------------------------------------------------------------------------------------------ metrics


def scrape(port, path="/metrics"):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


def test_metrics_and_health_during_a_real_rtsp_run(tmp_path, tiny_dir):
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1)
    rtsp_port, metrics_port = free_port(), free_port()
    server = start_rtsp_server(folder, rtsp_port)
    cfg = config(tmp_path, tiny_dir, f"rtsp://127.0.0.1:{rtsp_port}/cam.mp4?play_count=0",
                 source={"timeout_s": 1.5, "reconnect": {"initial_s": 0.2, "max_s": 1.0}},
                 runtime={"metrics": {"port": metrics_port}})  # fmt: skip
    pipeline = Pipeline(cfg)
    thread, box = run_in_thread(pipeline)
    health = []
    try:
        wait_until(lambda: pipeline.streams[0].numbers.written >= 10, 60, "the first results")
        status, text = scrape(metrics_port)
        assert status == 200
        values = samples(text)
        assert values[("sapiens2_frames_written_total", (("source", "pipeline"),))] >= 10
        assert values[("sapiens2_frame_age_seconds_count", (("source", "pipeline"),))] >= 10
        health.append(scrape(metrics_port, "/healthz"))
        server.kill()
        server.wait()
        wait_until(lambda: scrape(metrics_port, "/healthz")[0] == 503, 15, "/healthz to say the camera is silent")
        health.append(scrape(metrics_port, "/healthz"))
        server = start_rtsp_server(folder, rtsp_port)
        wait_until(lambda: scrape(metrics_port, "/healthz")[0] == 200, 30, "/healthz to recover")
        health.append(scrape(metrics_port, "/healthz"))
    finally:
        pipeline.request_stop()
        thread.join(timeout=60)
        server.kill()
    assert [h[0] for h in health] == [200, 503, 200]
    down = json.loads(health[1][1])  # silent (connected, no frames) or, once the reader saw the drop, reconnecting
    assert down.get("silent") == ["pipeline"] or down.get("not_connected") == {"pipeline": "reconnecting"}, down
    assert json.loads(health[0][1])["status"] == "ok"
    # at the end, the metrics say what summary.json says
    summary = source_summary(box["summary"])
    from prometheus_client import generate_latest

    final = samples(generate_latest(pipeline.monitor.registry).decode())
    label = (("source", "pipeline"),)
    assert final[("sapiens2_frames_in_total", label)] == summary["frames_in"]
    assert final[("sapiens2_frames_written_total", label)] == summary["frames_out"]
    assert final[("sapiens2_reconnects_total", label)] == summary["reconnects"] >= 1
    assert final[("sapiens2_frame_age_seconds_count", label)] == summary["frames_out"]
    assert final[("sapiens2_processed_fps", label)] == pytest.approx(summary["processed_fps"], abs=0.01)
    for reason in ("waiting_too_long", "queue_full", "output_too_slow"):
        drop = (("reason", reason), ("source", "pipeline"))
        assert final[("sapiens2_frames_dropped_total", drop)] == summary["dropped"].get(reason, 0)
    with pytest.raises(OSError):  # the server is gone with the run
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)
