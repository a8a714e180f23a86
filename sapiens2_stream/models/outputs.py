"""What a Sapiens2 model returns, per task, with the field names of the reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(kw_only=True)
class Sapiens2Output:
    """Fields every task can return on request."""

    class_token: torch.Tensor | None = None
    feature_maps: list[torch.Tensor] = field(default_factory=list)


@dataclass(kw_only=True)
class PoseOutput(Sapiens2Output):
    heatmaps: torch.Tensor


@dataclass(kw_only=True)
class SegOutput(Sapiens2Output):
    logits: torch.Tensor


@dataclass(kw_only=True)
class NormalOutput(Sapiens2Output):
    normals: torch.Tensor


@dataclass(kw_only=True)
class PointmapOutput(Sapiens2Output):
    pointmaps: torch.Tensor
    scales: torch.Tensor | None


@dataclass(kw_only=True)
class MattingOutput(Sapiens2Output):
    alphas: torch.Tensor
    foregrounds: torch.Tensor


@dataclass(kw_only=True)
class PretrainOutput(Sapiens2Output):
    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor
