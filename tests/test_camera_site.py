"""A camera site as an operator runs it: a camera down when the run starts (a real RTSP server started later, then
stopped again), passwords in every kind of URL with each failing (nothing of them in any byte the tool says or
writes), MQTT over TLS to a real mosquitto with a CA made in the test, signed webhooks to an HTTPS receiver that
checks them, the console over HTTPS, `${VAR}` in the YAML."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sapiens2_stream.errors import Sapiens2StreamError, redact
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.pipeline_config import config_from
from tests.test_integrations import MOSQUITTO, Subscriber, needs_mosquitto, start_broker, wait_until
from tests.test_pipeline import SMALL, free_port, start_rtsp_server, video_times, wait_for_port
from tests.tls import make_ca, make_server_cert

SECRET = "S3cretPw"
FIXED = {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]}
ZONE = {"polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "anchor": "box_bottom", "max_people": 1, "min_s": 0.05}


def pose(tiny_dir) -> dict:
    return {"pose": {"source": str(tiny_dir["pose"]), "input_size": list(SMALL), "max_batch": 4}}


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def start_cli(spec: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})  # fmt: skip


def get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """(status, body) of a GET, errors included (a 503 is an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def health(port: int) -> tuple[int, dict]:
    status, body = get(f"http://127.0.0.1:{port}/healthz")
    return status, json.loads(body)


# ------------------------------------------------------------------------------------------------ cameras down


@needs_mosquitto
def test_a_camera_down_at_start_is_tried_while_the_other_runs(tmp_path, tiny_dir):
    """Two RTSP cameras, the second's server started 8 s into the run: the first writes all along; the late one's
    JSONL and video start with its first frame; /healthz is 503 naming it (connecting), then 200, then 503 again
    (reconnecting) when its server stops mid-run; /metrics has its up gauge; the run never exits on its own. Its
    password, taken from the environment through `${CAM_PASSWORD}`, is in no byte of what the run says or writes,
    nor on MQTT."""
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=60, size=(240, 320), people=1)
    port_a, port_b, metrics, broker_port = free_port(), free_port(), free_port(), free_port()
    server_a = start_rtsp_server(folder, port_a)
    broker = start_broker(tmp_path / "broker", broker_port)
    subscriber = Subscriber(broker_port)
    reconnect = {"initial_s": 0.2, "max_s": 1.0}
    out = tmp_path / "out"
    spec = write_yaml(tmp_path / "site.yaml", {
        "sources": [
            {"name": "a", "uri": f"rtsp://127.0.0.1:{port_a}/cam.mp4?play_count=0", "reconnect": reconnect},
            {"name": "b", "uri": f"rtsp://admin:${{CAM_PASSWORD}}@127.0.0.1:{port_b}/cam.mp4?play_count=0",
             "reconnect": reconnect, "timeout_s": 2},
        ],
        "detector": FIXED, "models": pose(tiny_dir),
        "runtime": {"metrics": {"port": metrics}, "policy": "block"},  # (block: no frame dropped, so the first is 0)
        "outputs": {"dir": str(out), "mqtt": {"host": "127.0.0.1", "port": broker_port}},
    })  # fmt: skip
    proc = start_cli(spec, {"CAM_PASSWORD": SECRET})
    server_b = None
    try:
        wait_until(lambda: lines(out / "a" / "results.jsonl") >= 5 or proc.poll() is not None, 120, "camera a")
        assert proc.poll() is None, proc.communicate()
        status, body = health(metrics)
        assert status == 503 and body["not_connected"] == {"b": "connecting"}, body
        text = get(f"http://127.0.0.1:{metrics}/metrics")[1].decode()
        assert 'sapiens2_source_up{source="a"} 1.0' in text and 'sapiens2_source_up{source="b"} 0.0' in text
        time.sleep(max(0.0, 8.0 - lines(out / "a" / "results.jsonl") / 30))  # the late camera: ~8 s into the run
        before_b = lines(out / "a" / "results.jsonl")
        assert lines(out / "b" / "results.jsonl") == 0
        server_b = start_rtsp_server(folder, port_b)
        wait_until(lambda: lines(out / "b" / "results.jsonl") >= 5, 60, "camera b's first results")
        wait_until(lambda: health(metrics)[0] == 200, 20, "/healthz 200 with both cameras up")
        server_b.kill()
        server_b.wait()
        # (block policy: the reader first drains what the socket still holds at the models' pace, slow on a busy host)
        wait_until(lambda: health(metrics)[1].get("not_connected") == {"b": "reconnecting"}, 90, "b reconnecting")
        time.sleep(2.0)
        assert proc.poll() is None  # a camera down is never the end of the run
        assert lines(out / "a" / "results.jsonl") > before_b  # a went on all along
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        for p in (proc, server_a, server_b, broker):
            if p is not None and p.poll() is None:
                p.kill()
        subscriber.close()
    assert proc.returncode == 130, stderr
    first_b = json.loads((out / "b" / "results.jsonl").read_text().splitlines()[0])
    assert first_b["frame"] == 0 and first_b["source"] == f"rtsp://admin:***@127.0.0.1:{port_b}/cam.mp4?play_count=0"
    for name in ("a", "b"):  # each video holds exactly its JSONL's frames, the late one from its first
        assert len(video_times(out / name / "annotated.mp4")) == lines(out / name / "results.jsonl") > 0
    said = [line for line in stderr.splitlines() if "source b:" in line]
    assert len([s for s in said if "trying again" in s]) == 1 and "cannot open" in said[0], stderr
    assert any(s.endswith("source b: connected") for s in said), stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sources"]["b"]["connection"]["state"] == "reconnecting"
    published = json.dumps(subscriber.on("sapiens2/b/frames")) + json.dumps(subscriber.on("sapiens2/b/events"))
    assert '"frame": 0' in published
    assert_nowhere(SECRET, stdout + stderr + published, out)


