"""The pipeline: per-source streams around the shared stages, run in the one order `stages.base.ORDER` gives. A
frame's story has three parts, each told in one place:

    1. its source's reader and the batch's path (`frame_path.read`, then `frame_path.run_batches`): take ->
       detect -> track -> infer, for micro-batches of every source;
    2. its source's writer (`frame_path.write_all` -> `stages.SourceStages`): temporal -> smooth -> threed ->
       angles -> kinematics -> events -> users' stages -> write (sinks, then the observers);
    3. across sources, once per run (`stages.group.GroupStages`): triangulate -> group_angles -> group_kinematics ->
       write_3d (a calibrated group), pose2sim (at the end).

`runtime.frame_path` tells the first two, top to bottom. This module opens them, runs them and stops them; it
tells no part of the story itself.

Detection of the next batch overlaps inference of the current one. Files run at full batches for throughput.
Live sources are served freshest first: frames are taken just before the models free up (so they have not aged
while the previous batch ran), the newest ones, and batches are sized from the measured cost per frame so that
one batch of processing fits within `runtime.max_frame_age_s`. Work already done is never thrown away. A source
that stalls, drops or ends never holds back the others. Ctrl-C or SIGTERM stops reading, lets the micro-batch
already on the models finish and be written, and leaves the frames that were only waiting (a file's `--resume`
continues from them), so a stop takes one batch at most; a second one abandons that batch too. Sinks are closed in
every case, so outputs are complete and playable.

Whoever watches a run (the console, a fleet worker, the progress bar, the Python API) attaches an `Observer`; the
pipeline knows none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from ..detect import check_detector, make_detector
from ..errors import Sapiens2StreamError
from ..io.mqtt import MqttClient, tls_context
from ..io.options import SourceConfig
from ..io.records import read_moments
from ..io.sources import Source
from . import frame_path
from .device import resolve_device, resolve_dtype
from .engine import InferenceEngine, check_model_sources
from .flow import BatchRun, LoadedModels, ModelClock, Planner
from .live_mocap import MOMENTS, Moment
from .memory import MemoryTrim
from .numbers import DROP_REASONS, StageTimes
from .observer import Observer
from .pipeline_config import PipelineConfig
from .prometheus import Monitor
from .results import FrameResult
from .stages import STAGES, api_stage, builtin_stages, in_order, yaml_stage
from .stages.context import group_context, runs, source_plan
from .stages.group import GroupPlan, GroupStages
from .stream import Stream, check_stages, source_error
from .threads import census, torch_threads


def load_models(cfg: PipelineConfig) -> LoadedModels:
    check_model_sources(cfg.enabled_models())
    check_detector(cfg.detector)
    rt = cfg.runtime
    device = resolve_device(rt.device)
    dtype, reason = resolve_dtype(rt.dtype, device)
    compiled = rt.compile == "on" or (rt.compile == "auto" and device.type == "cuda")
    seg_width = cfg.temporal.seg_width if cfg.temporal.seg != "off" else None  # the part labels' temporal filter
    engine = InferenceEngine(cfg.enabled_models(), device, dtype, compiled, seg_width, fp8=bool(rt.fp8))
    shapes = engine.warm_up(rt.max_frames_per_batch)
    detector = make_detector(cfg.detector, str(device))
    return LoadedModels(device, dtype, reason, engine, detector,
                        ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-detect"), shapes)  # fmt: skip


def users_stages(cfg: PipelineConfig, given: list) -> list:
    """The YAML's `stages:` and the stage objects given from Python, each with a name of its own."""
    stages = [*(yaml_stage(c, f"stages[{i}]") for i, c in enumerate(cfg.stages)), *(api_stage(s) for s in given)]
    taken = set(STAGES)
    for stage in stages:
        if stage.name in taken:
            raise Sapiens2StreamError(f"stages: the name {stage.name!r} is taken (built-in stages: "
                                      f"{', '.join(STAGES)}); give the stage another name")  # fmt: skip
        taken.add(stage.name)
    return stages


