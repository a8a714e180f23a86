"""Bounded queues between stages, each with an explicit policy for a full queue.

- `block`: the producer waits (files: nothing is ever dropped).
- `latest`: the queue is emptied and only the newest item kept (live: lowest latency).
- `drop_oldest`: the oldest item makes room (live: smoother, still bounded).
Every dropped item is counted. `END` closes a queue and is never dropped.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

END = object()


class EdgeQueue:
    def __init__(self, name: str, maxsize: int, policy: str) -> None:
        if policy not in ("block", "latest", "drop_oldest"):
            raise ValueError(f"unknown queue policy {policy!r}")
        self.name, self.policy = name, policy
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)
        self.dropped = 0
        self.max_depth = 0

    async def put(self, item: Any) -> None:
        if self.policy == "block" or not self.queue.full():
            await self.queue.put(item)
        else:
            n = self.queue.qsize() if self.policy == "latest" else 1
            for _ in range(n):
                self.queue.get_nowait()
            self.dropped += n
            self.queue.put_nowait(item)
        self.max_depth = max(self.max_depth, self.queue.qsize())

    async def close(self) -> None:
        await self.queue.put(END)

    async def get(self) -> Any:
        return await self.queue.get()

    def depth(self) -> int:
        return self.queue.qsize()

    def cut(self) -> int:
        """Discard everything queued (a second Ctrl-C); returns how many items were discarded."""
        n = 0
        while not self.queue.empty():
            if self.queue.get_nowait() is END:
                self.queue.put_nowait(END)
                break
            n += 1
        self.dropped += n
        return n


async def gather_batch(queue: EdgeQueue, max_items: int, max_wait_s: float) -> tuple[list, bool]:
    """Wait for one item, then take more until `max_items` or `max_wait_s` passes. Returns (items, ended)."""
    first = await queue.get()
    if first is END:
        return [], True
    items = [first]
    deadline = time.monotonic() + max_wait_s
    while len(items) < max_items:
        remaining = deadline - time.monotonic()
        try:
            item = queue.queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(queue.get(), remaining)
        except (TimeoutError, asyncio.QueueEmpty):
            break
        if item is END:
            return items, True
        items.append(item)
    return items, False
