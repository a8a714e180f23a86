"""`outputs.mqtt`: results and events as MQTT messages (paho-mqtt 2), for home and factory automation.

- `TOPIC/frames`: one JSON message per written frame (source, frame, pts, wall, people with track id, box, score
  and keypoints as chosen, seg pixel counts when seg runs).
- `TOPIC/events`: track started / ended (first and last time and box), source disconnected / reconnected, and the
  `events:` section's (enter, exit, loitering, crossing, crowded, cleared, fall, hands_up);
- `TOPIC/zones/<zone>` (`{"people": n}`) and `TOPIC/lines/<line>` (`{"in": n, "out": m}`), retained, when they
  change.
- `status_topic`: a retained `online`, with `offline` as the last will (and sent at a normal end).

One connection per process, shared by every source. The broker is never waited for: paho sends from its own
thread and keeps up to `queue` messages while the broker is away (re-sent on reconnect); a message beyond that is
dropped and counted. Why the broker cannot be reached (refused, a certificate that does not verify, a refused
login) is said once, as one line naming the broker, each time the reason changes.

`tls:` connects over TLS, verifying the broker's certificate and name against `ca_certs` (or the system's CAs)
unless `insecure: true` is said.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import ssl
from pathlib import Path

from ..errors import Sapiens2StreamError
from .options import MqttOutput, MqttTls
from .records import mqtt_message, rounded
from .sink import Sink

log = logging.getLogger("sapiens2_stream")


def tls_context(tls: MqttTls) -> ssl.SSLContext:
    """The TLS context `outputs.mqtt.tls` asks for; a missing or unreadable file is a one-line error."""
    for key in ("ca_certs", "certfile", "keyfile"):
        path = getattr(tls, key)
        if path is not None and not Path(path).is_file():
            raise Sapiens2StreamError(f"outputs.mqtt.tls.{key}: {path}: no such file")
    if tls.keyfile and not tls.certfile:
        raise Sapiens2StreamError("outputs.mqtt.tls.keyfile is set but outputs.mqtt.tls.certfile is not")
    try:
        context = ssl.create_default_context(cafile=tls.ca_certs)
        if tls.certfile:
            context.load_cert_chain(tls.certfile, tls.keyfile)
    except ssl.SSLError as e:
        raise Sapiens2StreamError(f"outputs.mqtt.tls: cannot read the certificates ({e.reason or e})") from None
    if tls.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@functools.cache
def client_class():
    """paho's client, keeping why its latest connection attempt failed (paho only says that it did)."""
    import paho.mqtt.client as mqtt

    class Client(mqtt.Client):
        last_error: OSError | None = None

        def reconnect(self):
            try:
                return super().reconnect()
            except OSError as e:
                self.last_error = e
                raise

    return Client