def arranged_stages(cfg: PipelineConfig, given: list = ()) -> list:
    """Every stage of a run of `cfg` in order: the built-in ones, users' from the YAML and `given`; a source stage
    placed among the batch stages, or among the group stages, is a configuration error."""
    stages = in_order([*builtin_stages(), *users_stages(cfg, given)])
    last_batch = max(i for i, stage in enumerate(stages) if stage.scope == "batch")
    early = [stage for stage in stages[:last_batch] if stage.scope == "source"]
    if early:
        raise Sapiens2StreamError(f"stages: {early[0].name!r} must run after infer (a stage sees one source's "
                                  "results; after: infer, or any stage after it)")  # fmt: skip
    first_group = next((i for i, stage in enumerate(stages) if stage.scope == "group"), len(stages))
    late = [stage for stage in stages[first_group:] if stage.scope == "source"]
    if late:
        raise Sapiens2StreamError(
            f"stages: {late[0].name!r} cannot run after {late[0].after!r}, a stage across "
            "sources (a stage of yours sees one source's results: after write at the latest)"
        )
    return stages


def check_run(cfg: PipelineConfig, given: list = ()) -> list:
    """`validate`: every check that building and opening a Pipeline for `run` makes before its first frame, by
    the same code, without loading a model, connecting a camera or a broker, or writing anything. Returns the
    stages that run for some source, in order."""
    stages = arranged_stages(cfg, given)
    singles = cfg.per_source()
    for single in singles:
        Source(single.source)  # a file that is no video, a folder without images
        check_stages(source_plan(single, stages), stages)
    check_group_stages(cfg, stages)
    check_model_sources(cfg.enabled_models())
    check_detector(cfg.detector)
    if cfg.outputs.mqtt.host and cfg.outputs.mqtt.tls is not None:
        tls_context(cfg.outputs.mqtt.tls)
    return [s for s in stages if (runs(cfg, s) if s.scope == "group" else
                                  any(runs(single, s) for single in singles))]  # fmt: skip


def check_group_stages(cfg: PipelineConfig, stages: list) -> list:
    """The group stages that run for `cfg` (the whole configuration), each checked."""
    ctx = group_context(cfg)
    enabled = [s for s in stages if s.scope == "group" and s.enabled(cfg.options_for(s), ctx)]
    for stage in enabled:
        stage.check(cfg.options_for(stage), ctx)
    return enabled


def group_plan(cfg: PipelineConfig, stages: list, **context) -> GroupPlan:
    """What the group stages `stages` (enabled and checked for `cfg`) are given: each its own section of `cfg`, and
    the run's context with `context` (what is known once the run opens: rates, MQTT, ...). A run opens them with
    it; a fleet's driver sends it to its hub."""
    return GroupPlan(stages, {s.name: cfg.options_for(s) for s in stages}, replace(group_context(cfg), **context))


class ResultCallback(Observer):
    """`on_result(result, pipeline)` for every result written."""

    def __init__(self, pipeline: Pipeline, on_result: Callable[[FrameResult, Pipeline], None]) -> None:
        self.pipeline, self.on_result = pipeline, on_result

    def result(self, result: FrameResult, stream: Stream) -> None:
        self.on_result(result, self.pipeline)


