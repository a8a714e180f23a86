"""The latest events (zones, lines, poses) a console lists, from one pipeline's sources or a fleet's workers.

Each is numbered by `seq` (`GET /api/v1/events?since=N` gives those after N) and, where a snapshot was written,
says where the console serves it (`snapshot_url`). The snapshot file is found under the source's output folder,
in it or in one of its segment folders (the event names it relative to the folder its events.jsonl is in); frame
numbers go on across segments and restarts, so the name is the source's only one.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from pathlib import Path

from ..runtime.observer import Observer

KEEP = 500  # the events a console keeps
SNAPSHOT_NAME = re.compile(r"snapshots/frame_\d+\.jpg")


class RecentEvents:
    def __init__(self, keep: int = KEEP) -> None:
        self.lock = threading.Lock()  # added on writer threads (or the fleet driver's loop), read by the console
        self.recent: deque[tuple[dict, Path]] = deque(maxlen=keep)  # (event as listed, its source's folder)
        self.seq = 0

    def add(self, events: list[dict], folder: Path) -> None:
        """Events of the source whose output folder is `folder`, in the order they happened."""
        with self.lock:
            for event in events:
                self.seq += 1
                listed = {"seq": self.seq, **event}
                if event.get("snapshot"):
                    listed["snapshot_url"] = f"/api/v1/events/{self.seq}/snapshot.jpg"
                self.recent.append((listed, folder))

    def since(self, seq: int) -> list[dict]:
        with self.lock:
            return [event for event, _ in self.recent if event["seq"] > seq]

    def snapshot(self, seq: int) -> Path | None:
        """The snapshot file of event `seq`, while the console keeps that event and the file exists."""
        with self.lock:
            found = [(event, folder) for event, folder in self.recent if event["seq"] == seq]
        if not found or not SNAPSHOT_NAME.fullmatch(found[0][0].get("snapshot") or ""):
            return None
        event, folder = found[0]
        for path in (folder / event["snapshot"], *sorted(folder.glob(f"*/{event['snapshot']}"))):
            if path.is_file():
                return path
        return None


class EventCollector(Observer):
    """Observes a pipeline: every written result's events go to `recent` (after the sinks: snapshots written)."""

    def __init__(self) -> None:
        self.recent = RecentEvents()

    def result(self, result, stream) -> None:
        if result.events:
            self.recent.add(result.events, stream.plan.ctx.out_dir)
