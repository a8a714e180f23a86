"""The Python API's cost: results per second through `stream()` against the same run through the pipeline the
command line drives (`Pipeline.run`), same file, same loaded models, in one process.

Run: `python -m benchmarks.api`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import print_table
from sapiens2_stream.api import Sapiens2
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.models import make_tiny_checkpoints
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import config_from

FRAMES = 60


def run() -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-api-"))
    tiny = make_tiny_checkpoints(work / "tiny", ("pose",))
    clip = work / "walk.mp4"
    make_clip(clip, frames=FRAMES, size=(240, 320), people=2)
    session = Sapiens2(models={"pose": str(tiny["pose"])}, device="cpu", detector="full_frame",
                       set={"models.pose.input_size": [128, 96]})  # fmt: skip
    data = {"models": {"pose": {"source": str(tiny["pose"]), "input_size": [128, 96]}},
            "detector": {"type": "full_frame"}, "runtime": {"device": "cpu"},
            "outputs": {"video": {"enabled": False}, "jsonl": {"enabled": False}}}  # fmt: skip
    cfg = config_from(data, source=str(clip), output=str(work / "out"))

    def through_api() -> float:
        start = time.perf_counter()
        count = sum(1 for _ in session.stream(str(clip)))
        return (time.perf_counter() - start) / count

    def through_pipeline() -> float:
        start = time.perf_counter()
        summary = Pipeline(cfg, loaded=session.loaded).run()
        return (time.perf_counter() - start) / summary["totals"]["frames_out"]

    try:
        through_api(), through_pipeline()  # warm-up
        api, cli = [], []
        for _ in range(3):  # interleaved, so a slower moment of the machine weighs on both
            cli.append(through_pipeline())
            api.append(through_api())
        api_s, cli_s = float(np.median(api)), float(np.median(cli))
    finally:
        session.close()
    return [dict(name="Python API stream(), per result", ours_s=api_s, baseline="Pipeline.run (the CLI's path)",
                 baseline_s=cli_s)]  # fmt: skip


if __name__ == "__main__":
    print_table(run())
