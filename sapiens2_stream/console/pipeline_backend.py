"""The console's view of one running pipeline: its streams, read and changed on the pipeline's own loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..config import SourceConfig
from .live import LiveTap
from .status import Rates, describe


class PipelineBackend:
    def __init__(self, pipeline) -> None:
        self.pipeline = pipeline
        self.cfg = pipeline.cfg
        self.rates = Rates()
        self.removed: set[str] = set()  # sources removed here: no longer listed

    def tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.rates.sample({s.name: (s.source.stats.frames, s.metrics.frames_out) for s in self.pipeline.streams})
        for stream in self.pipeline.streams:
            stream.view.loop = loop

    def listed(self) -> list:
        return [s for s in self.pipeline.streams if not (s.closed and s.name in self.removed)]

    def stream(self, name: str):
        """The named source (the newest of that name), or None."""
        found = [s for s in self.listed() if s.name == name]
        return found[-1] if found else None

    def names(self) -> list[str]:
        return list(dict.fromkeys(s.name for s in self.listed()))

    def status(self, name: str) -> dict | None:
        stream = self.stream(name)
        return None if stream is None else describe(stream, self.rates)

    def running(self) -> list[SourceConfig]:
        return [s.cfg.source for s in self.pipeline.streams if not s.closed]

    async def add(self, source: SourceConfig) -> dict:
        stream = await asyncio.get_running_loop().run_in_executor(None, self.pipeline.make_stream, source)
        self.pipeline.start_stream(stream)
        self.removed.discard(source.name)
        return describe(stream, self.rates)

    async def remove(self, name: str) -> bool:
        stream = self.pipeline.running(name)
        if stream is None:
            return False
        self.pipeline.stop_source(stream)
        while not stream.closed:
            await asyncio.sleep(0.05)
        self.removed.add(name)
        return True

    def view(self, name: str) -> LiveTap | None:
        stream = self.stream(name)
        return None if stream is None else stream.view

    def folder(self, name: str) -> Path:
        return Path(self.stream(name).cfg.outputs.dir)

    def recording_now(self, name: str) -> list[Path]:
        """The videos being written now (the live view's recorder)."""
        stream = self.stream(name)
        return [stream.view.recording] if stream.view.recording is not None else []