class Pipeline:
    def __init__(
        self, cfg: PipelineConfig, *, on_result: Callable[[FrameResult, Pipeline], None] | None = None,
        resume: bool = False, loaded: LoadedModels | None = None, serve: bool = False, stages: list = (),
        on_moment: Callable[[Moment], None] | None = None,
    ) -> None:  # fmt: skip
        """`on_result(result, pipeline)`: called for every result written (an observer). `resume`: continue the
        interrupted run recorded in each source's output folder (files and image folders). `loaded`: models and
        detector already loaded (batch workers reuse them across videos). `serve`: keep running when every source
        has ended, until stopped, for sources added while running (`add_source`: a fleet worker, the console).
        `stages`: users' stage objects (the Python API's `stages=`), besides the YAML's `stages:`. `on_moment`:
        each moment of the calibrated camera group once every group stage has added to it (on their thread).

        Configuration errors are said here; nothing is connected, read back or written until `open` (which `run`
        calls)."""
        self.cfg = cfg
        self.stop = threading.Event()
        self.cut = False
        self.interrupted = False
        self.opened = False
        self.several = cfg.sources is not None
        self.serve = serve
        self.resuming = resume
        self.mqtt: MqttClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        self.group: asyncio.TaskGroup | None = None
        self.abandon = asyncio.Event()  # a second Ctrl-C: stop waiting for the batch on the models
        self.started = 0.0
        self.thread_census: dict[str, int] = {}
        self.observers: list[Observer] = []
        self.times = StageTimes()  # the batch stages: detect, track, infer
        self.monitor: Monitor | None = None  # the metrics server (runtime.metrics), from `open`
        self.cross: GroupStages | None = None  # the stages across sources (live motion capture, Pose2Sim), `open`
        stages = arranged_stages(cfg, stages)
        self.batch_stages = [s for s in stages if s.scope == "batch"]
        self.source_stages = [s for s in stages if s.scope == "source"]
        self.group_stages = check_group_stages(cfg, stages)
        if on_moment is not None and not any(s.name == "triangulate" for s in self.group_stages):
            raise Sapiens2StreamError("on_moment: no camera group is triangulated here (threed.calibration naming "
                                      "two or more of the sources)")  # fmt: skip
        self.on_moment = on_moment
        self.streams = [self._stream(c, c.source.name if self.several else "", resume=resume)
                        for c in cfg.per_source()]  # fmt: skip
        for stream in self.streams:
            stream.check(self.source_stages)
        rt = cfg.runtime
        self.owns_models = loaded is None  # then their threads end with the run
        with torch_threads(rt.threads):
            self.loaded = loaded or load_models(cfg)
        self.engine = self.loaded.engine
        # what the models cost, measured as the batches go; whether they leave work out under load (`flip: auto`)
        self.clock = ModelClock(thins=any(m.flip == "auto" for m in self.engine.cfg.values()))
        self.planner = Planner(self.streams, self.clock, rt.max_frames_per_batch, rt.max_frame_age_s)
        self.batch = BatchRun(self.streams, self.planner, self.clock, self.loaded, self.stop, self.abandon, self.serve,
                              self.times)  # fmt: skip
        self.batch_states: dict[str, object] = {}
        if on_result is not None:
            self.observe(ResultCallback(self, on_result))
        self.memory = self.observe(MemoryTrim())  # freed memory handed back to the system once a minute

    def open(self) -> None:
        """Connect the cameras, the broker and the metrics server, read back what `--resume` continues, and open
        every source's stages (their files); once, before the run (`run` calls it)."""
        if self.opened:
            return
        self.opened = True
        cfg, rt = self.cfg, self.cfg.runtime
        self.mqtt = MqttClient(cfg.outputs.mqtt) if cfg.outputs.mqtt.host else None
        for stream in self.streams:
            stream.open(self.source_stages, self.mqtt)
        self.batch_states = {s.name: s.open(cfg.options_for(s), self.batch) for s in self.batch_stages}
        if rt.metrics.port is not None:
            self.monitor = self.observe(Monitor(self, rt.metrics))
        if self.group_stages:
            rates = {s.label: s.source.rate or s.source.fps for s in self.streams}
            moments = Path(cfg.outputs.dir) / MOMENTS
            resumed = read_moments(moments, cut=True) if self.resuming and moments.exists() else None
            plan = group_plan(cfg, self.group_stages, rates=rates, mqtt=self.mqtt,
                              interrupted=lambda: self.interrupted, resumed=resumed)  # fmt: skip
            self.cross = self.observe(GroupStages(plan, [self.on_moment] if self.on_moment else []))

    def observe(self, observer: Observer) -> Observer:
        """Attach an observer (before `run`)."""
        self.observers.append(observer)
        return observer

    def _stream(self, cfg: PipelineConfig, name: str, **options) -> Stream:
        return Stream(source_plan(cfg, self.source_stages), name=name, on_quit=self.finish, observers=self.observers,
                      **options)  # fmt: skip

    @property
    def source(self):
        """The (first) source: the single-source runs' way to its numbers."""
        return self.streams[0].source

    # ------------------------------------------------------------------------------------------- control

    def request_stop(self) -> None:
        """First call: stop reading and taking frames; the batch on the models is finished and written. Second
        call: abandon that batch too (nothing more is written; the outputs still close)."""
        self.interrupted = True
        if self.stop.is_set():
            self.cut = True
            self.abandon.set()
            for stream in self.streams:
                stream.discard()
        self.finish()

    def finish(self) -> None:
        """Stop reading and taking frames; what the models are working on is written. Also the end the viewer
        asks for by pressing q or closing the display window (a normal end). From any thread: the streams'
        asyncio events are set on the pipeline's own loop."""
        self._halt_readers()
        if self.loop is None or threading.get_ident() == self.loop_thread:
            self._stop_taking()
        elif not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the run ended meanwhile: nothing left to stop
                self.loop.call_soon_threadsafe(self._stop_taking)

    def _halt_readers(self) -> None:
        """Stop every reader now (thread-safe: plain threading events)."""
        self.stop.set()
        for stream in self.streams:
            stream.halt.set()

    def _stop_taking(self) -> None:
        for stream in self.streams:
            stream.stop_taking()
        self.planner.work.set()

    # ------------------------------------------------------------------------------------------- sources

    def add_source(self, source: SourceConfig, prepare: Callable[[Stream], None] | None = None,
                   timeout: float = 60.0) -> Stream:  # fmt: skip
        """Start a source on the running pipeline (from any thread): it gets everything a source given at the
        start has (its own folder OUTPUT/<name>/, reconnects, drop policy, summary). `prepare(stream)`: what the
        caller adds to the stream before it opens (a fleet worker: its fence and first track id)."""
        if self.loop is None or self.stop.is_set():
            raise Sapiens2StreamError("the pipeline is not running; sources can be added only while it runs")
        if self.running(source.name) is not None:
            raise Sapiens2StreamError(f"a source named {source.name!r} is already running")
        stream = self.make_stream(source, prepare)

        async def start() -> None:
            self.start_stream(stream)

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout)
        return stream

    def make_stream(self, source: SourceConfig, prepare: Callable[[Stream], None] | None = None) -> Stream:
        """The stream of a named source added while running: its outputs in OUTPUT/<name>/, opened here."""
        stream = self._stream(self.cfg.for_source(source), source.name)
        stream.check(self.source_stages)
        if prepare is not None:
            prepare(stream)
        stream.open(self.source_stages, self.mqtt)
        return stream

    def start_stream(self, stream: Stream) -> None:
        """Start a stream made by `make_stream` (on the pipeline's loop)."""
        stream.numbers.started = time.time()
        self.streams.append(stream)
        self._begin(stream)
        self.planner.work.set()

    def _begin(self, stream: Stream) -> None:
        """Run a stream's reader and writer in the run's task group, and tell the observers (on the loop)."""
        frame_path.begin(stream, self.group, self.observers, self.planner.work.set)

    def remove_source(self, name: str, timeout: float = 60.0) -> dict:
        """Stop a running source (from any thread): it stops reading, what the models took is written, its
        outputs are closed complete; the others are not disturbed. Returns its summary."""
        stream = self.running(name)
        if stream is None or self.loop is None:
            raise Sapiens2StreamError(f"no running source named {name!r}")
        self.loop.call_soon_threadsafe(self.stop_source, stream)
        stream.done.wait(timeout)
        return stream.summary()

    def running(self, name: str) -> Stream | None:
        """The source of that name while it runs; None once it has closed (or was never added)."""
        return next((s for s in self.streams if s.name == name and not s.closed), None)

    def stop_source(self, stream: Stream) -> None:
        """Stop one stream (on the pipeline's loop): it stops reading and closes once what it took is written."""
        stream.stop_taking()
        self.planner.work.set()

    # ------------------------------------------------------------------------------------------- running

    def run(self) -> dict:
        """Run to the end of input (or a stop request) and return the summary. A source that failed ends its
        stream while the others go on; the failure is raised at the end (`SourceFailed`, with the summary)."""
        self.open()
        with torch_threads(self.cfg.runtime.threads):  # the run's setting, the caller's again after it
            summary = asyncio.run(self._run())
        failed = [s for s in self.streams if s.error is not None]
        if failed:
            raise SourceFailed(source_error(failed[0], self.several), summary)
        return summary

    async def _run(self) -> dict:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.request_stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread, or no signals here: request_stop() still works
        self.started = time.time()
        for stream in self.streams:
            stream.numbers.started = self.started
        try:
            async with asyncio.TaskGroup() as group:
                self.loop, self.group, self.loop_thread = loop, group, threading.get_ident()
                for observer in self.observers:
                    for task in observer.started(self):
                        group.create_task(task)
                for stream in self.streams:
                    self._begin(stream)
                group.create_task(frame_path.run_batches(self.batch_stages, self.batch_states, self.batch,
                                                         self.observers))  # fmt: skip
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0] from None
        finally:
            self.thread_census = census()  # as the run ran, before its threads end
            for sig in installed:
                loop.remove_signal_handler(sig)
            self._halt_readers()
            for stream in self.streams:
                stream.close()
                stream.threads.shutdown(wait=False)
            if self.mqtt is not None:  # after the streams: their last track events go out before "offline"
                self.mqtt.close()
            if self.owns_models:  # a process that runs many pipelines keeps no device or detector thread of each
                self.loaded.close()
            for observer in self.observers:
                observer.ended()
        return self.summary()

    def summary(self) -> dict:
        """The run's summary, in one shape whatever the number of sources: what ran, each source's own under
        `sources` (by its label: its name, else the pipeline's), the totals, and the shared stages' times."""
        per_source = {s.label: s.summary() for s in self.streams}
        elapsed = max(time.time() - self.started, 1e-9)
        counted = [s.numbers for s in self.streams]
        totals = {
            "frames_in": sum(n.stats.frames for n in counted),
            "frames_out": sum(n.written for n in counted),
            "processed": sum(n.processed for n in counted),
            "dropped": {r: n for r in DROP_REASONS if (n := sum(c.dropped[r] for c in counted))},
            "seconds": round(elapsed, 2),
        }
        totals["processed_fps"] = round(totals["processed"] / elapsed, 2)
        totals["written_fps"] = round(totals["frames_out"] / elapsed, 2)
        return {
            "interrupted": self.interrupted,
            "device": str(self.loaded.device),
            "dtype": str(self.loaded.dtype).removeprefix("torch."),
            "dtype_reason": self.loaded.dtype_reason,
            "compiled": self.loaded.compiled,
            **({"fp8": self.loaded.engine.fp8} if self.loaded.engine.fp8 else {}),
            "sources": per_source,
            "totals": totals,
            **self.times.snapshot(),
            "live_batch_sizes": dict(sorted(self.planner.live_sizes.items())),
            "threads": self.thread_census,  # by kind, as the run ended
            "engine_notes": self.engine.events,  # what the device thread had to do (out of memory: batch halved)
            "errors": [{"source": label, **e} for label, src in per_source.items() for e in src["errors"]]
            + (self.cross.errors if self.cross is not None else []),  # a group stage's: {stage, error, moment}
            **(self.cross.summary() if self.cross is not None else {}),
        }


class SourceFailed(Sapiens2StreamError):
    """A source failed during the run (the others finished); carries the run's summary."""

    def __init__(self, error: Exception, summary: dict) -> None:
        super().__init__(str(error))
        self.summary = summary
