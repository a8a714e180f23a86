"""`outputs.webhooks`: every event (the `events:` section's) as an HTTP POST of its JSON to each URL.

Events wait in a bounded queue per URL and go out in order from one long-lived thread, so a slow or dead receiver
never slows the pipeline: `write` only queues. A failed POST (no answer, a refused connection, a status other than
2xx) is retried, waiting longer each time (up to `max_backoff_s`), until it is delivered: an event within the
queue's bound (plus the one being tried) arrives once, in order, when the receiver comes back. A full queue drops
its oldest waiting event, counted.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque

from ..config import WebhooksOutput
from .backoff import Backoff
from .sink import Sink


class WebhookSink(Sink):
    kind = "webhooks"

    def __init__(self, cfg: WebhooksOutput) -> None:
        self.cfg = cfg
        self.queues = {url: deque() for url in cfg.urls}
        self.sent = self.failed = self.dropped = 0
        self.wake = threading.Condition()
        self.closing, self.give_up_at = False, float("inf")
        self.thread = threading.Thread(target=self._send_all, name="webhooks", daemon=True)
        self.thread.start()

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
        request = urllib.request.Request(url, json.dumps(event).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def close(self) -> None:
        """Deliver what is queued, for up to `drain_s` more, then stop."""
        with self.wake:
            self.closing = True
            self.give_up_at = time.monotonic() + self.cfg.drain_s
            self.wake.notify()
        self.thread.join(self.cfg.drain_s + self.cfg.timeout_s + 1)

    def stats(self) -> dict:
        waiting = sum(len(q) for q in self.queues.values())
        return {"sent": self.sent, "failed": self.failed, "dropped": self.dropped, "waiting": waiting}
