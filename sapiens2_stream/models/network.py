"""A Sapiens2 model for one task: backbone + task head, with outputs named as in the reference.

`Sapiens2Network(config)(pixel_values)` returns a task-specific output dataclass:
pose `heatmaps`; seg `logits`; normal `normals`; pointmap `pointmaps`, `scales`; matting `alphas`,
`foregrounds`; pretrain `last_hidden_state`, `pooler_output`. Any task can also return the normalised class
token (`return_class_token=True`) and backbone feature maps (`feature_layers=(...)`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import Backbone
from .config import ModelConfig
from .heads import DeconvHead, PixelShuffleHead
from .metadata import NUM_KEYPOINTS, NUM_SEG_CLASSES, PoseMetadata, SegMetadata, pose_metadata, seg_metadata
from .outputs import Sapiens2Output
from .tasks import task_spec


class Sapiens2Network(nn.Module):
    """Backbone plus the head of `config.task`; parameter names are those of the released checkpoints."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.task = config.task
        self.spec = task_spec(config.task)
        self.backbone = Backbone(config.backbone)
        if config.head is not None:
            head_cls = DeconvHead if config.head.kind == "deconv" else PixelShuffleHead
            self.decode_head = head_cls(config.backbone.hidden_size, config.head, f"conv_{config.task}")

    @property
    def trained_grid(self) -> tuple[int, int]:
        p = self.config.backbone.patch_size
        return self.config.image_size[0] // p, self.config.image_size[1] // p

    @property
    def pose_metadata(self) -> PoseMetadata | None:
        """Keypoint names, flip pairs, skeleton and colours, for 308-keypoint pose models."""
        heads = self.config.head.num_outputs if self.config.head else 0
        return pose_metadata() if self.task == "pose" and heads == NUM_KEYPOINTS else None

    @property
    def seg_metadata(self) -> SegMetadata | None:
        """Class names, palette and left/right swaps, for 29-class segmentation models."""
        heads = self.config.head.num_outputs if self.config.head else 0
        return seg_metadata() if self.task == "seg" and heads == NUM_SEG_CLASSES else None

    def forward(
        self,
        pixel_values: torch.Tensor,
        return_class_token: bool = False,
        feature_layers: tuple[int, ...] = (),
        normalize_features: bool = True,
    ) -> Sapiens2Output:
        """Run the model on ImageNet-normalised `pixel_values` [B, 3, H, W] (H, W multiples of the patch size).

        `feature_layers` picks backbone layers (0 = embeddings, i = block i) to return as [B, D, h, w] maps,
        passed through the final norm unless `normalize_features` is False.
        """
        grid = self.backbone.grid(pixel_values)
        tokens, kept = self.backbone(pixel_values, keep_layers=tuple(feature_layers))
        extras: dict = {}
        if return_class_token:
            extras["class_token"] = tokens[:, 0]
        if feature_layers:
            norm = self.backbone.ln1 if normalize_features else (lambda t: t)
            extras["feature_maps"] = [self.backbone.to_feature_map(norm(t), grid) for t in kept]
        if self.spec.model_outputs is None:  # the backbone alone
            return self.spec.output_type(last_hidden_state=tokens, pooler_output=tokens[:, 0], **extras)
        features = self.backbone.to_feature_map(tokens, grid)
        return self.spec.output_type(**self.spec.model_outputs(self.decode_head(features), features, self), **extras)

    def flip_tta(self, pixel_values: torch.Tensor, channel_order) -> torch.Tensor:
        """Raw head output averaged over the input and its mirror (channels mirrored back through
        `channel_order`), with the mirror-back done on the predictor's input features and fused into one 1x1
        conv. Cheaper than mirroring outputs when the predictor has more outputs than inputs (pose: 308 heatmaps
        from 256 features), and equal to it up to float rounding."""
        n = pixel_values.shape[0]
        trunk = self.head_trunk(torch.cat([pixel_values, pixel_values.flip(-1)]))
        features = torch.cat([trunk[:n], trunk[n:].flip(-1)], dim=1)
        weight, bias = flip_merged_predictor(self.decode_head.predictor, channel_order)
        return F.conv2d(features, weight, bias)

    def head_outputs(self, pixel_values: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
        """The head's raw output channels `channels` only [B, len(channels), h, w]. Training on data that labels
        a few of the 308 keypoints needs no more, and the 1x1 predictor's other rows were half of a tiny pose
        model's training step."""
        predictor = self.decode_head.predictor
        return F.conv2d(self.head_trunk(pixel_values), predictor.weight[channels], predictor.bias[channels])

    def head_trunk(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The features the head's 1x1 predictor reads."""
        tokens, _ = self.backbone(pixel_values)
        return self.decode_head.trunk(self.backbone.to_feature_map(tokens, self.backbone.grid(pixel_values)))


def flip_merged_predictor(conv: nn.Conv2d, channel_order) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights of one 1x1 conv over [features, mirrored features] that outputs the flip-TTA average directly.

    A 1x1 conv commutes with a horizontal mirror, so mirroring back the output of the mirrored input equals the
    conv of the mirrored-back features with its output channels reordered: avg = (W a + W[order] b' + bias +
    bias[order]) / 2, one conv of 2C inputs.
    """
    order = torch.as_tensor(list(channel_order), device=conv.weight.device)
    weight = torch.cat([conv.weight, conv.weight[order]], dim=1) / 2
    bias = (conv.bias + conv.bias[order]) / 2
    return weight, bias


def pose_loss(
    heatmaps: torch.Tensor,
    targets: torch.Tensor,
    weights: torch.Tensor | None = None,
    loss_weight: float = 1.0,
) -> torch.Tensor:
    """Weighted heatmap MSE: `loss_weight * mean((heatmaps - targets)^2 * w)` over every element.

    `weights` may be per keypoint [B, K] (what the target generator produces), [B, K, 1, 1], or anything that
    broadcasts to the heatmaps. This is the original KeypointMSELoss normalisation (it used loss_weight=10).
    """
    err = (heatmaps.float() - targets.float()).square()
    if weights is not None:
        w = weights.float()
        if w.dim() == 2:
            w = w[:, :, None, None]
        err = err * w
    return loss_weight * err.mean()


def seg_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = 255) -> torch.Tensor:
    """Cross-entropy after upsampling logits bilinearly to the label size; `ignore_index` pixels are skipped."""
    if logits.shape[-2:] != labels.shape[-2:]:
        logits = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear", align_corners=False)
    return F.cross_entropy(logits.float(), labels.long(), ignore_index=ignore_index)
