"""Device and precision choices, and how a micro-batch moves between host and device.

`DeviceTransfers` is the engine's only way to move data: each frame is uploaded once and shared by every task,
each task runs on a CUDA stream of its own, outputs come back through pinned buffers with non-blocking copies,
and the batch synchronises once. On the CPU the same calls cost nothing, so the engine has one code path.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..errors import Sapiens2StreamError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise Sapiens2StreamError(f"runtime.device is {name!r} but no CUDA GPU is available; use cpu or auto")
    return device


# oneDNN's ISA names, lowest first; ONEDNN_MAX_CPU_ISA caps the kernels at one of them
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
               "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16")  # fmt: skip
# the unit, how torch asks the CPU for it, and the lowest oneDNN ISA that uses it
BF16_UNITS = (("AMX", "_is_amx_tile_supported", "AVX512_CORE_AMX"),
              ("AVX512-BF16", "_is_avx512_bf16_supported", "AVX512_CORE_BF16"))  # fmt: skip


def onednn_level() -> tuple[str, int]:
    """ONEDNN_MAX_CPU_ISA and its rank in ONEDNN_ISAS (unset or unknown names: above every listed ISA)."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    return isa, ONEDNN_ISAS.index(isa) if isa in ONEDNN_ISAS else len(ONEDNN_ISAS)


def kernel_cap() -> str | None:
    """Why the CPU's bf16 units cannot be used even if present: PyTorch's kernels held below AVX-512
    (ATEN_CPU_CAPABILITY) or oneDNN's held below bf16 (ONEDNN_MAX_CPU_ISA); None when nothing caps them."""
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith(("AVX512", "AMX")):
        return f"PyTorch's CPU kernels are held to {capability}"
    isa, level = onednn_level()
    if level < ONEDNN_ISAS.index("AVX512_CORE_BF16"):
        return f"oneDNN is held to {isa} (ONEDNN_MAX_CPU_ISA)"
    return None


def cpu_bf16_units() -> list[str]:
    """The CPU's native bf16 matrix units that the kernels may use. oneDNN's own check says yes on any AVX-512
    CPU, where bf16 is emulated and about 2x slower than fp32 (measured on Ice Lake); only these units make bf16
    fast, and only when neither PyTorch's nor oneDNN's kernels are held below them."""
    if kernel_cap() is not None:
        return []
    _, level = onednn_level()
    units = []
    for unit, name, needs in BF16_UNITS:
        try:
            if getattr(torch.cpu, name)() and level >= ONEDNN_ISAS.index(needs):
                units.append(unit)
        except (AttributeError, RuntimeError):
            pass
    return units


