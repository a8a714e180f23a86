"""JSONL results: one JSON object per frame, each line reaching the file in one write call (a killed process leaves
whole lines only)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2

from .records import jsonl_record
from .sink import Sink


class JsonlSink(Sink):
    """One JSON object per frame: source, frame index, pts, and per person the track, box and keypoints."""

    def __init__(self, path: Path, source_id: str, model_ids: dict[str, str], append: bool = False) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self.fd = os.open(path, flags, 0o644)
        self.source_id = source_id
        self.model_ids = model_ids

    def write(self, result) -> None:
        write_line(self.fd, jsonl_record(result, self.source_id, self.model_ids))

    def close(self) -> None:
        os.close(self.fd)


class EventLog(Sink):
    """events.jsonl: one line per event (zones, lines, poses), each in one write call like results.jsonl, and a
    snapshot of the frame it happened in (the annotated picture, `snapshots/frame_NNNNNN.jpg`, named in the event
    as `snapshot`, relative to the run's folder, before MQTT and webhooks send it)."""

    def __init__(self, path: Path, picture, append: bool = False) -> None:
        """`picture(result)`: the annotated RGB picture of a result."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self.fd = os.open(path, flags, 0o644)
        self.folder, self.picture = path.parent, picture

    def write(self, result) -> None:
        if not result.events:
            return
        name = f"snapshots/frame_{result.frame.index:06d}.jpg"
        (self.folder / "snapshots").mkdir(exist_ok=True)
        ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(self.picture(result), cv2.COLOR_RGB2BGR),
                                [cv2.IMWRITE_JPEG_QUALITY, 85])  # fmt: skip
        if ok:
            (self.folder / name).write_bytes(jpeg.tobytes())
        for event in result.events:
            event["snapshot"] = name if ok else None
            write_line(self.fd, event)

    def close(self) -> None:
        os.close(self.fd)


def write_line(fd: int, record: dict) -> None:
    """One JSON line, in one write call: a process killed at any moment leaves whole lines only (a short write, on
    a full disk or a signal, is finished)."""
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    written = os.write(fd, data)
    while written < len(data):
        written += os.write(fd, data[written:])


def source_folders(run: Path) -> list[Path]:
    """The folders of a run that hold a results.jsonl: the run's own (one source) or its sources' (several)."""
    return sorted(p.parent for p in [run / "results.jsonl", *run.glob("*/results.jsonl")] if p.exists())