def assert_nowhere(secret: str, said: str, folder: Path) -> None:
    """`secret` in no byte of `said` nor of any file under `folder`."""
    assert secret not in said
    leaks = [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaks, leaks


def test_a_camera_that_never_comes_up_gives_up_as_a_failed_source(tmp_path, tiny_dir):
    """`source.reconnect.give_up_s`: a camera down from the start ends as a failed source after that long; the
    file source beside it is written whole; exit 1."""
    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=12, size=(240, 320), people=2)
    out = tmp_path / "out"
    spec = write_yaml(tmp_path / "p.yaml", {
        "sources": [{"name": "file", "uri": str(clip)},
                    {"name": "cam", "uri": f"rtsp://127.0.0.1:{free_port()}/x", "reconnect": {"give_up_s": 2}}],
        "detector": FIXED, "models": pose(tiny_dir), "outputs": {"dir": str(out)},
    })  # fmt: skip
    proc = start_cli(spec)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr
    assert lines(out / "file" / "results.jsonl") == 12
    assert re.search(r"gave up after [2-9] s", stderr) and "never delivered a frame" in stderr, stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sources"]["cam"]["connection"]["state"] == "gave_up"


# ------------------------------------------------------------------------------------------------ secrets


def test_passwords_in_every_url_never_leave_the_process(tmp_path, tiny_dir):
    """A password in a camera refused, a camera with a wrong path, a re-stream server that is down, a webhook
    receiver that is down and an MQTT broker that is down (its password from the environment): every one fails, and
    the password is in no byte of stdout, stderr, the output folder, the console's answers, /metrics or /healthz."""
    folder = tmp_path / "served"
    make_clip(folder / "cam.mp4", frames=30, size=(240, 320), people=1)
    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=40, size=(240, 320), people=2)
    served = free_port()
    server = start_rtsp_server(folder, served)
    metrics, console = free_port(), free_port()
    out = tmp_path / "out"
    give_up = {"initial_s": 0.2, "max_s": 0.5, "give_up_s": 6}
    spec = write_yaml(tmp_path / "p.yaml", {
        "sources": [
            {"name": "file", "uri": str(clip)},
            {"name": "refused", "uri": f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/cam", "reconnect": give_up},
            {"name": "wrongpath", "uri": f"rtsp://admin:{SECRET}@127.0.0.1:{served}/nothing.mp4",
             "reconnect": give_up},
        ],
        "detector": FIXED, "models": pose(tiny_dir), "events": {"zones": {"all": ZONE}},
        "runtime": {"metrics": {"port": metrics}, "console": {"port": console}},
        "outputs": {
            "dir": str(out),
            "stream": {"url": f"rtsp://pub:{SECRET}@127.0.0.1:{free_port()}/live/{{source}}",
                       "reconnect": {"initial_s": 0.2, "max_s": 0.5}},
            "webhooks": {"urls": [f"http://hook:{SECRET}@127.0.0.1:{free_port()}/h"], "drain_s": 1},
            "mqtt": {"host": "127.0.0.1", "port": free_port(), "username": "site", "password_env": "MQTT_PASSWORD"},
        },
    })  # fmt: skip
    proc = start_cli(spec, {"MQTT_PASSWORD": SECRET})
    answers: list[bytes] = []
    base = f"http://127.0.0.1:{console}/api/v1/sources"

    def states() -> dict:
        """The console's and /metrics' answers, kept; the sources' states from the console's list."""
        for url in (f"{base}/refused", f"{base}/wrongpath", f"http://127.0.0.1:{metrics}/metrics",
                    f"http://127.0.0.1:{metrics}/healthz", base):  # fmt: skip
            answers.append(get(url)[1])
        return {s["name"]: s["state"] for s in json.loads(answers[-1])}

    try:
        wait_for_port(console, proc, "the console")
        ended = {"file": "ended", "refused": "failed", "wrongpath": "failed"}
        wait_until(lambda: states() == ended, 120, "the file written and both cameras given up")
        proc.send_signal(signal.SIGINT)  # a run with the console serves until it is stopped
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        server.kill()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr  # the two cameras gave up: failed sources
    listed = [json.loads(a) for a in answers if a.startswith(b"[")]
    assert listed and {s["uri"] for s in listed[-1]} >= {f"rtsp://admin:***@127.0.0.1:{served}/nothing.mp4"}
    assert any(b"sapiens2_source_up" in a for a in answers)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sources"]["refused"]["source"].startswith("rtsp://admin:***@127.0.0.1:")
    assert "cannot open" in summary["sources"]["wrongpath"]["error"]
    assert summary["sources"]["file"]["outputs"]["webhooks"]["failed"] > 0  # the receiver was down
    assert summary["sources"]["file"]["outputs"]["stream"]["events"]  # the re-stream server was down
    assert "admin:***@" in stderr and "broker 127.0.0.1:" in stderr
    assert_nowhere(SECRET, stdout + stderr + b"".join(answers).decode(errors="replace"), out)


def test_redact_hides_every_password_and_keeps_the_rest():
    assert redact("rtsp://admin:pw@10.0.0.5:554/s1: cannot open") == "rtsp://admin:***@10.0.0.5:554/s1: cannot open"
    assert redact("'http://u:p@ss@h/x?a=b:c@d' and rtmp://v:w@h2") == "'http://u:***@h/x?a=b:c@d' and rtmp://v:***@h2"
    assert redact("rtsp://admin@h/x, user@host, http://h:80/x") == "rtsp://admin@h/x, user@host, http://h:80/x"
    assert str(Sapiens2StreamError("rtsp://a:b@h/x: no answer")) == "rtsp://a:***@h/x: no answer"
    import logging

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    log = logging.getLogger("sapiens2_stream")
    log.addHandler(handler)
    try:
        log.warning("source %s: down", "rtsp://admin:pw@10.0.0.5/s1")  # any line the package says, any handler
    finally:
        log.removeHandler(handler)
    assert said == ["source rtsp://admin:***@10.0.0.5/s1: down"]


def test_yaml_strings_take_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("CAM_PASSWORD", SECRET)
    data = {"source": {"uri": "rtsp://admin:${CAM_PASSWORD}@10.0.0.5/stream1"},
            "models": {"pose": {"source": "facebook/sapiens2-pose-0.4b"}}, "detector": {"type": "full_frame"},
            "outputs": {"webhooks": {"urls": ["https://h/${CAM_PASSWORD}/$${kept}"]}}}  # fmt: skip
    cfg = config_from(data)
    assert cfg.source.uri == f"rtsp://admin:{SECRET}@10.0.0.5/stream1"
    assert cfg.outputs.webhooks.urls == [f"https://h/{SECRET}/${{kept}}"]  # $${...} is a literal ${...}
    from sapiens2_stream.cli import main

    spec = write_yaml(tmp_path / "p.yaml", {**data, "source": {"uri": "rtsp://a:${NOT_SET_X}@h/"}})
    proc = subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "validate", str(spec)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"sapiens2-stream: error: {spec}: source.uri names ${{NOT_SET_X}}, but that environment variable is not set"
    ]
    assert main(["validate", str(write_yaml(tmp_path / "ok.yaml", data))]) == 0


