"""How many threads of each kind the process runs: Python's by name (every thread this package starts is named for
what it does; a pool's workers share their pool's name), and the native ones that FFmpeg, x264, OpenMP and torch
start themselves. summary.json and the console report it, so an operator can see a leak from the outside."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator

import torch


def census() -> dict[str, int]:
    """Threads by kind, e.g. {"stream-cam1": 2, "sapiens2-device": 1, "MainThread": 1, "native": 12}."""
    kinds: dict[str, int] = {}
    for thread in threading.enumerate():
        kind = re.sub(r"(_\d+|-\d+)+$", "", thread.name)  # a pool's workers: "stream-cam1_0" -> "stream-cam1"
        kinds[kind] = kinds.get(kind, 0) + 1
    try:  # Linux: every thread of the process, Python's and native ones
        total = len(os.listdir("/proc/self/task"))
    except OSError:
        total = None
    if total is not None:
        kinds["native"] = max(0, total - threading.active_count())
    return dict(sorted(kinds.items()))


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `threads` (`runtime.threads`; None or 0: left as they are) for the block,
    and the caller's setting back after it: the setting is process-wide, and a Python API user's own torch work
    after a run must not keep the run's."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if threads and torch.get_num_threads() != before:
            torch.set_num_threads(before)
