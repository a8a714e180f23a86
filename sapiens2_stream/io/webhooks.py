"""`outputs.webhooks`: every event (the `events:` section's) as an HTTP POST of its JSON to each URL.

Events wait in a bounded queue per URL and go out in order from one long-lived thread, so a slow or dead receiver
never slows the pipeline: `write` only queues. A failed POST (no answer, a refused connection, a status other than
2xx) is retried, waiting longer each time (up to `max_backoff_s`), until it is delivered: an event within the
queue's bound (plus the one being tried) arrives once, in order, when the receiver comes back. A full queue drops
its oldest waiting event, counted.

Receivers can tell our POSTs from anyone's: with `secret_env`, each carries `X-Sapiens2-Timestamp` (unix seconds)
and `X-Sapiens2-Signature: sha256=<hex>`, the HMAC-SHA256 of `<timestamp>.<raw body>` with that secret (the
timestamp lets a receiver refuse replays). https:// receivers are verified (the system's CAs, or `ca_certs`);
`user:password@` in a URL is sent as HTTP basic authentication, never shown.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from ..errors import Sapiens2StreamError
from .backoff import Backoff
from .options import WebhooksOutput
from .sink import Sink

log = logging.getLogger("sapiens2_stream")

SIGNATURE, TIMESTAMP = "X-Sapiens2-Signature", "X-Sapiens2-Timestamp"


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The `X-Sapiens2-Signature` value of a POST: sha256=HMAC-SHA256(secret, "<timestamp>.<body>") in hex."""
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def describe(e: BaseException) -> str:
    """Why a POST failed, in a user's words: a certificate that does not verify says which check failed."""
    reason = getattr(e, "reason", None) or e
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its TLS certificate does not verify ({reason.verify_message}); set outputs.webhooks.ca_certs"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed ({reason.reason or reason})"
    return str(reason)


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without `user:password@`, the basic-authentication header it implies, if any)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    plain = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return plain, {"Authorization": "Basic " + base64.b64encode(pair).decode()}


class WebhookSink(Sink):
    kind = "webhooks"

    def __init__(self, cfg: WebhooksOutput) -> None:
        self.cfg = cfg
        self.secret = self._secret(cfg)
        self.tls = self._tls(cfg)
        self.queues = {url: deque() for url in cfg.urls}
        self.targets = {url: split_credentials(url) for url in cfg.urls}  # (plain URL, basic-auth header)
        self.said: dict[str, str] = {}  # the latest reason said per URL: a receiver away is said once per reason
        self.sent = self.failed = self.dropped = 0
        self.last_error: str | None = None  # why the latest POST failed (a refused connection, a certificate)
        self.wake = threading.Condition()
        self.closing, self.give_up_at = False, float("inf")
        self.thread = threading.Thread(target=self._send_all, name="webhooks", daemon=True)
        self.thread.start()

    @staticmethod
    def _secret(cfg: WebhooksOutput) -> bytes | None:
        if cfg.secret_env is None:
            return None
        value = os.environ.get(cfg.secret_env)
        if not value:
            raise Sapiens2StreamError(
                f"outputs.webhooks.secret_env names {cfg.secret_env} but that environment variable is not set"
            )
        return value.encode()

    @staticmethod
    def _tls(cfg: WebhooksOutput) -> ssl.SSLContext:
        if cfg.ca_certs is not None and not Path(cfg.ca_certs).is_file():
            raise Sapiens2StreamError(f"outputs.webhooks.ca_certs: {cfg.ca_certs}: no such file")
        try:
            return ssl.create_default_context(cafile=cfg.ca_certs)
        except ssl.SSLError as e:
            raise Sapiens2StreamError(
                f"outputs.webhooks.ca_certs: {cfg.ca_certs}: not a PEM certificate ({e.reason or e})"
            ) from None

    def write(self, result) -> None:
        if not result.events:
            return
        with self.wake:
            for queue in self.queues.values():
                for event in result.events:
                    if len(queue) >= self.cfg.queue:
                        queue.popleft()
                        self.dropped += 1
                    queue.append(event)
            self.wake.notify()

    def _send_all(self) -> None:
        backoff = {url: Backoff(0.1, self.cfg.max_backoff_s) for url in self.queues}
        retry_at = {url: 0.0 for url in self.queues}
        inflight: dict[str, dict | None] = {url: None for url in self.queues}  # taken from its queue, being tried
        while True:
            with self.wake:
                while not self.closing and not any(self.queues.values()) and not any(inflight.values()):
                    self.wake.wait()
                pending = any(self.queues.values()) or any(inflight.values())
                if self.closing and (not pending or time.monotonic() > self.give_up_at):
                    return
                for url, queue in self.queues.items():
                    if inflight[url] is None and queue:
                        inflight[url] = queue.popleft()
            now = time.monotonic()
            for url, event in inflight.items():
                if event is None or now < retry_at[url]:
                    continue
                if self._post(url, event):
                    inflight[url] = None
                    self.sent += 1
                    backoff[url].reset()
                else:
                    self.failed += 1
                    retry_at[url] = now + backoff[url].next()
            waits = [retry_at[u] - time.monotonic() for u, e in inflight.items() if e is not None]
            if waits and min(waits) > 0:
                time.sleep(min(min(waits), 0.5))

    def _post(self, url: str, event: dict) -> bool:
        body = json.dumps(event).encode()
        target, auth = self.targets[url]
        headers = {**auth, "Content-Type": "application/json"}
        if self.secret is not None:
            timestamp = str(int(time.time()))
            headers[TIMESTAMP], headers[SIGNATURE] = timestamp, signature(self.secret, timestamp, body)
        request = urllib.request.Request(target, body, headers)
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s, context=self.tls) as response:
                ok = 200 <= response.status < 300
                reason = None if ok else f"answered {response.status}"
        except (urllib.error.URLError, OSError, ValueError) as e:
            ok, reason = False, describe(e)
        if reason is not None:
            self.last_error = f"{target}: {reason}"
            if self.said.get(url) != reason:  # once per reason, naming the receiver (never its password)
                self.said[url] = reason
                log.warning(f"outputs.webhooks: {target}: {reason}; events wait and are tried again")
        elif url in self.said:
            del self.said[url]
            log.warning(f"outputs.webhooks: {target}: delivering again")
        return ok

    def close(self) -> None:
        """Deliver what is queued, for up to `drain_s` more, then stop."""
        with self.wake:
            self.closing = True
            self.give_up_at = time.monotonic() + self.cfg.drain_s
            self.wake.notify()
        self.thread.join(self.cfg.drain_s + self.cfg.timeout_s + 1)

    def stats(self) -> dict:
        waiting = sum(len(q) for q in self.queues.values())
        return {"sent": self.sent, "failed": self.failed, "dropped": self.dropped, "waiting": waiting,
                **({"last_error": self.last_error} if self.last_error else {})}  # fmt: skip