# ------------------------------------------------------------------------------------------------ TLS


def start_tls_broker(folder: Path, port: int, cert: Path, key: Path, ca: Path) -> subprocess.Popen:
    """mosquitto with a TLS listener only (its certificate signed by the test's CA)."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "mosquitto.conf"
    # (as root it would drop to the mosquitto user, who may not read the test's private folder)
    user = "user root\n" if os.getuid() == 0 else ""
    conf.write_text(f"listener {port} 127.0.0.1\ncafile {ca}\ncertfile {cert}\nkeyfile {key}\n"
                    f"allow_anonymous true\npersistence false\n{user}")  # fmt: skip
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return wait_for_port(port, proc, "mosquitto (TLS)")


@needs_mosquitto
def test_mqtt_over_tls_delivers_and_a_wrong_ca_is_one_line(tmp_path, tiny_dir):
    import paho.mqtt.client as mqtt

    ca = make_ca(tmp_path / "ca")
    cert, key = make_server_cert(tmp_path / "ca", ca)
    port = free_port()
    broker = start_tls_broker(tmp_path / "broker", port, cert, key, ca.cert_path)
    messages: list[tuple[str, bytes]] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tls-sub")
    sub.tls_set(ca_certs=str(ca.cert_path))
    sub.on_connect = lambda c, *_: c.subscribe("sapiens2/#", qos=1)
    sub.on_message = lambda c, u, m: messages.append((m.topic, m.payload))
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=12, size=(240, 320), people=2)
    base = {"source": {"uri": str(clip)}, "detector": FIXED, "models": pose(tiny_dir)}
    try:
        wait_until(sub.is_connected, 10, "the TLS subscriber")
        good = write_yaml(tmp_path / "good.yaml", {**base, "outputs": {"dir": str(tmp_path / "good"), "mqtt": {
            "host": "127.0.0.1", "port": port, "tls": {"ca_certs": str(ca.cert_path)}}}})  # fmt: skip
        run = subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "run", str(good), "--no-progress"],
                             capture_output=True, text=True, timeout=180)  # fmt: skip
        assert run.returncode == 0, run.stderr
        wait_until(lambda: len([t for t, _ in messages if t.endswith("/frames")]) >= 12, 10, "every frame over TLS")
        other = make_ca(tmp_path / "other", "somebody else's CA")
        bad = write_yaml(tmp_path / "bad.yaml", {**base, "outputs": {"dir": str(tmp_path / "bad"), "mqtt": {
            "host": "127.0.0.1", "port": port, "tls": {"ca_certs": str(other.cert_path)}}}})  # fmt: skip
        refused = subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "run", str(bad), "--no-progress"],
                                 capture_output=True, text=True, timeout=180)  # fmt: skip
    finally:
        sub.loop_stop()
        broker.kill()
    frames = [json.loads(p) for t, p in messages if t == "sapiens2/pipeline/frames"]
    assert [f["frame"] for f in frames] == list(range(12))
    assert [p for t, p in messages if t == "sapiens2/status"][-1] == b"offline"
    assert refused.returncode == 0, refused.stderr  # the broker is never waited for: the outputs are complete
    said = [line for line in refused.stderr.splitlines() if "outputs.mqtt" in line]
    assert len(said) == 1 and f"broker 127.0.0.1:{port}" in said[0] and "does not verify" in said[0], said
    assert (tmp_path / "bad" / "results.jsonl").read_text().count("\n") == 12


class HttpsReceiver:
    """A webhook receiver over HTTPS (a certificate from the test's CA) that keeps each POST's headers and raw body."""

    def __init__(self, cert: Path, key: Path) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append((dict(self.headers), self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verify(secret: bytes, headers: dict, body: bytes) -> bool:
    """The receiver's check, as docs/events.md shows it."""
    timestamp = headers["X-Sapiens2-Timestamp"]
    expected = "sha256=" + hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(timestamp)) < 300
    return fresh and hmac.compare_digest(expected, headers["X-Sapiens2-Signature"])


