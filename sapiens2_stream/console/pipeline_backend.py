"""The console of one running pipeline: an observer of it (`PipelineConsole`) that serves the console on the
pipeline's own loop, keeps a live view of every source and reads and changes the pipeline's streams there."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..io.options import SourceConfig
from ..runtime.observer import Observer
from .events import EventCollector, RecentEvents
from .live import LiveTap, LiveViews
from .server import Console
from .status import describe


class PipelineBackend:
    def __init__(self, pipeline, views: LiveViews, events: RecentEvents) -> None:
        self.pipeline, self.views, self.recent = pipeline, views, events
        self.cfg = pipeline.cfg
        self.removed: set[str] = set()  # sources removed here: no longer listed

    def tick(self, loop: asyncio.AbstractEventLoop) -> None:
        for stream in self.pipeline.streams:
            tap = self.views.of(stream)
            if tap is not None:
                tap.loop = loop

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
        return None if stream is None else describe(stream)

    def running(self) -> list[SourceConfig]:
        return [s.plan.source for s in self.pipeline.streams if not s.closed]

    async def add(self, source: SourceConfig) -> dict:
        stream = await asyncio.get_running_loop().run_in_executor(None, self.pipeline.make_stream, source)
        self.pipeline.start_stream(stream)
        self.removed.discard(source.name)
        return describe(stream)

    async def remove(self, name: str) -> bool:
        stream = self.pipeline.running(name)
        if stream is None:
            return False
        self.pipeline.stop_source(stream)
        while not stream.done.is_set():  # its outputs closed complete
            await asyncio.sleep(0.05)
        self.removed.add(name)
        return True

    def latest_3d(self) -> dict | None:
        """Live motion capture's latest moment ({"time": None, "people": []} before the first), or None without."""
        cross = self.pipeline.cross
        report = cross.reports().get("3d") if cross is not None else None  # the triangulate stage's
        if report is None:
            return None
        return report["latest"] or {"time": None, "views": [], "people": []}

    def view(self, name: str) -> LiveTap | None:
        stream = self.stream(name)
        return None if stream is None else self.views.of(stream)

    def folder(self, name: str) -> Path:
        return self.stream(name).plan.ctx.out_dir

    def recording_now(self, name: str) -> list[Path]:
        """The videos being written now (the live view's recorder)."""
        recording = self.stream(name).feed.recording
        return [recording] if recording is not None else []


class PipelineConsole(Observer):
    """`runtime.console` for one pipeline: attach with `pipeline.observe(PipelineConsole(pipeline))` before it runs
    (the pipeline should `serve`, so sources can be added after the first ones ended). The console starts and
    ends with the run; its live views are the sources' own recorders."""

    def __init__(self, pipeline) -> None:
        self.views = pipeline.observe(LiveViews())
        events = pipeline.observe(EventCollector()).recent
        self.backend = PipelineBackend(pipeline, self.views, events)
        self.console = Console(self.backend, pipeline.cfg.runtime.console)

    def started(self, pipeline) -> list:
        return [self.console.serve()]

    def ending(self) -> None:
        self.console.close()
