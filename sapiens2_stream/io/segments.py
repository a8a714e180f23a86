"""`outputs.segment_s`: long live runs write their files into time-stamped segment folders, and
`outputs.retention` deletes the oldest closed ones.

OUTPUT/<name>/2026-11-30T05-10-00/annotated.mp4, results.jsonl, ... : a segment holds what a run of its own would
write (videos, JSONL, matting and geometry videos, per-track exports of the tracks it saw). A segment is closed,
its videos finalised, when the source's timeline passes its length; only closed segments are ever deleted, and
only folders named like segments.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .sink import Sink

STAMP = "%Y-%m-%dT%H-%M-%S"
SEGMENT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(-\d+)?$")


class Segments(Sink):
    """The file sinks of the current segment, rolled every `segment_s` seconds of the source's timeline. What an
    output of a segment reports (a user's output that failed there) stays in the summary under the segment's
    folder name."""

    kind = "segments"

    def __init__(self, outputs: Any, make: Callable[[Path], list[Sink]]) -> None:
        """`make(folder)`: the file sinks of one segment, writing into `folder`."""
        self.root, self.length, self.retention = Path(outputs.dir), outputs.segment_s, outputs.retention
        self.make = make
        self.folder: Path | None = None
        self.sinks: list[Sink] = []
        self.start_pts = 0.0
        self.reports: dict[str, dict] = {}  # segment folder -> {output: its report}, for the outputs that have one

    def write(self, result) -> None:
        frame = result.frame
        if self.folder is None or frame.pts_s >= self.start_pts + self.length:
            self._roll(frame.wall_s)
            self.start_pts = frame.pts_s
        for sink in self.sinks:
            sink.write(result)

    def _roll(self, wall_s: float) -> None:
        self._finish()
        name = time.strftime(STAMP, time.localtime(wall_s))
        folder, n = self.root / name, 1
        while folder.exists():
            n += 1
            folder = self.root / f"{name}-{n}"
        self.folder, self.sinks = folder, self.make(folder)

    def _finish(self) -> None:
        """Close the current segment (its files complete and playable), then apply the retention."""
        if self.folder is None:
            return
        reports = {sink.kind: report for sink in self.sinks if (report := sink.stats()) is not None}
        if reports:
            self.reports[self.folder.name] = reports
        for sink in self.sinks:
            sink.close()
        self.sinks = []
        apply_retention(self.root, self.retention.max_age_h, self.retention.max_gb, keep=self.folder)

    def close(self) -> None:
        self._finish()

    def stats(self) -> dict | None:
        return dict(self.reports) or None


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def apply_retention(root: Path, max_age_h: float | None, max_gb: float | None, keep: Path | None = None) -> list[Path]:
    """Delete the closed segments under `root` last written more than `max_age_h` hours ago, then the oldest
    while all of them together are larger than `max_gb`. `keep`: the newest closed segment, never deleted by the
    size limit (the last complete recording). Returns what was deleted."""
    segments = sorted(p for p in root.iterdir() if p.is_dir() and SEGMENT_NAME.match(p.name))
    deleted = []
    if max_age_h is not None:
        cutoff = time.time() - max_age_h * 3600
        for folder in list(segments):
            if folder != keep and folder.stat().st_mtime < cutoff:
                segments.remove(folder)
                deleted.append(folder)
    if max_gb is not None:
        sizes = {folder: folder_bytes(folder) for folder in segments}
        total = sum(sizes.values())
        for folder in segments:
            if total <= max_gb * 1e9 or folder == keep:
                break
            total -= sizes[folder]
            deleted.append(folder)
    for folder in deleted:
        shutil.rmtree(folder, ignore_errors=True)
    return deleted