def test_signed_webhooks_over_https_verify_and_a_tampered_body_does_not(tmp_path, monkeypatch, caplog):
    from sapiens2_stream.io.options import WebhooksOutput
    from sapiens2_stream.io.webhooks import WebhookSink

    ca = make_ca(tmp_path)
    receiver = HttpsReceiver(*make_server_cert(tmp_path, ca))
    monkeypatch.setenv("HOOK_SECRET", "hook-key")
    try:
        sink = WebhookSink(WebhooksOutput(urls=[receiver.url], secret_env="HOOK_SECRET", ca_certs=str(ca.cert_path),
                                          max_backoff_s=0.2))  # fmt: skip
        for i in range(3):
            sink.write(SimpleNamespace(events=[{"id": i, "kind": "lying", "track_id": 1}]))
        sink.close()
        unverified = WebhookSink(WebhooksOutput(urls=[receiver.url], drain_s=0.5, max_backoff_s=0.2))  # system CAs
        unverified.write(SimpleNamespace(events=[{"id": 9, "kind": "up"}]))
        unverified.close()
    finally:
        receiver.close()
    assert [json.loads(body)["id"] for _, body in receiver.received] == [0, 1, 2]
    assert all(verify(b"hook-key", headers, body) for headers, body in receiver.received)
    headers, body = receiver.received[0]
    assert not verify(b"hook-key", headers, body.replace(b'"lying"', b'"up"'))  # tampered
    assert not verify(b"another key", headers, body)
    assert unverified.stats()["sent"] == 0 and unverified.stats()["failed"] >= 2  # tried again and again ...
    said = [r.getMessage() for r in caplog.records if "outputs.webhooks" in r.getMessage()]
    assert len(said) == 1 and "TLS certificate does not verify" in said[0] and receiver.url in said[0]  # ... said once
    assert "does not verify" in unverified.stats()["last_error"]
    monkeypatch.delenv("HOOK_SECRET")
    with pytest.raises(Sapiens2StreamError, match="outputs.webhooks.secret_env names HOOK_SECRET"):
        WebhookSink(WebhooksOutput(urls=[receiver.url], secret_env="HOOK_SECRET"))


