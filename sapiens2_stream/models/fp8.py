"""The transformer's matrix products in fp8 (`runtime.fp8`; on an H100 or H200 fp8 has twice bf16's dense rate).

Every `nn.Linear` of the backbone (attention's q, k, v and output, the MLP's two) becomes an `Fp8Linear`: its
weight stored once as float8 e4m3 with a scale per output row (the row's largest value maps to 448, e4m3's
largest), each input scaled per row as it comes (no calibration set), and the product made by
`torch._scaled_mm` into bf16 with the bias added there. The patch embedding, the norms, attention itself and the
heads stay as they were. Whether a model still says what it said is not decided here: the engine converts a
model only after the parity gate (`deploy.parity.fp8_gate`) passed it against its own bf16 outputs.
"""

from __future__ import annotations

import torch
from torch import nn

E4M3_MAX = 448.0
FP8_CAPABILITY = (8, 9)  # NVIDIA compute capability with fp8 tensor cores (Ada, Hopper and later)


def scaled_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] as float8 e4m3 and each row's scale [M, 1] (fp32): row = fp8 * scale."""
    scale = (x.abs().amax(1, keepdim=True).float() / E4M3_MAX).clamp(min=1e-12)
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


class Fp8Linear(nn.Module):
    """A linear layer whose product runs in fp8 with per-row scales (inputs and weight), output in bf16."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight, scale = scaled_rows(linear.weight.detach())
        self.register_buffer("weight_fp8", weight)  # [out, in]: transposed, the column-major operand _scaled_mm takes
        self.register_buffer("weight_scale", scale.t().contiguous())  # [1, out]
        bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        x8, scale = scaled_rows(flat)
        out = torch._scaled_mm(x8, self.weight_fp8.t(), scale_a=scale, scale_b=self.weight_scale, bias=self.bias,
                               out_dtype=torch.bfloat16)  # fmt: skip
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


def to_fp8(backbone: nn.Module) -> int:
    """Every `nn.Linear` inside `backbone` replaced, in place, by its `Fp8Linear`; how many."""
    replaced = 0
    for parent in list(backbone.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Fp8Linear(child))
                replaced += 1
    return replaced


def fp8_refusal(device: torch.device) -> str | None:
    """Why fp8 products cannot run fast on `device`, or None where they can (an NVIDIA GPU of compute 8.9+)."""
    if device.type != "cuda":
        return f"fp8 needs an NVIDIA GPU of compute capability 8.9 or later (this run is on {device.type})"
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        return f"fp8 needs compute capability 8.9 or later ({torch.cuda.get_device_name(device)} has " \
               f"{capability[0]}.{capability[1]})"  # fmt: skip
    return None
