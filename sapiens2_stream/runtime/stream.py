"""One source's share of a run: its reader, the frames waiting for the models (`flow.Waiting`), its tracking
(the detect and track stages'), the results waiting for its writer, its source stages (`stages.SourceStages`, which
keep what each of them keeps for this source: filters, smoother, sinks) and its numbers and summary. What happens
to its frames, in order, is `frame_path`'s story; a stream only keeps the state.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from ..errors import Sapiens2StreamError, redact
from ..io.outputs import SinkSetup
from ..io.sink import Fenced
from ..io.sources import Source
from ..io.video_feed import VideoFeed
from .flow import Handoff, Waiting
from .numbers import SourceNumbers
from .observer import tell
from .results import FrameResult
from .resume import prepare_resume
from .stages import SourceStages
from .stages.context import SourceContext, SourcePlan
from .stages.track import SourceTracking


def check_stages(plan: SourcePlan, stages: list) -> None:
    """Configuration errors of one source that its stages can find without opening anything."""
    for stage in stages:
        options = plan.options.get(stage.name)
        if stage.scope == "source" and stage.enabled(options, plan.ctx):
            stage.check(options, plan.ctx)


class Stream:
    """A source with everything that is its own; see the module docstring for what is dropped and when."""

    def __init__(self, plan: SourcePlan, *, name: str = "", resume: bool = False,
                 on_quit: Callable[[], None] = lambda: None, observers: list | None = None) -> None:  # fmt: skip
        """`plan`: the source's sections, its stages' and its context (`stages.context.source_plan`); `name`: its
        name, empty for the single `source:`; `resume`: continue the run recorded in its output folder; `on_quit`:
        what the display window calls to end the run; `observers`: the run's (the list itself: observers attached
        later are told too). Nothing is connected, read back or written until `open`."""
        self.plan, self.name, self.resume, self.on_quit = plan, name, resume, on_quit
        self.observers = observers if observers is not None else []
        self.mqtt = None  # the process's MQTT client, when outputs.mqtt is on (given at `open`)
        self.resumed = None  # the interrupted run continued (`open` reads it back)
        self.source = Source(plan.source)
        self.uri = plan.source.uri  # the source's address (the detector's cache key)
        self.runtime = rt = plan.runtime
        self.numbers = SourceNumbers(self.source.stats, self.source.live)
        policy = rt.policy if rt.policy != "auto" else ("latest" if self.source.live else "block")
        self.waiting = Waiting(policy, self.source.live, rt, self.numbers)  # frames for the models (the take stage's)
        self.tracking = SourceTracking(plan.detector, plan.tracker, self.numbers)  # the detect and track stages' own
        self.folder_checks: list[Callable[[Path], None]] = []  # asked before any output folder is opened or rolled
        # (a fleet worker's fence: raises `Fenced` once the source moved to another worker)
        self.stage_run: SourceStages | None = None  # its source stages, given when the run starts it
        self.halt = threading.Event()  # stops this stream's reader (the run's stop, or the source removed)
        self.fenced = False  # another worker owns the source now: nothing more is written here
        self.feed = VideoFeed()  # the annotated video, for live views that subscribe from outside
        self.outbox = Handoff()  # computed results waiting for the writer, then END
        self.reading = True
        self.cut = False  # a second Ctrl-C: nothing more is written
        self.ending_sent = False
        self.closed = False  # closing has begun (nothing more is taken or written)
        self.done = threading.Event()  # ... and every output is closed complete
        self.error: BaseException | None = None
        # the reader and the writer each get a thread of their own: many cameras must not starve a shared pool
        self.threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"stream-{name or 'source'}")

    def check(self, stages: list) -> None:
        check_stages(self.plan, stages)

    def open(self, stages: list, mqtt=None) -> None:
        """Connect (a live source: once, so an unreachable camera is a configuration error), read back the
        interrupted run when resuming, and open the source stages `stages` (the sinks among them, with the run's
        MQTT client `mqtt`)."""
        self.mqtt = mqtt
        self.source.connect()
        if self.resume:
            plan = self.plan
            self.resumed = prepare_resume(plan.outputs, plan.source, plan.ctx.models, self.source.live)
        if self.resumed is not None:
            self.plan = self.plan.resumed_at(self.resumed.start_frame)
            self.source.cfg = self.plan.source
            self.tracking.resume(self.resumed)
        self.stage_run = SourceStages(stages, self)
        self.stage_run.open()

    def context(self) -> SourceContext:
        """What this source's stages are told of it (opened: the reader, the run continued, the counters, what its
        sinks share with the run, and the run's observers for each result written)."""
        sinks = SinkSetup(self.feed, self.on_quit, self.resumed, self.mqtt, self.check_folder)
        return replace(self.plan.ctx, reader=self.source, resumed=self.resumed, numbers=self.numbers,
                       sinks=sinks, tell=functools.partial(tell, self.observers, self))  # fmt: skip

    def check_folder(self, folder: Path) -> None:
        for check in self.folder_checks:
            check(folder)

    def stage_reports(self) -> dict:
        """The reporting stages' status now, by their `reports` keys (`SourceStages.reports`)."""
        return {} if self.stage_run is None else self.stage_run.reports()

    @property
    def live(self) -> bool:
        return self.source.live

    # ------------------------------------------------------------------------------------------- ending

    def stop_taking(self) -> None:
        """A stop (Ctrl-C, SIGTERM, the window closed, the source removed): the reader stops, frames only waiting
        are left unprocessed, counted; frames the engine already took are still written."""
        self.halt.set()
        self.waiting.stop()
        self.maybe_end()

    def release(self, n: int) -> None:
        """Frames taken that will not be written after all (a stop came before they reached the models, or a
        second Ctrl-C before they were written)."""
        self.waiting.release(n)
        self.maybe_end()

    def write(self, result: FrameResult) -> None:
        """The source stages, in their order, on this stream's writer thread (`SourceStages`); a fenced stream
        writes nothing more."""
        if self.fenced:
            return
        try:
            self.stage_run(result)
        except Fenced as e:  # the source moved to another worker while this one was cut off: stop writing it
            self.fenced = True
            self.halt.set()
            self.source.stats.events.append(str(e))

    def written(self) -> None:
        """A result went through the source stages (or was fenced off)."""
        self.maybe_end(self.waiting.finished(1))

    def maybe_end(self, settled: bool | None = None) -> None:
        """Once the reader is done and every frame taken is written (`settled`: known already), the writer finishes
        the outputs."""
        if settled is None:
            settled = self.waiting.settled()
        if not self.ending_sent and not self.reading and settled:
            self.ending_sent = True
            self.outbox.end()

    def discard(self) -> None:
        """A second Ctrl-C: nothing computed is written any more (the outputs still close)."""
        self.stop_taking()
        self.cut = True
        self.release(len(self.outbox.clear()))

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
        return self.plan.ctx.label

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
        detector = {"every": self.plan.detector.every, "frames_detected": numbers.pop("frames_detected")}
        summary = {
            "source": self.source.source_id,
            **({"name": self.name} if self.name else {}),
            **({"connection": self.source.connection.snapshot()} if self.source.connection else {}),
            **numbers,
            "resumed_from_frame": self.resumed.next_frame if self.resumed else None,
            "detector": detector,
            **(self.stage_run.summary() if self.stage_run is not None else {}),
            "source_log": [redact(e) for e in self.source.stats.events[-10:]],
        }
        if self.error is not None:
            summary["error"] = redact(str(self.error))
        return summary


def source_error(stream: Stream, several: bool) -> Sapiens2StreamError:
    """The stream's failure as the one-line error the command line prints."""
    message = str(stream.error) if isinstance(stream.error, Sapiens2StreamError) else (
        f"{type(stream.error).__name__}: {stream.error}")  # fmt: skip
    return Sapiens2StreamError(f"source {stream.name}: {message}" if several else message)