def test_webhook_credentials_in_the_url_go_as_basic_authentication():
    from sapiens2_stream.io.webhooks import split_credentials

    url, headers = split_credentials("https://hook:p%40ss@example.org:8443/in?x=1")
    assert url == "https://example.org:8443/in?x=1" and headers == {"Authorization": "Basic aG9vazpwQHNz"}
    assert split_credentials("http://example.org/in") == ("http://example.org/in", {})


def test_the_console_over_https_with_a_percent_encoded_token(tmp_path, tiny_dir, monkeypatch):
    from sapiens2_stream.console.pipeline_backend import PipelineConsole
    from sapiens2_stream.runtime.pipeline import Pipeline
    from tests.test_pipeline import config

    ca = make_ca(tmp_path)
    cert, key = make_server_cert(tmp_path, ca)
    token = "a+b/c=d&e"  # what a query string mangles unless it is percent-decoded
    monkeypatch.setenv("CONSOLE_TOKEN", token)
    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=6, size=(240, 320), people=1)
    port = free_port()
    tls = {"certfile": str(cert), "keyfile": str(key)}
    pipeline = Pipeline(config(tmp_path, tiny_dir, clip, runtime={"console": {"port": port, "tls": tls,
                                                                              "token_env": "CONSOLE_TOKEN"}}),
                        serve=True)  # fmt: skip
    pipeline.observe(PipelineConsole(pipeline))
    runner = threading.Thread(target=pipeline.run)
    runner.start()
    trusted = ssl.create_default_context(cafile=str(ca.cert_path))
    encoded = urllib.parse.quote(token, safe="")
    try:
        wait_until(lambda: pipeline.streams[0].numbers.written == 6, 120, "the clip written")
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/api/v1/sources?token={encoded}", timeout=5,
                                    context=trusted) as r:  # fmt: skip
            sources, cookie = json.loads(r.read()), r.headers["Set-Cookie"]
        assert get(f"https://127.0.0.1:{port}/api/v1/sources?token=a+b/c=d", trusted)[0] == 401
        with pytest.raises(urllib.error.URLError):  # our CA only: the system's do not know it
            urllib.request.urlopen(f"https://127.0.0.1:{port}/", timeout=5)
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP on that port
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    finally:
        pipeline.request_stop()
        runner.join(60)
    assert sources[0]["frames_out"] == 6
    assert "Secure" in cookie and "HttpOnly" in cookie


@pytest.mark.parametrize(
    "tls, message",
    [
        ({"certfile": "/nope.pem", "keyfile": "/nope.key"}, "runtime.console.tls.certfile: /nope.pem: no such file"),
        ({"certfile": "x.pem"}, "runtime.console.tls needs both certfile and keyfile"),
    ],
)
def test_console_tls_mistakes_are_one_line(tmp_path, tiny_dir, tls, message):
    from sapiens2_stream.console.server import check_server_tls
    from tests.test_pipeline import config

    if "keyfile" not in tls:
        with pytest.raises(Sapiens2StreamError, match=message):
            config_from({"source": {"uri": "x.mp4"}, "models": {"pose": {"source": "facebook/sapiens2-pose-0.4b"}},
                         "runtime": {"console": {"port": 1, "tls": tls}}})  # fmt: skip
        return
    cfg = config(tmp_path, tiny_dir, "x.mp4", runtime={"console": {"port": 1, "tls": tls}})
    with pytest.raises(Sapiens2StreamError, match=message):
        check_server_tls(cfg.runtime.console.tls)
