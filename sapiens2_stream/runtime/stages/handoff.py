"""What travels between the batch stages: `Item`s (a frame on its way through them), handed from one lane to the
next, and from the models to each source's writer, through a `Handoff`: items in order, then `END`."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ...io.sources import Frame
from ..results import Person

END = object()  # the end of input, on every hand-off


class Handoff:
    """Items from one stage to the next that runs apart from it, in order, then END. `drained()` lets a producer
    wait until everything it handed over was taken (the front lane takes the next frames only then, so they do
    not age while the models are busy)."""

    def __init__(self) -> None:
        self.items: deque = deque()
        self.ready = asyncio.Event()
        self.empty = asyncio.Event()
        self.empty.set()

    def put(self, item) -> None:
        self.items.append(item)
        self.empty.clear()
        self.ready.set()

    def end(self) -> None:
        self.put(END)

    async def get(self):
        while not self.items:
            self.ready.clear()
            await self.ready.wait()
        item = self.items.popleft()
        if not self.items:
            self.empty.set()
        return item

    async def drained(self) -> None:
        await self.empty.wait()

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class Item:
    """A frame on its way from its stream through the batch stages."""

    stream: object
    frame: Frame
    detect: bool = False  # a detector frame (the tracker carries boxes on the others)
    detections: np.ndarray | None = None
    people: list[Person] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)  # tracks that ended by this frame