class MqttClient:
    """The process's connection to the broker."""

    def __init__(self, cfg: MqttOutput) -> None:
        import paho.mqtt.client as mqtt

        self.cfg = cfg
        self.said: str | None = None  # the latest reason said for not being connected
        self.client = client_class()(mqtt.CallbackAPIVersion.VERSION2, client_id=cfg.client_id or
                                     f"sapiens2-stream-{os.getpid()}")  # fmt: skip
        if cfg.tls is not None:
            self.client.tls_set_context(tls_context(cfg.tls))
            self.client.tls_insecure_set(bool(cfg.tls.insecure))
        if cfg.username is not None:
            password = None
            if cfg.password_env:
                password = os.environ.get(cfg.password_env)
                if password is None:
                    raise Sapiens2StreamError(
                        f"outputs.mqtt.password_env names {cfg.password_env} but that environment variable is not set"
                    )
            self.client.username_pw_set(cfg.username, password)
        self.client.max_queued_messages_set(cfg.queue)
        self.client.reconnect_delay_set(0.5, 10)
        self.client.will_set(cfg.status_topic, "offline", qos=1, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self.queue_full = mqtt.MQTT_ERR_QUEUE_SIZE
        self.client.connect_async(cfg.host, cfg.port)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            self._say(f"the broker refused the connection ({reason_code})")
        else:
            self.said = None
            client.publish(self.cfg.status_topic, "online", qos=1, retain=True)

    def _on_connect_fail(self, client, userdata) -> None:
        e = client.last_error
        if isinstance(e, ssl.SSLCertVerificationError):
            reason = f"its certificate does not verify: {e.verify_message}; check outputs.mqtt.tls.ca_certs"
        elif isinstance(e, ssl.SSLError):
            reason = f"TLS failed: {e.reason or e}"
        else:
            reason = getattr(e, "strerror", None) or str(e) or "no answer"
        self._say(f"cannot connect ({reason})")

    def _say(self, problem: str) -> None:
        """One line per reason the broker is unreachable (not one per retry)."""
        if problem != self.said:
            self.said = problem
            log.warning(f"outputs.mqtt: broker {self.cfg.host}:{self.cfg.port}: {problem}; retrying")

    def publish(self, topic: str, message: dict, qos: int | None = None, retain: bool = False) -> bool:
        """Queue a message; False when paho's queue is full (the broker has been away too long): dropped."""
        data = json.dumps(message, separators=(",", ":"))
        info = self.client.publish(topic, data, qos=self.cfg.qos if qos is None else qos, retain=retain)
        return info.rc != self.queue_full

    def close(self) -> None:
        """Say `offline` (retained) when connected, then disconnect."""
        if self.client.is_connected():
            info = self.client.publish(self.cfg.status_topic, "offline", qos=1, retain=True)
            info.wait_for_publish(timeout=2.0)
        self.client.disconnect()
        self.client.loop_stop()


class MqttSink(Sink):
    """One source's messages: frames and events under TOPIC (its `{source}` filled in)."""

    kind = "mqtt"

    def __init__(self, client: MqttClient, source_name: str, source) -> None:
        topic = client.cfg.topic.replace("{source}", source_name)
        self.client, self.name = client, source_name
        self.topic, self.frames_topic, self.events_topic = topic, f"{topic}/frames", f"{topic}/events"
        self.counted: dict[str, object] = {}  # the zone occupancies and line counts last published (retained)
        self.keypoints = client.cfg.keypoints
        self.tracks: dict[int, dict] = {}  # open tracks: first and last time and box
        self.sent = self.dropped = 0
        source.listeners.append(self._source_event)

    def _send(self, topic: str, message: dict, qos: int | None = None, retain: bool = False) -> None:
        if self.client.publish(topic, message, qos, retain):
            self.sent += 1
        else:
            self.dropped += 1

    def _event(self, event: str, **fields) -> None:
        self._send(self.events_topic, {"event": event, "source": self.name, **fields}, qos=1)

    def _source_event(self, event: str, fields: dict) -> None:
        """From the source's reader thread: disconnected / reconnected."""
        self._event(event, **fields)

    def _end(self, track_id: int, reason: str) -> None:
        track = self.tracks.pop(track_id, None)
        if track is not None:
            self._event("track_ended", track_id=track_id, reason=reason, **track)

    def write(self, result) -> None:
        frame = result.frame
        for track_id in result.ended_tracks:
            self._end(track_id, "lost")
        for p in result.people:
            box = rounded(p.box)
            if p.track_id not in self.tracks:
                self.tracks[p.track_id] = {"first_pts": round(frame.pts_s, 6), "first_box": box, "frames": 0}
                self._event("track_started", track_id=p.track_id, pts=round(frame.pts_s, 6), box=box)
            self.tracks[p.track_id].update(last_pts=round(frame.pts_s, 6), last_box=box)
            self.tracks[p.track_id]["frames"] += 1
        self._send(self.frames_topic, mqtt_message(result, self.name, self.keypoints))
        for event in result.events:  # zones, lines, poses (the events: section)
            self._send(self.events_topic, {"event": event["kind"], **event}, qos=1)
        if result.events and result.event_rules is not None:  # the counts, retained: a new subscriber sees them
            counts = result.event_rules.counts()
            for kind, values in (("zones", counts["zones"]), ("lines", counts["lines"])):
                for name, value in values.items():
                    if self.counted.get(f"{kind}/{name}") != value:
                        self.counted[f"{kind}/{name}"] = value
                        message = {"people": value} if kind == "zones" else dict(value)
                        self._send(f"{self.topic}/{kind}/{name}", message, qos=1, retain=True)

    def close(self) -> None:
        for track_id in list(self.tracks):
            self._end(track_id, "run ended")

    def stats(self) -> dict:
        return {"sent": self.sent, "dropped": self.dropped}
