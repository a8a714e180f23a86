"""The frame's walk: how many of the package's files one frame passes through, and how often its walk calls back
into a file it had already left (a measure of how scattered the code a maintainer must read is):
`python -m benchmarks.walk [--list]`.

One frame of a generated clip through the whole pipeline (fixed box, the tiny pose model, smoothing, JSONL and the
annotated video). Every call into the package is recorded on every thread from the frame's read to its write; the
run's opening and closing (stages opened before the first frame, outputs closed and the summary after the last)
are not the frame's walk and are left out. A *crossing* is a call from one of the package's files into another
(a thread's or an asyncio task's first call counts as one); a *return* is a crossing into a file the walk had
already entered on that thread or in that task. A resumed coroutine or generator is not a call, and comprehensions
belong to the function they are in.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

# the run's own beginning and end (their calls are not the frame's walk, wherever they happen)
NOT_THE_FRAME = {"open", "close", "summary", "started", "ended", "source_added", "source_closed", "census",
                 "_halt_readers", "lanes", "snapshot", "ending", "_loop", "torch_threads"}  # fmt: skip
RESUMABLE = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR


def walk() -> dict:
    """Trace one frame through a real pipeline; the files it entered and its returns, per file."""
    import sapiens2_stream
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.models import make_tiny_checkpoints
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    package = str(Path(sapiens2_stream.__file__).parent) + "/"
    first_offset: dict[object, int] = {}  # per code object: where a fresh call starts (later ones are resumptions)
    crossings: dict[str, list[str]] = {}  # per thread or task: the files called into from another file, in order

    def ours(frame) -> str | None:
        name = frame.f_code.co_filename
        return name[len(package) :] if name.startswith(package) else None

    def tracer(frame, event, arg):
        if event != "call" or (file := ours(frame)) is None or frame.f_code.co_name.startswith("<"):
            return None
        code = frame.f_code
        if code.co_flags & RESUMABLE and first_offset.setdefault(code, frame.f_lasti) != frame.f_lasti:
            return None  # a coroutine or generator resumed, not called
        caller, above = None, frame.f_back
        while above is not None:
            if above.f_code.co_name in NOT_THE_FRAME and ours(above) is not None:
                return None
            if caller is None and (caller := ours(above)) is not None and above.f_code.co_name.startswith("<"):
                caller = None if caller == file else caller  # a comprehension: its function's file
            above = above.f_back
        if frame.f_code.co_name in NOT_THE_FRAME or caller == file:
            return None
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop on this thread
            task = None
        where = threading.current_thread().name + (f" {task.get_coro().__qualname__}" if task else "")
        crossings.setdefault(where, []).append(file)
        return None

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        make_clip(work / "clip.mp4", frames=2, size=(120, 160), people=1)
        tiny = make_tiny_checkpoints(work / "tiny")
        pipeline = Pipeline(from_dict(PipelineConfig, {
            "source": {"uri": str(work / "clip.mp4"), "max_frames": 1},
            "detector": {"type": "fixed", "boxes": [[40, 10, 60, 100]]},
            "models": {"pose": {"source": str(tiny["pose"]), "input_size": [64, 48]}},
            "outputs": {"dir": str(work / "out")}}))  # fmt: skip
        pipeline.open()
        threading.settrace(tracer)
        sys.settrace(tracer)
        try:
            pipeline.run()
        finally:
            sys.settrace(None)
            threading.settrace(None)
    files: set[str] = set()
    returns: Counter[str] = Counter()
    for sequence in crossings.values():
        entered: set[str] = set()
        for file in sequence:
            returns[file] += file in entered
            entered.add(file)
        files |= entered
    returns = +returns
    return {"files_entered": len(files), "returns_to_a_file_left": sum(returns.values()),
            "returns_by_file": dict(returns.most_common()), "files": sorted(files),
            "crossings": {thread: len(sequence) for thread, sequence in crossings.items()}}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="also list the files entered")
    measured = walk()
    if not parser.parse_args().list:
        del measured["files"]
    print(json.dumps(measured, indent=1))
