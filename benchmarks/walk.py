"""The frame's walk: how many of the package's files one frame passes through, and how often it comes back to a file
it had left (a measure of how scattered the code a maintainer must read is): `python -m benchmarks.walk`.

One frame of a generated clip through the whole pipeline (fixed box, the tiny pose model, smoothing, JSONL and the
annotated video); every Python call into the package is recorded per thread from `run()` on (opening the outputs,
the batch, the source stages, closing). A return is a call into a file the thread had already left for another.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from pathlib import Path


def walk() -> dict:
    import sapiens2_stream
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.models import make_tiny_checkpoints
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    package = str(Path(sapiens2_stream.__file__).parent) + "/"
    calls: dict[int, list[str]] = {}

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            calls.setdefault(threading.get_ident(), []).append(frame.f_code.co_filename[len(package):])

    work = Path(tempfile.mkdtemp())
    make_clip(work / "clip.mp4", frames=2, size=(120, 160), people=1)
    tiny = make_tiny_checkpoints(work / "tiny")
    pipeline = Pipeline(from_dict(PipelineConfig, {
        "source": {"uri": str(work / "clip.mp4"), "max_frames": 1},
        "detector": {"type": "fixed", "boxes": [[40, 10, 60, 100]]},
        "models": {"pose": {"source": str(tiny["pose"]), "input_size": [64, 48]}},
        "outputs": {"dir": str(work / "out")}}))  # fmt: skip
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        pipeline.run()
    finally:
        sys.settrace(None)
        threading.settrace(None)
    files, returns = set(), 0
    for sequence in calls.values():
        left: set[str] = set()
        current = None
        for file in sequence:
            files.add(file)
            if file != current:
                returns += file in left
                if current is not None:
                    left.add(current)
                current = file
    return {"files_entered": len(files), "returns_to_a_file_left": returns,
            "calls": sum(len(s) for s in calls.values())}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(walk()))
