"""Task heads: transposed-convolution heads (pose, seg) and pixel-shuffle heads (normal, pointmap, matting).

Layers are flat `nn.Sequential`s of [conv, InstanceNorm, SiLU] so that parameter names match the released
checkpoints (`decode_head.deconv_layers.0/3/6`, `upsample_blocks.N.0`, `conv_layers.0/3/6`, `conv_<task>`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .shapes import HeadConfig, scale_grid


def norm_act(channels: int) -> list[nn.Module]:
    """InstanceNorm without affine parameters or running stats (adds no tensors), then SiLU."""
    return [nn.InstanceNorm2d(channels), nn.SiLU()]


def deconv_padding(kernel: int) -> tuple[int, int]:
    """(padding, output_padding) that make a stride-2 transposed convolution upsample exactly 2x."""
    return {4: (1, 0), 3: (1, 1), 2: (0, 0)}[kernel]


def conv_stack(in_ch: int, channels: tuple[int, ...], kernels: tuple[int, ...], stride: int = 1) -> nn.Sequential:
    layers: list[nn.Module] = []
    for out_ch, k in zip(channels, kernels, strict=True):
        layers += [nn.Conv2d(in_ch, out_ch, k, stride=stride, padding=(k - 1) // 2), *norm_act(out_ch)]
        in_ch = out_ch
    return nn.Sequential(*layers)


class DeconvHead(nn.Module):
    """Stride-2 transposed convolutions (no bias), 1x1 refinements, then a 1x1 predictor."""

    def __init__(self, in_channels: int, cfg: HeadConfig, predictor_name: str) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        ch = in_channels
        for out_ch, k in zip(cfg.upsample_channels, cfg.upsample_kernels, strict=True):
            pad, out_pad = deconv_padding(k)
            layers += [
                nn.ConvTranspose2d(ch, out_ch, k, stride=2, padding=pad, output_padding=out_pad, bias=False),
                *norm_act(out_ch),
            ]
            ch = out_ch
        self.deconv_layers = nn.Sequential(*layers)
        self.conv_layers = conv_stack(ch, cfg.conv_channels, cfg.conv_kernels)
        self.predictor_name = predictor_name
        self.add_module(predictor_name, nn.Conv2d((cfg.conv_channels or (ch,))[-1], cfg.num_outputs, 1))

    @property
    def predictor(self) -> nn.Conv2d:
        return getattr(self, self.predictor_name)

    def trunk(self, features: torch.Tensor) -> torch.Tensor:
        """Everything before the 1x1 predictor."""
        return self.conv_layers(self.deconv_layers(features))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.predictor(self.trunk(features))


class PixelShuffleHead(nn.Module):
    """A 3x3 input conv, conv + PixelShuffle(2) upsampling blocks, refinements and a 1x1 predictor.

    With `scale_conv_channels` it also carries the pointmap focal-scale branch (stride-2 convs + MLP).
    The reference flattens that branch at a size frozen from the training resolution and so breaks at
    any other input size; here a feature map of another size is resized to the trained grid first.
    """

    def __init__(self, in_channels: int, cfg: HeadConfig, predictor_name: str) -> None:
        super().__init__()
        self.input_conv = nn.Sequential(nn.Conv2d(in_channels, in_channels, 3, padding=1), *norm_act(in_channels))
        blocks = []
        ch = in_channels
        for out_ch, k in zip(cfg.upsample_channels, cfg.upsample_kernels, strict=True):
            blocks.append(
                nn.Sequential(nn.Conv2d(ch, 4 * out_ch, k, padding=(k - 1) // 2), nn.PixelShuffle(2), *norm_act(out_ch))
            )
            ch = out_ch
        self.upsample_blocks = nn.ModuleList(blocks)
        self.conv_layers = conv_stack(ch, cfg.conv_channels, cfg.conv_kernels)
        self.predictor_name = predictor_name
        self.add_module(predictor_name, nn.Conv2d((cfg.conv_channels or (ch,))[-1], cfg.num_outputs, 1))
        self.scale_grid = tuple(cfg.scale_grid)
        self.scale_conv_kernels = tuple(cfg.scale_conv_kernels)
        if cfg.scale_conv_channels:
            self.scale_conv_layers = conv_stack(in_channels, cfg.scale_conv_channels, cfg.scale_conv_kernels, stride=2)
            flat = cfg.scale_conv_channels[-1] * self.scale_grid[0] * self.scale_grid[1]
            h1, h2 = cfg.scale_hidden
            self.scale_final_layer = nn.Sequential(
                nn.Flatten(), nn.Linear(flat, h1), nn.SiLU(), nn.Linear(h1, h2), nn.SiLU(), nn.Linear(h2, 1)
            )

    @property
    def has_scale(self) -> bool:
        return hasattr(self, "scale_final_layer")

    @property
    def predictor(self) -> nn.Conv2d:
        return getattr(self, self.predictor_name)

    def trunk(self, features: torch.Tensor) -> torch.Tensor:
        """Everything before the 1x1 predictor."""
        x = self.input_conv(features)
        for block in self.upsample_blocks:
            x = block(x)
        return self.conv_layers(x)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.predictor(self.trunk(features))

    def scale(self, features: torch.Tensor, trained_grid: tuple[int, int]) -> torch.Tensor:
        """Canonical / actual focal length, [B, 1], from the backbone feature map at any resolution.

        Features whose grid already reduces to the trained `scale_grid` go in as they are (exactly the
        reference); any other grid is first resized to `trained_grid`, a grid that does.
        """
        if scale_grid(tuple(features.shape[-2:]), 1, self.scale_conv_kernels) != self.scale_grid:
            shrink = features.shape[-2] > trained_grid[0] or features.shape[-1] > trained_grid[1]
            features = F.interpolate(features, size=trained_grid, mode="bilinear", antialias=shrink)
        return self.scale_final_layer(self.scale_conv_layers(features))
