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


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto: bf16 on CUDA (Sapiens2 was trained in bf16; fp16 overflows), fp32 on CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


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
