"""Memory handed back over a long run: glibc's `malloc_trim` every minute.

A live run allocates pictures, packets and tensors in bursts (a camera reconnecting, a slow moment of the machine
that lets frames pile up to the queues' bounds). glibc keeps what a burst freed inside its arenas for reuse rather
than give it back, so resident memory steps up to each new high-water mark and never comes down: over weeks of
cameras that reads as a leak. Trimming once a minute returns the free pages (a few milliseconds of work); where the
C library is not glibc (macOS, musl) there is nothing to call and nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util

from .observer import Observer

TRIM_EVERY_S = 60.0


def malloc_trim():
    """glibc's malloc_trim, or None elsewhere."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


class MemoryTrim(Observer):
    """Trims the allocator every `every_s` while the run lasts (it stops at once when the run ends)."""

    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self.every_s, self.trim, self.trims = every_s, malloc_trim(), 0
        self.done: asyncio.Event | None = None

    def started(self, pipeline) -> list:
        if self.trim is None:
            return []
        self.done = asyncio.Event()
        return [self._loop()]

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.done.wait(), self.every_s)
                return
            except TimeoutError:
                self.trim(0)  # milliseconds, once a minute: on the loop itself, no thread for it
                self.trims += 1

    def ending(self) -> None:
        if self.done is not None:
            self.done.set()
