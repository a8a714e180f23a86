"""Pictures packed into one block of shared memory, so worker processes that were not forked from the trainer
read them without a copy each.

The trainer's batch workers are started by a fork server (`batches.py` says why), so whatever they read reaches
them pickled. A list of numpy arrays pickles by value: each worker would receive every picture and keep a copy.
Packed into one torch byte tensor, it pickles as a file descriptor of shared memory (torch's own reduction for
tensors sent between processes): each worker maps the same pages, and the pictures cross once, at start.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

ALIGN = 16  # every array starts on a 16-byte boundary: float views need their alignment


class SharedArrays(Sequence):
    """A read-only list of numpy arrays (any shapes and dtypes) stored in one byte tensor."""

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.layout: list[tuple[int, tuple[int, ...], str]] = []
        offset = 0
        for a in arrays:
            self.layout.append((offset, a.shape, a.dtype.str))
            offset += -(-a.nbytes // ALIGN) * ALIGN
        # in shared memory from the start: sending a tensor moves its storage there in place, and numpy views of
        # the old storage would then read freed memory
        self.block = torch.empty(offset, dtype=torch.uint8).share_memory_()
        whole = self.block.numpy()
        for a, (start, _, _) in zip(arrays, self.layout, strict=True):
            whole[start : start + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)

    def __len__(self) -> int:
        return len(self.layout)

    def __getitem__(self, i):  # type: ignore[override]
        start, shape, dtype = self.layout[i]
        count = int(np.prod(shape, dtype=np.int64))
        view = self.block.numpy()[start : start + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
        view.flags.writeable = False  # shared with every worker: a write here would change their pictures
        return view
