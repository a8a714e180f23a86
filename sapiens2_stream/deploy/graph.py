"""The graph an export holds: pixels in, the task's raw outputs out (named as the model's outputs), with flip TTA
inside it or left to the caller.

The outputs are what the pipeline's post-processing takes (heatmaps, logits, alphas and foregrounds, normals,
pointmaps and scales), so an exported model drops into the engine where the PyTorch one was: crops, decoding
and resizing stay ours, on the device.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.network import Sapiens2Network
from ..models.tasks import task_spec
from ..processing.flip import merge_flip, with_flipped

INPUT_NAME = "pixel_values"


def output_names(task: str) -> list[str]:
    return list(task_spec(task).flips)


class ExportGraph(nn.Module):
    """`model` as a function of ImageNet-normalised pixels [B, 3, H, W] -> a tuple of its raw outputs; with
    `flip`, each output is already the average over the input and its mirror (left and right swapped back)."""

    def __init__(self, model: Sapiens2Network, flip: bool) -> None:
        super().__init__()
        self.model, self.flip = model, flip
        self.spec = task_spec(model.task)

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(with_flipped(pixel_values) if self.flip else pixel_values)
        values = []
        for name, how in self.spec.flips.items():
            value = getattr(out, name)
            if self.flip:
                value = merge_flip(value, how.kind, self.spec.flip_order(name))
            values.append(value)
        return tuple(values)
