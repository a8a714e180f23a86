"""One source's share of a run: its reader, the frames waiting for the models (`stages.take.Waiting`), its
tracking (the detect and track stages'), the results waiting for its writer, and its numbers. The batch stages take
frames from every stream (`batch_path`); its writer runs the source stages in frame order (`stages.SourceStages`,
which keeps what each of them keeps for this source: filters, smoother, sinks).

A result that was computed is written, unless a live source's output is still busy with earlier results (then the
oldest waiting result goes, counted as output too slow): the age limit applies to frames waiting for work, never
to work done.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Sapiens2StreamError, redact
from ..io.outputs import SinkSetup
from ..io.sink import Fenced
from ..io.sources import Frame, Source
from ..io.video_feed import VideoFeed
from .batch_path import END, Handoff
from .numbers import SourceNumbers
from .results import FrameResult
from .resume import prepare_resume
from .stages import SourceStages
from .stages.context import SourceContext
from .stages.take import Waiting
from .stages.track import SourceTracking

if TYPE_CHECKING:  # (the assembled configuration imports every stage, and so this module)
    from .pipeline_config import PipelineConfig


def check_stages(cfg: PipelineConfig, stages: list) -> None:
    """Configuration errors of one source (its single-source `cfg`) that its stages can find without opening
    anything."""
    ctx = cfg.source_context()
    for stage in stages:
        options = cfg.options_for(stage)
        if stage.scope == "source" and stage.enabled(options, ctx):
            stage.check(options, ctx)


class Stream:
    """A source with everything that is its own; see the module docstring for what is dropped and when."""

    def __init__(self, cfg: PipelineConfig, *, name: str = "", resume: bool = False,
                 on_quit: Callable[[], None] = lambda: None, observers: list | None = None) -> None:  # fmt: skip
        """`cfg`: a single-source configuration (PipelineConfig.per_source); `name`: the source's name, empty for
        the single `source:`; `resume`: continue the run recorded in its output folder; `on_quit`: what the
        display window calls to end the run; `observers`: the run's (the list itself: observers attached later
        are told too). Nothing is connected, read back or written until `open`."""
        self.cfg, self.name, self.resume, self.on_quit = cfg, name, resume, on_quit
        self.observers = observers if observers is not None else []
        self.mqtt = None  # the process's MQTT client, when outputs.mqtt is on (given at `open`)
        self.resumed = None  # the interrupted run continued (`open` reads it back)
        self.source = Source(cfg.source)
        rt = cfg.runtime
        self.numbers = SourceNumbers(self.source.stats, self.source.live)
        policy = rt.policy if rt.policy != "auto" else ("latest" if self.source.live else "block")
        self.waiting = Waiting(policy, self.source.live, rt, self.numbers)  # frames for the models (the take stage's)
        self.tracking = SourceTracking(cfg.detector, cfg.tracker, self.numbers)  # the detect and track stages' own
        self.folder_checks: list[Callable[[Path], None]] = []  # asked before any output folder is opened or rolled
        # (a fleet worker's fence: raises `Fenced` once the source moved to another worker)
        self.stage_run: SourceStages | None = None  # its source stages, given when the run starts it
        self.halt = threading.Event()  # stops this stream's reader (the run's stop, or the source removed)
        self.fenced = False  # another worker owns the source now: nothing more is written here
        self.feed = VideoFeed()  # the annotated video, for live views that subscribe from outside
        self.outbox = Handoff()  # computed results waiting for the writer, then END
        self.max_outbox = 0
        self.reading = True
        self.cut = False  # a second Ctrl-C: nothing more is written
        self.ending_sent = False
        self.closed = False  # closing has begun (nothing more is taken or written)
        self.done = threading.Event()  # ... and every output is closed complete
        self.error: BaseException | None = None
        self.wake: Callable[[], None] = lambda: None  # tells the planner something changed
        # the reader and the writer each get a thread of their own: many cameras must not starve a shared pool
        self.threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"stream-{name or 'source'}")

    def check(self, stages: list) -> None:
        check_stages(self.cfg, stages)

    def open(self, stages: list, mqtt=None) -> None:
        """Connect (a live source: once, so an unreachable camera is a configuration error), read back the
        interrupted run when resuming, and open the source stages `stages` (the sinks among them, with the run's
        MQTT client `mqtt`)."""
        self.mqtt = mqtt
        self.source.connect()
        if self.resume:
            self.resumed = prepare_resume(
                self.cfg.outputs, self.cfg.source, self.cfg.enabled_models(), self.source.live
            )
        if self.resumed is not None:
            self.cfg = replace(self.cfg, source=replace(self.cfg.source, start_frame=self.resumed.start_frame))
            self.source.cfg = self.cfg.source
            self.tracking.resume(self.resumed)
        self.stage_run = SourceStages(stages, self)
        self.stage_run.open()

    def context(self) -> SourceContext:
        """What this source's stages are told of it (opened: the reader, the run continued, the counters, what its
        sinks share with the run, and the run's observers for each result written)."""
        sinks = SinkSetup(self.feed, self.on_quit, self.resumed, self.mqtt, self.check_folder)
        return replace(self.cfg.source_context(), reader=self.source, resumed=self.resumed, numbers=self.numbers,
                       sinks=sinks, tell=self.tell)  # fmt: skip

    def tell(self, result: FrameResult) -> None:
        """A written result to the run's observers."""
        for observer in self.observers:
            observer.result(result, self)

    def check_folder(self, folder: Path) -> None:
        for check in self.folder_checks:
            check(folder)

    def stage_state(self, name: str):
        """A source stage's state for this source (e.g. "events": its rules), None when it does not run."""
        return None if self.stage_run is None else self.stage_run.state(name)

    def stage_reports(self) -> dict:
        """The reporting stages' status now, by their `reports` keys (`SourceStages.reports`)."""
        return {} if self.stage_run is None else self.stage_run.reports()

    @property
    def live(self) -> bool:
        return self.source.live

    # ------------------------------------------------------------------------------------------- reading

    async def read(self) -> None:
        """Read the source on this stream's own thread until it ends or `halt` is set."""
        loop = asyncio.get_running_loop()

        def produce() -> None:
            for frame in self.source.frames(self.halt):
                asyncio.run_coroutine_threadsafe(self._arrive(frame), loop).result()

        try:
            await loop.run_in_executor(self.threads, produce)
        except Exception as e:  # a broken source ends its stream; the others go on
            self.error = e
        finally:
            self.reading = False
            self._maybe_end()
            self.wake()

    async def _arrive(self, frame: Frame) -> None:
        if await self.waiting.arrive(frame):
            self.wake()

    # ------------------------------------------------------------------------------------------- writing

    def deliver(self, result: FrameResult) -> None:
        """A computed result, for the writer. A live stream whose output is still busy with a whole batch of
        earlier results drops the oldest of them (output too slow); its ended tracks ride on the next one."""
        if self.cut:  # a second Ctrl-C came while it was computed
            self.release(1)
            return
        result.source = self.name
        if result.frame.index in self.tracking.replay:  # drawn again: the recorded people, as they were written
            result.people, result.replayed = self.tracking.replayed_people(result.frame.index), True
        else:
            self.numbers.processed += 1
        unwritten = self.outbox.items
        if self.waiting.drops_allowed and len(unwritten) >= self.cfg.runtime.max_frames_per_batch:
            stale = unwritten.popleft()
            heir = unwritten[0] if unwritten else result
            heir.ended_tracks = [*stale.ended_tracks, *heir.ended_tracks]
            self.numbers.dropped["output_too_slow"] += 1
            self.waiting.in_flight -= 1
        self.outbox.put(result)
        self.max_outbox = max(self.max_outbox, len(self.outbox))

    def stop_taking(self) -> None:
        """A stop (Ctrl-C, SIGTERM, the window closed, the source removed): the reader stops, frames only waiting
        are left unprocessed, counted; frames the engine already took are still written."""
        self.halt.set()
        self.waiting.stop()
        self._maybe_end()

    def release(self, n: int) -> None:
        """Frames taken that will not be written after all (a stop came before they reached the models, or a
        second Ctrl-C before they were written)."""
        self.waiting.in_flight -= n
        self.numbers.left += n
        self._maybe_end()

    def write(self, result: FrameResult) -> None:
        """The source stages, in their order, on this stream's writer thread (`SourceStages`)."""
        if self.fenced:
            return
        try:
            self.stage_run(result)
        except Fenced as e:  # the source moved to another worker while this one was cut off: stop writing it
            self.fenced = True
            self.halt.set()
            self.source.stats.events.append(str(e))

    async def write_all(self) -> None:
        """The writer: results in frame order, on this stream's own thread, until the stream has ended."""
        loop = asyncio.get_running_loop()
        try:
            while (result := await self.outbox.get()) is not END:
                await loop.run_in_executor(self.threads, self.write, result)
                self.waiting.in_flight -= 1
                self._maybe_end()
                self.wake()
        finally:
            await loop.run_in_executor(self.threads, self.close)

    def _maybe_end(self) -> None:
        """Once the reader is done and every frame taken is written, the writer finishes the outputs."""
        if not self.ending_sent and not self.reading and self.waiting.in_flight == 0 and not self.waiting.frames:
            self.ending_sent = True
            self.outbox.end()

    def discard(self) -> None:
        """A second Ctrl-C: nothing computed is written any more (the outputs still close)."""
        self.stop_taking()
        self.cut = True
        dropped = [r for r in self.outbox.items if r is not END]
        for result in dropped:
            self.outbox.items.remove(result)
        self.release(len(dropped))

    def close(self) -> None:
        """Finish every output (once); also after an error or an interruption."""
        if self.closed:
            return
        self.closed = True
        self.numbers.ended = time.time()
        try:
            if self.stage_run is not None:
                self.stage_run.close()
        finally:
            self.done.set()

    # ------------------------------------------------------------------------------------------- numbers

    @property
    def label(self) -> str:
        """What names this source in the summary, Prometheus and status lines: its name, else the pipeline's."""
        return self.name or self.cfg.name

    def output_stats(self) -> dict[str, dict]:
        """What the outputs that can refuse work (re-stream, MQTT, virtual camera) sent and dropped."""
        return (self.stage_run.summary() if self.stage_run is not None else {}).get("outputs", {})

    def summary(self) -> dict:
        """This source's part of summary.json: what it is, its numbers (`SourceNumbers.snapshot`), what its stages
        add (outputs, the temporal filter, 3-D, event counts) and the latest events."""
        numbers = self.numbers.snapshot()
        for quiet in ("conversions", "left_unprocessed", "redrawn_frames"):  # said only when they happened
            if not numbers[quiet]:
                del numbers[quiet]
        detector = {"every": self.cfg.detector.every, "frames_detected": numbers.pop("frames_detected")}
        summary = {
            "source": redact(self.cfg.source.uri),
            **({"name": self.name} if self.name else {}),
            **({"connection": self.source.connection.snapshot()} if self.source.connection else {}),
            **numbers,
            "resumed_from_frame": self.resumed.next_frame if self.resumed else None,
            "detector": detector,
            **(self.stage_run.summary() if self.stage_run is not None else {}),
            "source_log": (log := [redact(e) for e in self.source.stats.events[-10:]]),
            "events": log,  # the old name of source_log, kept one release (it never held zone events)
        }
        if self.error is not None:
            summary["error"] = redact(str(self.error))
        return summary


def source_error(stream: Stream, several: bool) -> Sapiens2StreamError:
    """The stream's failure as the one-line error the command line prints."""
    message = str(stream.error) if isinstance(stream.error, Sapiens2StreamError) else (
        f"{type(stream.error).__name__}: {stream.error}")  # fmt: skip
    return Sapiens2StreamError(f"source {stream.name}: {message}" if several else message)
