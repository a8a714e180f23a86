"""An export folder standing in for the PyTorch model in the pipeline's engine (`models.<task>.runtime`): the
same pixels in, the same raw outputs out, so batching, crops, flip TTA and post-processing stay as they are."""

from __future__ import annotations

from pathlib import Path

import torch

from ..models.tasks import task_spec
from .artifact import check_artifact
from .formats import RUNTIMES, load_runner


class ExportedModel:
    """`runtime` running the export in `folder` for `task`; refused (one line) unless it may (`check_artifact`)."""

    def __init__(self, folder: str | Path, task: str, runtime: str, input_size, device: torch.device) -> None:
        manifest = check_artifact(folder, task, runtime, input_size)
        self.task, self.spec = task, task_spec(task)
        self.input_size = tuple(manifest["input_size"])
        self.flip_in_graph = manifest["flip"] == "fused"  # its outputs already average the input and its mirror
        self.device = device
        self.run = load_runner(RUNTIMES[runtime], Path(folder), task, manifest["precision"], device)

    def __call__(self, pixel_values: torch.Tensor):
        out = self.run(pixel_values)
        return self.spec.output_type(**{k: v.to(pixel_values.device) for k, v in out.items()})
