"""The staged asyncio pipeline: read -> detect + track -> infer (crop, batch, models, decode) -> smooth + sinks.

Stages are asyncio tasks joined by bounded queues; decoding, detection, inference and encoding run in worker
threads so the event loop only schedules. The first edge follows the source's policy (files block, live
sources keep the latest frames and count every drop); the later edges block, so back-pressure reaches the
frame queue. Ctrl-C or SIGTERM stops reading and lets the queued work finish; a second one discards it.
Sinks are closed in every case, so outputs are complete and playable.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ..config import PipelineConfig
from ..detect import Detector, make_detector
from ..io.sinks import make_sinks
from ..io.sources import LIVE_KINDS, Source, source_kind
from ..track import OnlineSmoother, Tracker
from .device import resolve_device, resolve_dtype
from .inference import FrameResult, InferenceEngine, Person
from .metrics import Metrics
from .queues import END, EdgeQueue, gather_batch
from .resume import prepare_resume


@dataclass
class LoadedModels:
    """What is expensive to load and can serve many runs: the Sapiens2 models and the person detector."""

    device: torch.device
    dtype: torch.dtype
    engine: InferenceEngine
    detector: Detector


def load_models(cfg: PipelineConfig) -> LoadedModels:
    rt = cfg.runtime
    device = resolve_device(rt.device)
    dtype = resolve_dtype(rt.dtype, device)
    compiled = rt.compile == "on" or (rt.compile == "auto" and device.type == "cuda")
    engine = InferenceEngine(cfg.enabled_models(), device, dtype, compiled)
    return LoadedModels(device, dtype, engine, make_detector(cfg.detector, str(device)))


class Pipeline:
    def __init__(
        self, cfg: PipelineConfig, on_result: Callable[[FrameResult, Pipeline], None] | None = None,
        resume: bool = False, loaded: LoadedModels | None = None,
    ) -> None:  # fmt: skip
        """`resume`: continue the interrupted run recorded in the output folder (files and image folders).
        `loaded`: models and detector already loaded (batch workers reuse them across videos)."""
        self.resumed = prepare_resume(cfg, source_kind(cfg.source) in LIVE_KINDS) if resume else None
        if self.resumed is not None:
            cfg = replace(cfg, source=replace(cfg.source, start_frame=self.resumed.start_frame))
        self.cfg = cfg
        self.on_result = on_result
        self.stop = threading.Event()
        self.cut = False
        self.interrupted = False
        self.metrics = Metrics()
        self.source = Source(cfg.source)
        rt = cfg.runtime
        self.policy = rt.policy if rt.policy != "auto" else ("latest" if self.source.live else "block")
        if rt.threads:
            torch.set_num_threads(rt.threads)
        loaded = loaded or load_models(cfg)
        self.device, self.dtype = loaded.device, loaded.dtype
        self.engine, self.detector = loaded.engine, loaded.detector
        self.tracker = Tracker(cfg.tracker)
        sm = cfg.smoothing
        self.smoother = OnlineSmoother(sm.method, sm.min_score, **sm.params)
        if self.resumed is not None:
            self.resumed.restore(self.tracker, self.smoother, cfg.detector.every)
        self.sinks = make_sinks(cfg, self.source, self.finish, self.resumed)
        self.queues: list[EdgeQueue] = []
        self._ended_unsent: list[int] = []  # tracks that ended on frames dropped before inference
        self._drops_seen = 0  # frame-queue drops already taken into account by under_load()
        self.started = 0.0

    # ------------------------------------------------------------------------------------------- control

    def request_stop(self) -> None:
        """First call: stop reading and finish what is queued. Second call: discard the queued work too."""
        self.interrupted = True
        if self.stop.is_set():
            self.cut = True
            for q in self.queues:
                q.cut()
        self.stop.set()

    def finish(self) -> None:
        """The viewer pressed q or closed the display window: stop reading, finish what is queued, a normal end."""
        self.stop.set()

    def under_load(self) -> bool:
        """Live input falling behind: the frame queue is half full or frames were dropped recently."""
        frames = self.queues[0]
        return self.source.live and (frames.depth() * 2 >= frames.queue.maxsize or frames.dropped > self._drops_seen)

    def _fresh(self, items: list, frame_of: Callable) -> list:
        """Live input: drop items whose frame is older than max_frame_age_s (checked before detection, inference
        and writing, so a slow output bounds the latency too).

        Never under the `block` policy, which promises that nothing is dropped.
        """
        if not self.source.live or self.policy == "block":
            return items
        now, limit = time.time(), self.cfg.runtime.max_frame_age_s
        fresh = [item for item in items if now - frame_of(item).wall_s <= limit]
        self.metrics.stale += len(items) - len(fresh)
        return fresh

    # ------------------------------------------------------------------------------------------- stages

    async def _read(self, out: EdgeQueue) -> None:
        loop = asyncio.get_running_loop()
        error: list[BaseException] = []

        def produce() -> None:
            try:
                for frame in self.source.frames(self.stop):
                    asyncio.run_coroutine_threadsafe(out.put(frame), loop).result()
            except BaseException as e:  # re-raised in the event loop below
                error.append(e)
            finally:
                asyncio.run_coroutine_threadsafe(out.close(), loop).result()

        await asyncio.to_thread(produce)
        if error:
            raise error[0]

    async def _detect(self, inp: EdgeQueue, out: EdgeQueue) -> None:
        rt, every = self.cfg.runtime, self.cfg.detector.every
        seen = self.resumed.detect_phase if self.resumed is not None else 0
        while True:
            frames, ended = await gather_batch(inp, rt.max_frames_per_batch, rt.max_wait_ms / 1000)
            frames = self._fresh(frames, lambda f: f)
            if frames and not self.cut:
                start = time.perf_counter()
                run = [i for i in range(len(frames)) if (seen + i) % every == 0]
                seen += len(frames)
                detections = await asyncio.to_thread(self.detector.detect, [frames[i].rgb for i in run])
                found = dict(zip(run, detections, strict=True))
                items = []
                for i, frame in enumerate(frames):
                    tracked = (
                        self.tracker.update(found[i], frame.pts_s) if i in found else self.tracker.carry(frame.pts_s)
                    )
                    people = [Person(tid, box, score) for tid, box, score in tracked]
                    items.append((frame, people, self.tracker.pop_ended()))
                self.metrics.stage("detect", (time.perf_counter() - start) * 1e3 / len(frames), len(frames))
                for item in items:
                    await out.put(item)
            if ended:
                await out.close()
                return

    async def _infer(self, inp: EdgeQueue, out: EdgeQueue) -> None:
        rt = self.cfg.runtime
        while True:
            items, ended = await gather_batch(inp, rt.max_frames_per_batch, rt.max_wait_ms / 1000)
            fresh = self._fresh(items, lambda item: item[0])
            kept = {id(item) for item in fresh}
            self._ended_unsent += [tid for item in items if id(item) not in kept for tid in item[2]]
            items = fresh
            if items and not self.cut:
                start = time.perf_counter()
                load = self.under_load()
                self._drops_seen = self.queues[0].dropped
                frames, people, ended_tracks = zip(*items, strict=True)
                results = await asyncio.to_thread(self.engine.run, list(frames), list(people), load)
                self.metrics.stage("infer", (time.perf_counter() - start) * 1e3 / len(items), len(items))
                n_people = sum(len(p) for p in people)
                if n_people:
                    self.metrics.batch_sizes["people"].append(n_people)
                for result, gone in zip(results, ended_tracks, strict=True):
                    result.ended_tracks = [*self._ended_unsent, *gone]  # those of dropped frames ride along
                    self._ended_unsent = []
                    await out.put(result)
            if ended:
                await out.close()
                return

    def _end_tracks(self, result: FrameResult) -> None:
        """Free the smoother state of the tracks that ended by this result's frame (written or dropped)."""
        for track_id in result.ended_tracks:
            self.smoother.drop(track_id)

    def _write(self, result: FrameResult) -> None:
        start = time.perf_counter()
        self._end_tracks(result)
        for p in result.people:
            if p.keypoints is not None:
                p.smoothed = self.smoother(p.track_id, result.frame.pts_s, p.keypoints, p.keypoint_scores)
        for sink in self.sinks:
            sink.write(result)
        self.metrics.frames_out += 1
        self.metrics.frame_age_ms.append((time.time() - result.frame.wall_s) * 1e3)
        self.metrics.stage("write", (time.perf_counter() - start) * 1e3)
        if self.on_result is not None:
            self.on_result(result, self)

    async def _sink(self, inp: EdgeQueue) -> None:
        while True:
            result = await inp.get()
            if result is END:
                return
            if self.cut:
                continue
            if self._fresh([result], lambda r: r.frame):
                await asyncio.to_thread(self._write, result)
            else:  # too old to show: dropped, but its ended tracks still end (every earlier result is written)
                self._end_tracks(result)

    # ------------------------------------------------------------------------------------------- running

    def run(self) -> dict:
        """Run to the end of input (or a stop request) and return the summary."""
        return asyncio.run(self._run())

    async def _run(self) -> dict:
        rt = self.cfg.runtime
        frames = EdgeQueue("frames", rt.queue_size, self.policy)
        people = EdgeQueue("detections", rt.queue_size, "block")
        results = EdgeQueue("results", rt.queue_size, "block")
        self.queues = [frames, people, results]
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.request_stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread, or no signals here: stop() still works
        self.started = time.time()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read(frames))
                group.create_task(self._detect(frames, people))
                group.create_task(self._infer(people, results))
                group.create_task(self._sink(results))
        except BaseExceptionGroup as eg:
            self.stop.set()
            raise eg.exceptions[0] from None
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            self.stop.set()
            for sink in self.sinks:
                sink.close()
        return self.summary()

    def summary(self) -> dict:
        elapsed = time.time() - self.started
        s = self.source.stats
        return {
            "source": self.cfg.source.uri,
            "frames_in": s.frames,
            "frames_out": self.metrics.frames_out,
            "dropped": {q.name: q.dropped for q in self.queues if q.dropped}
            | ({"stale": self.metrics.stale} if self.metrics.stale else {}),
            "reconnects": s.reconnects,
            "gap_s": round(s.gaps_s, 2),
            "corrupt_skipped": s.corrupt,
            "interrupted": self.interrupted,
            "resumed_from_frame": self.resumed.start_frame if self.resumed else None,
            "seconds": round(elapsed, 2),
            "fps": round(self.metrics.frames_out / elapsed, 2) if elapsed > 0 else 0.0,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "events": (s.events + self.engine.events)[-10:],
            **self.metrics.summary(),
        }
