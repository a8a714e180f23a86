"""The pipeline: per-source streams around one shared engine.

    streams (one per source: reader, waiting frames, tracker, smoother, sinks)
      -> take: the planner picks the frames of the next micro-batch, fairly across sources
      -> detect (one detector thread) + track (each stream's tracker)
      -> infer (one device thread: crops, batched Sapiens2 forwards, flip TTA, decoding)
      -> each stream's writer (smoothing and sinks on the stream's own thread)

Detection of the next batch overlaps inference of the current one. Files run at full batches for throughput.
Live sources are served freshest first: frames are taken just before the models free up (so they have not aged
while the previous batch ran), the newest ones, and batches are sized from the measured cost per frame so that
one batch of processing fits within `runtime.max_frame_age_s`. Work already done is never thrown away. A source
that stalls, drops or ends never holds back the others. Ctrl-C or SIGTERM stops reading, lets the micro-batch
already on the models finish and be written, and leaves the frames that were only waiting (a file's `--resume`
continues from them), so a stop takes one batch at most; a second one abandons that batch too. Sinks are closed in
every case, so outputs are complete and playable.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import torch

from ..config import PipelineConfig, SourceConfig
from ..console.pipeline_backend import PipelineBackend
from ..console.server import Console
from ..detect import Detector, make_detector
from ..errors import Sapiens2StreamError
from ..io.mqtt import MqttClient
from .device import resolve_device, resolve_dtype
from .engine import FrameResult, InferenceEngine, Person
from .metrics import Metrics
from .prometheus import Monitor
from .stream import DROP_REASONS, Stream, source_error

EMA = 0.3  # weight of the newest measurement in the cost estimates


@dataclass
class LoadedModels:
    """What is expensive to load and can serve many runs: the Sapiens2 models and the person detector, each with
    the one thread that runs it."""

    device: torch.device
    dtype: torch.dtype
    dtype_reason: str
    engine: InferenceEngine
    detector: Detector
    detect_thread: ThreadPoolExecutor


def load_models(cfg: PipelineConfig) -> LoadedModels:
    rt = cfg.runtime
    device = resolve_device(rt.device)
    dtype, reason = resolve_dtype(rt.dtype, device)
    compiled = rt.compile == "on" or (rt.compile == "auto" and device.type == "cuda")
    seg_width = cfg.temporal.seg_width if cfg.temporal.seg != "off" else None  # the part labels' temporal filter
    engine = InferenceEngine(cfg.enabled_models(), device, dtype, compiled, seg_width)
    detector = make_detector(cfg.detector, str(device))
    return LoadedModels(device, dtype, reason, engine, detector,
                        ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-detect"))  # fmt: skip


@dataclass
class Item:
    """A frame on its way from a stream through the engine."""

    stream: Stream
    frame: object
    people: list[Person]
    ended: list[int]


def frames_within(budget_s: float, cost_per_frame: float, max_frames: int) -> int:
    """The micro-batch a live source gets: as many frames as one batch can process within the latency budget,
    at least 1 and at most `max_frames` (a fleet worker measures its capacity at this size too)."""
    return max(1, min(max_frames, int(budget_s / cost_per_frame)))


class Planner:
    """Which frames the next micro-batch takes, and how many.

    Sources are served round robin (one frame each per round, starting after the last source served the time
    before), so no camera gets ahead of the others and a file takes its turn like a camera. Without live sources
    a batch is `max_frames_per_batch` frames (throughput); with them, as many as fit in the latency budget
    (`max_frame_age_s`) at the measured cost per frame, at least 1.
    """

    def __init__(self, streams: list[Stream], max_frames: int, budget_s: float) -> None:
        self.streams, self.max_frames, self.budget_s = streams, max_frames, budget_s
        self.cursor = 0
        self.cost_per_frame: float | None = None  # seconds of inference per frame, measured
        self.live_sizes: Counter[int] = Counter()

    def observe(self, seconds: float, frames: int) -> None:
        cost = seconds / frames
        self.cost_per_frame = cost if self.cost_per_frame is None else EMA * cost + (1 - EMA) * self.cost_per_frame

    def live_batch(self) -> int:
        if self.cost_per_frame is None:
            return 1
        return frames_within(self.budget_s, self.cost_per_frame, self.max_frames)

    def ready(self) -> list[Stream]:
        order = self.streams[self.cursor:] + self.streams[: self.cursor]
        return [s for s in order if s.admission() > 0]

    def size(self) -> int:
        return self.live_batch() if any(s.live for s in self.streams if s.reading) else self.max_frames

    def take(self) -> list[tuple[Stream, object]]:
        ready = self.ready()
        if not ready:
            return []
        n = self.size()
        shares = dict.fromkeys(ready, 0)
        while sum(shares.values()) < n:
            grew = False
            for s in ready:
                if sum(shares.values()) < n and s.admission() > shares[s]:
                    shares[s] += 1
                    grew = True
            if not grew:
                break
        served = [s for s in ready if shares[s]]
        picks = [(s, frame) for s in served for frame in s.take(shares[s])]
        if served:  # the next batch starts with the source after the last one served
            self.cursor = (self.streams.index(served[-1]) + 1) % len(self.streams)
        if picks and any(s.live for s, _ in picks):
            self.live_sizes[len(picks)] += 1
        return picks


class Pipeline:
    def __init__(
        self, cfg: PipelineConfig, on_result: Callable[[FrameResult, Pipeline], None] | None = None,
        resume: bool = False, loaded: LoadedModels | None = None, serve: bool = False, views: bool = False,
    ) -> None:  # fmt: skip
        """`resume`: continue the interrupted run recorded in each source's output folder (files and image
        folders). `loaded`: models and detector already loaded (batch workers reuse them across videos).
        `serve`: keep running when every source has ended, until stopped, for sources added while running
        (`add_source`: a fleet worker, the console). `views`: keep each source's live view for a console served
        elsewhere (a fleet worker's, for the driver's console); runtime.console serves its own and keeps them."""
        if cfg.runtime.console.port is not None and cfg.sources is None:  # the console names every source
            cfg = replace(cfg, sources=[replace(cfg.source, name=cfg.source.name or "cam1")])
        self.cfg = cfg
        self.on_result = on_result
        self.stop = threading.Event()
        self.cut = False
        self.interrupted = False
        self.several = cfg.sources is not None
        self.mqtt = MqttClient(cfg.outputs.mqtt) if cfg.outputs.mqtt.host else None
        self.serve = serve or cfg.runtime.console.port is not None  # the console may add sources at any time
        self.views = views or cfg.runtime.console.port is not None
        self.streams = [Stream(c, c.source.name if self.several else "", resume, self.finish, self.mqtt,
                               view=self.views) for c in cfg.per_source()]  # fmt: skip
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        self.group: asyncio.TaskGroup | None = None
        rt = cfg.runtime
        if rt.threads:
            torch.set_num_threads(rt.threads)
        self.loaded = loaded or load_models(cfg)
        self.engine, self.detector = self.loaded.engine, self.loaded.detector
        self.metrics = Metrics()  # the shared stages: detect and infer
        self.planner = Planner(self.streams, rt.max_frames_per_batch, rt.max_frame_age_s)
        self.work = asyncio.Event()
        self.abandon = asyncio.Event()  # a second Ctrl-C: stop waiting for the batch on the models
        self.slot: list[Item] | None = None  # the batch handed from detection to inference ([]: the end)
        self.slot_free = asyncio.Event()
        self.slot_full = asyncio.Event()
        self.busy_until = 0.0  # when the models are expected to be free (monotonic)
        self.models_free = asyncio.Event()
        self.detect_s: float | None = None  # seconds per detect stage batch, measured
        self.started = 0.0
        self.monitor = Monitor(self, rt.metrics) if rt.metrics.port is not None else None
        self.console = Console(PipelineBackend(self), rt.console) if rt.console.port is not None else None
        if self.monitor is not None:
            self.metrics.observer = self.monitor.observe_stage
        for stream in self.streams:
            self._attach(stream)

    def _attach(self, stream: Stream) -> None:
        stream.wake = self.work.set
        if self.monitor is not None:
            stream.metrics.observer = self.monitor.observe_stage

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
        self.work.set()

    # ------------------------------------------------------------------------------------------- sources

    def add_source(self, source: SourceConfig, fence=None, first_track: int = 1, timeout: float = 60.0) -> Stream:
        """Start a source on the running pipeline (from any thread): it gets everything a source given at the
        start has (its own folder OUTPUT/<name>/, reconnects, drop policy, summary). `fence` and `first_track`:
        see Stream."""
        if self.loop is None or self.stop.is_set():
            raise Sapiens2StreamError("the pipeline is not running; sources can be added only while it runs")
        if self.running(source.name) is not None:
            raise Sapiens2StreamError(f"a source named {source.name!r} is already running")
        stream = self.make_stream(source, fence, first_track)

        async def start() -> None:
            self.start_stream(stream)

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout)
        return stream

    def make_stream(self, source: SourceConfig, fence=None, first_track: int = 1) -> Stream:
        """The stream of a named source added while running: its outputs in OUTPUT/<name>/, opened here."""
        return Stream(self.cfg.for_source(source), source.name, False, self.finish, self.mqtt, fence, first_track,
                      self.views)  # fmt: skip

    def start_stream(self, stream: Stream) -> None:
        """Start a stream made by `make_stream` (on the pipeline's loop)."""
        self._attach(stream)
        stream.started = time.time()
        self.streams.append(stream)
        self.group.create_task(stream.read())
        self.group.create_task(stream.write_all(self._on_result))
        self.work.set()

    def remove_source(self, name: str, timeout: float = 60.0) -> dict:
        """Stop a running source (from any thread): it stops reading, what the models took is written, its
        outputs are closed complete; the others are not disturbed. Returns its summary."""
        stream = self.running(name)
        if stream is None or self.loop is None:
            raise Sapiens2StreamError(f"no running source named {name!r}")
        self.loop.call_soon_threadsafe(self.stop_source, stream)
        deadline = time.monotonic() + timeout
        while not stream.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        return stream.summary(self.metrics, {})

    def running(self, name: str) -> Stream | None:
        """The source of that name while it runs; None once it has closed (or was never added)."""
        return next((s for s in self.streams if s.name == name and not s.closed), None)

    def stop_source(self, stream: Stream) -> None:
        """Stop one stream (on the pipeline's loop): it stops reading and closes once what it took is written."""
        stream.stop_taking()
        self.work.set()

    # ------------------------------------------------------------------------------------------- stages

    async def _next_picks(self) -> list[tuple[Stream, object]] | None:
        """The frames of the next batch, or None once every stream has ended."""
        rt = self.cfg.runtime
        while True:
            self.work.clear()
            ready = self.planner.ready()
            if ready:
                break
            if all(not s.reading and not s.waiting for s in self.streams) and (self.stop.is_set() or not self.serve):
                return None
            await self.work.wait()
        want = self.planner.size()
        deadline = time.monotonic() + rt.max_wait_ms / 1000
        while sum(s.admission() for s in self.planner.ready()) < want and any(s.reading for s in self.streams):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self.work.clear()
            try:
                await asyncio.wait_for(self.work.wait(), remaining)
            except TimeoutError:
                break
        if any(s.drops_allowed for s in self.streams):
            # just in time: take live frames only when the models are about to be free (or are free, when the
            # batch ended earlier than estimated), so they do not age while the previous batch runs; under
            # `block` nothing is dropped, so frames age anyway
            delay = self.busy_until - time.monotonic() - (self.detect_s or 0.0)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.models_free.wait(), delay)
        return self.planner.take()

    async def _detect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.slot_free.wait()
            picks = await self._next_picks()
            if picks is None:
                break
            if not picks:
                continue
            start = time.perf_counter()
            plan = [s.needs_detection(f) for s, f in picks]
            frames = [f.rgb for (_, f), due in zip(picks, plan, strict=True) if due]
            found = iter(await loop.run_in_executor(self.loaded.detect_thread, self.detector.detect, frames)
                         if frames else [])  # fmt: skip
            if self.stop.is_set():  # stopped while detecting: these frames never reach the models
                for stream, _ in picks:
                    stream.release(1)
                continue
            items = []
            for (stream, frame), due in zip(picks, plan, strict=True):
                people, ended = stream.track(frame, next(found) if due else None)
                items.append(Item(stream, frame, people, ended))
            seconds = time.perf_counter() - start
            self.detect_s = seconds if self.detect_s is None else EMA * seconds + (1 - EMA) * self.detect_s
            self.metrics.stage("detect", seconds * 1e3 / len(items), len(items))
            self.slot = items
            self.slot_free.clear()
            self.slot_full.set()
        self.slot = []  # the end
        self.slot_free.clear()
        self.slot_full.set()

    async def _infer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.slot_full.wait()
            items, self.slot = self.slot, None
            self.slot_full.clear()
            self.slot_free.set()
            if not items:
                if self.console is not None:  # the run is over: the console ends with it
                    self.console.close()
                return
            if self.stop.is_set():  # a stop came before these frames reached the models
                for item in items:
                    item.stream.release(1)
                continue
            load = any(item.stream.under_load() for item in items)
            n = len(items)
            self.busy_until = time.monotonic() + (self.planner.cost_per_frame or 0.0) * n
            self.models_free.clear()
            start = time.perf_counter()
            running = loop.run_in_executor(
                self.engine.executor, self.engine.run, [i.frame for i in items], [i.people for i in items], load
            )
            abandoned = asyncio.ensure_future(self.abandon.wait())
            try:
                await asyncio.wait([running, abandoned], return_when=asyncio.FIRST_COMPLETED)
            finally:
                abandoned.cancel()
                self.models_free.set()
            if not running.done():  # a second Ctrl-C: the device thread finishes on its own, unheard
                for item in items:
                    item.stream.release(1)
                continue
            results = running.result()
            seconds = time.perf_counter() - start
            self.planner.observe(seconds, n)
            self.metrics.stage("infer", seconds * 1e3 / n, n)
            people = sum(len(i.people) for i in items)
            if people:
                self.metrics.batch_sizes["people"].append(people)
            for item, result in zip(items, results, strict=True):
                result.ended_tracks = item.ended
                item.stream.deliver(result)

    def _on_result(self, result: FrameResult) -> None:
        if self.monitor is not None:
            self.monitor.frame_age.labels(result.source or self.cfg.name).observe(time.time() - result.frame.wall_s)
        if self.on_result is not None:
            self.on_result(result, self)

    # ------------------------------------------------------------------------------------------- running

    def run(self) -> dict:
        """Run to the end of input (or a stop request) and return the summary. A source that failed ends its
        stream while the others go on; the failure is raised at the end (`SourceFailed`, with the summary)."""
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
            stream.started = self.started
        self.slot_free.set()
        try:
            async with asyncio.TaskGroup() as group:
                self.loop, self.group, self.loop_thread = loop, group, threading.get_ident()
                for stream in self.streams:
                    group.create_task(stream.read())
                    group.create_task(stream.write_all(self._on_result))
                group.create_task(self._detect())
                group.create_task(self._infer())
                if self.console is not None:
                    group.create_task(self.console.serve())
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0] from None
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            self._halt_readers()
            for stream in self.streams:
                stream.close()
                stream.threads.shutdown(wait=False)
            if self.mqtt is not None:  # after the streams: their last track events go out before "offline"
                self.mqtt.close()
            if self.monitor is not None:
                self.monitor.close()
        return self.summary()

    def summary(self) -> dict:
        """One source: its summary. Several: each source's and the totals."""
        shared = {
            "interrupted": self.interrupted,
            "device": str(self.loaded.device),
            "dtype": str(self.loaded.dtype).removeprefix("torch."),
            "dtype_reason": self.loaded.dtype_reason,
            "live_batch_sizes": dict(sorted(self.planner.live_sizes.items())),
            "events": self.engine.events,
        }
        per_source = {s.name: s.summary(self.metrics, shared) for s in self.streams}
        if not self.several:
            return next(iter(per_source.values()))
        elapsed = max(time.time() - self.started, 1e-9)
        totals = {
            "frames_in": sum(s["frames_in"] for s in per_source.values()),
            "frames_out": sum(s["frames_out"] for s in per_source.values()),
            "dropped": {r: n for r in DROP_REASONS if (n := sum(s["dropped"].get(r, 0) for s in per_source.values()))},
            "seconds": round(elapsed, 2),
        }
        totals["written_fps"] = round(totals["frames_out"] / elapsed, 2)
        totals["processed_fps"] = round(sum(s.processed for s in self.streams) / elapsed, 2)
        return {**shared, "sources": per_source, "totals": totals, **self.metrics.summary()}


class SourceFailed(Sapiens2StreamError):
    """A source failed during the run (the others finished); carries the run's summary."""

    def __init__(self, error: Exception, summary: dict) -> None:
        super().__init__(str(error))
        self.summary = summary
