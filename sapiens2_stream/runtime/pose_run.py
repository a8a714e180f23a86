"""A pose run of a video to its end, for the commands whose work starts from one (`label`, `calibrate people` from
videos): the pipeline's detector, tracker and pose model, writing only results.jsonl and summary.json into a run
folder like any other, with the progress bar and the summary said, and a failure as one line."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from ..errors import Sapiens2StreamError
from .pipeline import Pipeline, SourceFailed
from .pipeline_config import config_from
from .progress import Progress, format_summary, save_summary


def pose_run(video: str, data: dict, folder: Path, device: str = "auto", progress: bool = True,
             origin: str = "the pose pipeline") -> Path:  # fmt: skip
    """Run `data` (a pipeline as YAML-shaped data, with `models.pose`) on `video` into `folder`: its pose model only
    (flip TTA on), no video written. A `file` detector without a path reads the video's own detections (each video
    of several cameras has its own). Ctrl-C ends the run as `run`'s does, then raises KeyboardInterrupt:
    the commands that go on from the run stop there."""
    data = copy.deepcopy(data)
    pose = (data.get("models") or {}).get("pose")
    if not pose:
        raise Sapiens2StreamError(f"{origin}: needs a pose model (models.pose)")
    data["models"] = {"pose": {**(pose if isinstance(pose, dict) else {"source": pose}), "flip": "on"}}
    data.pop("sources", None)
    data.setdefault("outputs", {}).update({"video": {"enabled": False}, "jsonl": {"enabled": True}})
    data.setdefault("runtime", {})["device"] = device
    local = Path(video)
    source = str(local.resolve()) if local.exists() else video  # the run folder names a file wherever it is read
    config = config_from(data, (), source, str(folder), origin=origin)
    pipeline = Pipeline(config)
    pipeline.open()
    pipeline.observe(Progress(pipeline, enabled=progress))
    try:
        summary = pipeline.run()
    except SourceFailed as e:
        raise Sapiens2StreamError(str(e)) from None
    print(format_summary(summary), file=sys.stderr)
    save_summary(summary, config.outputs.dir)
    if summary.get("interrupted"):  # Ctrl-C: the run folder is whole, but what was to follow from it is not done
        raise KeyboardInterrupt
    return folder