def resolve_dtype(name: str, device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype to run and why. auto: bf16 on CUDA and on CPUs with native bf16 units (Sapiens2 was trained in
    bf16 and fp16 overflows), fp32 otherwise."""
    if name != "auto":
        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name], "runtime.dtype"
    if device.type == "cuda":
        return torch.bfloat16, "auto: CUDA"
    units = cpu_bf16_units()
    if units and device.type == "cpu":
        return torch.bfloat16, f"auto: the CPU has native bf16 ({', '.join(units)})"
    if (cap := kernel_cap()) is not None:
        return torch.float32, f"auto: {cap}, where bf16 is emulated, so fp32"
    return torch.float32, "auto: no native bf16 on this CPU (no AMX or AVX512-BF16), so fp32"


BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def bucket_size(n: int) -> int:
    """The smallest bucket that holds n: compiled graphs are built for a few batch sizes and reused."""
    return next((b for b in BUCKETS if b >= n), n)


def pad_to_bucket(x: torch.Tensor) -> torch.Tensor:
    """Pad a batch to its bucket size by repeating the last item (outputs for the padding are discarded)."""
    n = x.shape[0]
    extra = bucket_size(n) - n
    return torch.cat([x, x[-1:].expand(extra, *x.shape[1:])]) if extra else x


def match_inductor_to_held_kernels() -> None:
    """Inductor picks its vector width and oneDNN's weight packing from the chip, not from ATEN_CPU_CAPABILITY or
    ONEDNN_MAX_CPU_ISA; with those holding the kernels lower, its code meets kernels of another ISA (measured
    here: NaN outputs with both held to AVX2, heap corruption with oneDNN alone). Match it to the held kernels."""
    if kernel_cap() is None:
        return
    import torch._inductor.config as inductor

    inductor.cpp.weight_prepack = False
    if not torch.backends.cpu.get_cpu_capability().startswith(("AVX512", "AMX")):
        inductor.cpp.simdlen = 8  # 256-bit vectors of fp32: AVX2


def compile_model(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Static-shape torch.compile; on CUDA with CUDA graphs ("reduce-overhead") and channels-last heads."""
    if device.type == "cpu":
        match_inductor_to_held_kernels()
    if device.type == "cuda" and hasattr(model, "decode_head"):
        model.decode_head.to(memory_format=torch.channels_last)
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    return torch.compile(model, dynamic=False, mode=mode)


def prepare_device_thread(device: torch.device, compiled: bool) -> None:
    """The engine's device thread, before its first call: made ready for compiled models (nothing to do for eager
    ones: importing dynamo alone takes a second, which a live source would pay in dropped frames)."""
    if not compiled:
        return
    make_room_for_graphs()
    if device.type == "cuda":
        give_thread_cuda_graph_state()


def make_room_for_graphs(graphs: int = 256) -> None:
    """Every model's graphs hang on one code object (`Sapiens2Network.forward`), one graph per model and batch
    size: pose, seg and matting over five batch sizes are 11 to 15, and past dynamo's default limit of 8 the rest
    run eager, without a word. Dynamo's settings are per thread: this sets the calling thread's."""
    import torch._dynamo.config as dynamo

    name = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"  # renamed in torch 2.7
    setattr(dynamo, name, max(getattr(dynamo, name), graphs))


def give_thread_cuda_graph_state() -> None:
    """Let the calling thread capture and replay torch.compile's CUDA graphs ("reduce-overhead").

    Before torch 2.12 the graph trees kept their per-thread state only on the thread that imported
    torch._inductor (and threads autograd starts), so a compiled model called from the engine's device thread
    failed an assertion (pytorch#123177; seen on an H200 with torch 2.11). This gives the thread its own state,
    as later torch does by itself; there it is already present or made the same way, and nothing changes.
    """
    from torch._inductor import cudagraph_trees as trees

    for name, empty in (("tree_manager_containers", dict), ("tree_manager_locks", lambda: defaultdict(threading.Lock))):
        if hasattr(trees.local, name) or torch._C._is_key_in_tls(name):
            continue
        setattr(trees.local, name, empty())
        torch._C._stash_obj_in_tls(name, getattr(trees.local, name))


class DeviceTransfers:
    """Host <-> device movement for one micro-batch; on the CPU every call is free (no copies, no streams)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def upload(self, images: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """Each frame once, as an HxWxC uint8 tensor on the device, shared by every task of the batch."""
        return [torch.from_numpy(np.ascontiguousarray(image)) for image in images]

    def stream(self, task: str) -> contextlib.AbstractContextManager:
        """Where `task`'s work is queued."""
        return contextlib.nullcontext()

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy of a device tensor (started, not necessarily finished, until `synchronize`)."""
        return tensor

    def synchronize(self) -> None:
        """Wait for every queued kernel and copy of the batch."""

    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor from `to_host` (after `synchronize`) that the caller may keep past the next batch."""
        return tensor


class PinnedPool:
    """Page-locked staging buffers reused from batch to batch. Pinning is a slow driver call (often slower than
    the pageable copy it speeds up), so it happens once per buffer, not once per frame. Buffers are flat bytes in
    power-of-two sizes, so batches whose shapes vary (people per frame) reuse them too; a buffer handed out
    stays reserved until `recycle`, which the batch's synchronise calls once every copy is done."""

    def __init__(self) -> None:
        self.free: dict[int, list[torch.Tensor]] = {}
        self.lent: list[tuple[int, torch.Tensor]] = []

    def get(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        nbytes = max(1, int(np.prod(shape)) * dtype.itemsize)
        size = 1 << (nbytes - 1).bit_length()
        spare = self.free.get(size)
        buffer = spare.pop() if spare else torch.empty(size, dtype=torch.uint8, pin_memory=True)
        self.lent.append((size, buffer))
        return buffer[:nbytes].view(dtype).view(tuple(shape))

    def recycle(self) -> None:
        for size, buffer in self.lent:
            self.free.setdefault(size, []).append(buffer)
        self.lent.clear()

    @property
    def pinned_bytes(self) -> int:
        return sum(size * len(b) for size, b in self.free.items()) + sum(size for size, _ in self.lent)


class CudaTransfers(DeviceTransfers):
    """Uploads through reused pinned buffers on the current stream, a CUDA stream per task that waits for them,
    non-blocking copies back into reused pinned buffers, and one device synchronise per batch: the tasks of a
    batch overlap, and no task's `.cpu()` serialises the others."""

    def __init__(self, device: torch.device, tasks: Sequence[str]) -> None:
        super().__init__(device)
        self.streams = {task: torch.cuda.Stream(device) for task in tasks}
        self.pool = PinnedPool()

    def upload(self, images: Sequence[np.ndarray]) -> list[torch.Tensor]:
        uploaded = []
        for image in super().upload(images):
            staging = self.pool.get(image.shape, image.dtype)
            staging.copy_(image)
            uploaded.append(staging.to(self.device, non_blocking=True))
        return uploaded

    @contextlib.contextmanager
    def stream(self, task: str) -> Iterator[None]:
        stream = self.streams[task]
        stream.wait_stream(torch.cuda.current_stream(self.device))  # the uploads happened there
        with torch.cuda.stream(stream):
            yield

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        out = self.pool.get(tensor.shape, tensor.dtype)
        out.copy_(tensor, non_blocking=True)
        return out

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)
        self.pool.recycle()

    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()  # out of the staging buffer, which the next batch reuses


def transfers_for(device: torch.device, tasks: Sequence[str]) -> DeviceTransfers:
    return CudaTransfers(device, tasks) if device.type == "cuda" else DeviceTransfers(device)
