"""The shapes of a Sapiens2 model: its ViT backbone and its task head (widths, kernels, outputs)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import Sapiens2StreamError

DEFAULT_IMAGE_SIZE = (1024, 768)


@dataclass(frozen=True)
class BackboneConfig:
    """Shape of the ViT backbone. `kv_heads` holds one key/value head count per layer (GQA)."""

    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    kv_heads: tuple[int, ...] = ()
    mlp_dim: int = 4096
    patch_size: int = 16
    in_channels: int = 3
    num_registers: int = 8
    rope_theta: float = 100.0
    eps: float = 1e-6
    query_bias: bool = True
    key_bias: bool = True
    value_bias: bool = True
    proj_bias: bool = True
    mlp_bias: bool = True
    qk_norm: bool = True
    layer_scale: bool = True

    def __post_init__(self) -> None:
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", gqa_layout(self.num_layers, self.num_heads, self.num_heads // 2))
        if self.hidden_size % self.num_heads:
            raise Sapiens2StreamError(
                f"hidden size {self.hidden_size} is not divisible by {self.num_heads} heads; fix the config"
            )
        if len(self.kv_heads) != self.num_layers or any(self.num_heads % k for k in self.kv_heads):
            raise Sapiens2StreamError(
                f"key/value heads per layer {list(self.kv_heads)} must have {self.num_layers} entries that divide "
                f"{self.num_heads}; fix the config"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class HeadConfig:
    """Shape of a task head.

    `kind` is "deconv" (pose, seg: transposed convolutions) or "pixel_shuffle" (normal, pointmap, matting).
    The pointmap scale branch exists when `scale_conv_channels` is non-empty; `scale_grid` is the backbone grid
    it was trained on (the image size over the patch size), which its flatten layer depends on.
    """

    kind: str
    upsample_channels: tuple[int, ...]
    upsample_kernels: tuple[int, ...]
    conv_channels: tuple[int, ...]
    conv_kernels: tuple[int, ...]
    num_outputs: int
    scale_conv_channels: tuple[int, ...] = ()
    scale_conv_kernels: tuple[int, ...] = ()
    scale_hidden: tuple[int, ...] = ()
    scale_grid: tuple[int, int] = (0, 0)


def gqa_layout(num_layers: int, num_heads: int, kv_heads: int, full_first: int = 8, full_last: int = 8) -> tuple:
    """Key/value heads per layer: full multi-head in the first and last layers, grouped in between."""
    return tuple(num_heads if (i < full_first or i >= num_layers - full_last) else kv_heads for i in range(num_layers))


def scale_grid(image_size: tuple[int, int], patch_size: int, kernels: tuple[int, ...]) -> tuple[int, int]:
    """Spatial size after the stride-2 scale convolutions for a given input size."""
    h, w = image_size[0] // patch_size, image_size[1] // patch_size
    for k in kernels:
        pad = (k - 1) // 2
        h, w = (h + 2 * pad - k) // 2 + 1, (w + 2 * pad - k) // 2 + 1
    return h, w
