"""The Sapiens2 ViT backbone.

Module and parameter names follow the released checkpoints (`patch_embed.projection`, `storage_tokens`,
`blocks.N.attn.wq`, fused `ffn.w12`, final `ln1`), so loading a released file needs no renaming and the
gate/up projections stay one matrix multiply.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .shapes import BackboneConfig


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32 and cast back before the weight, as the reference does (stable in bf16)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)
        return normed * self.weight


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class PatchEmbed(nn.Module):
    def __init__(self, in_channels: int, dim: int, patch_size: int) -> None:
        super().__init__()
        self.projection = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(x).flatten(2).transpose(1, 2)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Multi-head attention with per-layer grouped key/value heads, QK-RMSNorm, 2-D RoPE and LayerScale.

    Grouped K/V are handed to SDPA as they are (`enable_gqa`), never repeated in memory.
    """

    def __init__(self, cfg: BackboneConfig, kv_heads: int) -> None:
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.kv_heads, self.head_dim = cfg.num_heads, kv_heads, hd
        self.wq = nn.Linear(d, d, bias=cfg.query_bias)
        self.wk = nn.Linear(d, kv_heads * hd, bias=cfg.key_bias)
        self.wv = nn.Linear(d, kv_heads * hd, bias=cfg.value_bias)
        self.proj = nn.Linear(d, d, bias=cfg.proj_bias)
        self.q_norm = RMSNorm(hd, cfg.eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(hd, cfg.eps) if cfg.qk_norm else nn.Identity()
        self.gamma = LayerScale(d) if cfg.layer_scale else nn.Identity()

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_norm(self.wq(x).view(b, n, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.wk(x).view(b, n, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.wv(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.kv_heads != self.num_heads)
        return self.gamma(self.proj(out.transpose(1, 2).reshape(b, n, -1)))


class SwiGLU(nn.Module):
    """`w3(silu(gate) * up)` with gate and up fused in `w12` (first half gate, second half up)."""

    def __init__(self, dim: int, hidden: int, bias: bool) -> None:
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * hidden, bias=bias)
        self.w3 = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w12(x).chunk(2, dim=-1)
        return self.w3(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: BackboneConfig, kv_heads: int) -> None:
        super().__init__()
        self.ln1 = RMSNorm(cfg.hidden_size, cfg.eps)
        self.attn = Attention(cfg, kv_heads)
        self.ln2 = RMSNorm(cfg.hidden_size, cfg.eps)
        self.ffn = SwiGLU(cfg.hidden_size, cfg.mlp_dim, cfg.mlp_bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), rope)
        return x + self.ffn(self.ln2(x))


class Backbone(nn.Module):
    """Patch embedding, CLS + register tokens, RMSNorm transformer blocks and a final norm."""

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.patch_embed = PatchEmbed(cfg.in_channels, d, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        if cfg.num_registers:
            self.storage_tokens = nn.Parameter(torch.zeros(1, cfg.num_registers, d))
        self.blocks = nn.ModuleList(Block(cfg, kv) for kv in cfg.kv_heads)
        self.ln1 = RMSNorm(d, cfg.eps)
        self._rope_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.checkpointing = False  # gradient checkpointing of the blocks while training (finetune on CUDA)

    @property
    def num_prefix_tokens(self) -> int:
        return 1 + self.cfg.num_registers

    def grid(self, pixel_values: torch.Tensor) -> tuple[int, int]:
        p = self.cfg.patch_size
        return pixel_values.shape[-2] // p, pixel_values.shape[-1] // p

    def rope_tables(self, h: int, w: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """cos/sin tables for all tokens of an h x w grid; prefix rows are (1, 0) so they pass unrotated.

        Patch centres are normalised to (-1, 1) per axis from the real grid, so any resolution works.
        Computed in fp32 once per grid, device and dtype. A compiled graph computes them inline instead: a table it
        cached would be a CUDA-graph output, overwritten by the next replay while this cache still held it.
        """
        if torch.compiler.is_compiling():
            return self.compute_rope_tables(h, w, device, dtype)
        key = (h, w, device, dtype)
        if key not in self._rope_cache:
            self._rope_cache[key] = self.compute_rope_tables(h, w, device, dtype)
        return self._rope_cache[key]

    def compute_rope_tables(self, h: int, w: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """The tables `rope_tables` serves, computed afresh."""
        hd = self.cfg.head_dim
        inv_freq = self.cfg.rope_theta ** (-torch.arange(0, hd // 4, device=device, dtype=torch.float32) * 4 / hd)
        ys = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) * 2 / h - 1
        xs = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) * 2 / w - 1
        yy, xx = torch.meshgrid(ys, xs, indexing="ij")
        ang_y = 2 * math.pi * yy.reshape(-1, 1) * inv_freq
        ang_x = 2 * math.pi * xx.reshape(-1, 1) * inv_freq
        angles = torch.cat([ang_y, ang_x], dim=-1).repeat(1, 2)
        prefix = self.num_prefix_tokens
        cos = torch.cat([torch.ones(prefix, hd, device=device), angles.cos()])
        sin = torch.cat([torch.zeros(prefix, hd, device=device), angles.sin()])
        return cos.to(dtype), sin.to(dtype)

    def embed(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixel_values.to(self.patch_embed.projection.weight.dtype))
        prefix = [self.cls_token.expand(x.shape[0], -1, -1)]
        if self.cfg.num_registers:
            prefix.append(self.storage_tokens.expand(x.shape[0], -1, -1))
        return torch.cat(prefix + [x], dim=1)

    def forward(
        self, pixel_values: torch.Tensor, keep_layers: tuple[int, ...] = ()
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Returns the final-normed token sequence and the raw outputs of the layers in `keep_layers`.

        Layer 0 is the embedding output and layer i (1..L) the output of block i, as in `hidden_states`.
        """
        h, w = self.grid(pixel_values)
        x = self.embed(pixel_values)
        rope = self.rope_tables(h, w, x.device, x.dtype)
        kept = [x] if 0 in keep_layers else []
        for i, block in enumerate(self.blocks, start=1):
            if self.checkpointing and self.training:  # training big models: recompute activations, hold less
                x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
            if i in keep_layers:
                kept.append(x)
        return self.ln1(x), kept

    def to_feature_map(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Patch tokens [B, P+hw, D] -> channels-first map [B, D, h, w]."""
        patches = tokens[:, self.num_prefix_tokens :]
        return patches.transpose(1, 2).reshape(tokens.shape[0], -1, *grid)
