"""Device and precision choices, and one CUDA stream per model when a GPU is present."""

from __future__ import annotations

import contextlib

import torch

from ..errors import Sapiens2StreamError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise Sapiens2StreamError(f"runtime.device is {name!r} but no CUDA GPU is available; use cpu or auto")
    return device


def cpu_has_fast_bf16() -> bool:
    """Native bf16 matrix units (AVX512-BF16 or AMX) through oneDNN."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto: bf16 on CUDA and on CPUs with native bf16 (about 2x faster there; Sapiens2 was trained in bf16 and
    fp16 overflows), fp32 otherwise."""
    if name == "auto":
        fast = device.type == "cuda" or (device.type == "cpu" and cpu_has_fast_bf16())
        return torch.bfloat16 if fast else torch.float32
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def bucket_size(n: int) -> int:
    """The smallest bucket that holds n: compiled graphs are built for a few batch sizes and reused."""
    return next((b for b in BUCKETS if b >= n), n)


def pad_to_bucket(x: torch.Tensor) -> torch.Tensor:
    """Pad a batch to its bucket size by repeating the last item (outputs for the padding are discarded)."""
    n = x.shape[0]
    extra = bucket_size(n) - n
    return torch.cat([x, x[-1:].expand(extra, *x.shape[1:])]) if extra else x


def compile_model(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Static-shape torch.compile; on CUDA with CUDA graphs ("reduce-overhead") and channels-last heads."""
    if device.type == "cuda" and hasattr(model, "decode_head"):
        model.decode_head.to(memory_format=torch.channels_last)
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    return torch.compile(model, dynamic=False, mode=mode)


class ModelStreams:
    """A CUDA stream per model so the models of one batch overlap; a no-op on CPU."""

    def __init__(self, device: torch.device, names: list[str]) -> None:
        self.device = device
        self.streams = {n: torch.cuda.Stream(device) for n in names} if device.type == "cuda" else {}

    def context(self, name: str) -> contextlib.AbstractContextManager:
        stream = self.streams.get(name)
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def synchronize(self) -> None:
        for stream in self.streams.values():
            stream.synchronize()
