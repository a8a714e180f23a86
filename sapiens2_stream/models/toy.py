"""The toy models that ship with the package: the tiny architecture trained with `finetune` on the synthetic
humans (`sapiens2-stream synth`), so the demo and the tests run a model that sees people. Each folder is a
released-layout checkpoint (config.json with the input size it was trained at, one safetensors file) with a
PROVENANCE.json naming the command that reproduces it, its training minutes and its held-out scores.

They see drawn capsule figures, not people in photographs: their scores measure the pipeline, not Sapiens2.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..errors import Sapiens2StreamError

TOY_TASKS = ("pose", "seg", "matting", "normal", "pointmap")


def toy_model(task: str) -> Path:
    """The folder of the shipped toy model of `task` (a `models.<task>.source` as it is)."""
    folder = Path(str(resources.files("sapiens2_stream.models").joinpath("data", "toy", task)))
    if task not in TOY_TASKS or not (folder / "config.json").exists():
        raise Sapiens2StreamError(f"no toy {task} model ships with this package (toy models: {', '.join(TOY_TASKS)})")
    return folder


def provenance(task: str) -> dict:
    return json.loads((toy_model(task) / "PROVENANCE.json").read_text())
