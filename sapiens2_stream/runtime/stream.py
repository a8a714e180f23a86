"""One source's share of a run: its reader, the frames waiting for the models, its tracker and smoother, its
outputs and its numbers. The shared engine (detector, models, batcher) takes frames from every stream.

Waiting frames follow the source's policy. `block` (files): the reader waits for room, nothing is dropped.
`latest` (live): when the models free up they take the newest frames and the older ones are dropped, counted
as waiting too long; `drop_oldest` (live): frames are taken in order and a full buffer drops its oldest (queue
full). Live frames older than `runtime.max_frame_age_s` are dropped before any work. A result that was computed
is written, unless the output is still busy with earlier results (then the oldest waiting result goes,
counted as output too slow): the age limit applies to frames waiting for work, never to work done.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..config import PipelineConfig
from ..console.live import LiveTap
from ..errors import Sapiens2StreamError
from ..io.outputs import make_sinks
from ..io.sink import Fenced, as_recorded
from ..io.sources import LIVE_KINDS, Frame, Source, source_kind
from ..track import OnlineSmoother, Tracker
from .engine import FrameResult, Person
from .metrics import Metrics
from .resume import prepare_resume
from .temporal_filter import TemporalFilter, filtered_outputs

END = object()
LOAD_HOLD_S = 1.0  # a live source counts as behind for this long after frames were dropped for want of time
AUTO_EVERY_BEHIND = 3  # detector.every: auto, while a live source is behind
DROP_REASONS = ("waiting_too_long", "queue_full", "output_too_slow")


class Stream:
    """A source with everything that is its own; see the module docstring for what is dropped and when."""

    def __init__(self, cfg: PipelineConfig, name: str = "", resume: bool = False,
                 on_quit: Callable[[], None] = lambda: None, mqtt=None, fence: Callable[[Path], None] | None = None,
                 first_track: int = 1, view: bool = False) -> None:  # fmt: skip
        """`cfg`: a single-source configuration (PipelineConfig.per_source); `name`: the source's name, empty for
        the single `source:`; `mqtt`: the process's MQTT client, when outputs.mqtt is on. `fence(folder)`: asked
        before any output folder is opened or rolled, raises `Fenced` when this process may no longer write the
        source (it moved to another worker); `first_track`: the first track id (a camera continued elsewhere
        keeps its ids apart from those already written); `view`: keep a live view for a console."""
        live = source_kind(cfg.source) in LIVE_KINDS
        self.resumed = prepare_resume(cfg, live) if resume else None
        if self.resumed is not None:
            cfg = replace(cfg, source=replace(cfg.source, start_frame=self.resumed.start_frame))
        self.cfg, self.name = cfg, name
        self.source = Source(cfg.source)
        rt = cfg.runtime
        self.policy = rt.policy if rt.policy != "auto" else ("latest" if self.source.live else "block")
        self.drops_allowed = self.source.live and self.policy != "block"
        self.tracker = Tracker(cfg.tracker)
        self.tracker.next_id = max(self.tracker.next_id, first_track)
        sm = cfg.smoothing
        self.smoother = OnlineSmoother(sm.method, sm.min_score, **sm.params)
        steady = filtered_outputs(cfg)
        self.steady = TemporalFilter(cfg.temporal, steady) if steady else None  # the dense outputs' temporal filter
        every = cfg.detector.every
        self.detect_countdown = 0  # frames until the detector runs again
        if self.resumed is not None:
            fixed = 1 if every == "auto" else every
            self.resumed.restore(self.tracker, self.smoother, fixed)
            self.detect_countdown = -self.resumed.detect_phase % fixed
        # recorded frames some video lacks (a killed run): drawn again from their records, nothing recomputed but
        # the dense layers
        self.replay = self.resumed.replayed() if self.resumed is not None else {}
        self.halt = threading.Event()  # stops this stream's reader (the run's stop, or the source removed)
        self.fenced = False  # another worker owns the source now: nothing more is written here
        self.last_written: float | None = None  # wall time of the latest result written
        self.last_frame: int | None = None  # and its frame index
        self.disconnected = False  # a live source waiting for its camera to come back
        self.source.listeners.append(self._connection)
        # the console's live view: the recorder's H.264, or one encoded only while watched (no annotated video)
        self.view = LiveTap() if view else None
        self.sinks = make_sinks(cfg, self.source, on_quit, self.resumed, mqtt, fence, self.view)
        self.metrics = Metrics()
        self.dropped: Counter[str] = Counter()
        self.waiting: deque[Frame] = deque()
        self.room = asyncio.Event()  # the reader may add a frame (block policy)
        self.room.set()
        self.outbox: deque = deque()  # computed results waiting for the writer, then END
        self.outbox_ready = asyncio.Event()
        self.in_flight = 0  # frames taken by the engine and not yet written or dropped
        self.max_waiting = 0
        self.max_outbox = 0
        self.reading = True
        self.stopping = False  # asked to stop: nothing more is taken, waiting frames are left unprocessed
        self.left = 0  # frames read but left unprocessed by a stop (a file's --resume continues from them)
        self.cut = False  # a second Ctrl-C: nothing more is written
        self.ending_sent = False
        self.closed = False
        self.error: BaseException | None = None
        self.behind_until = 0.0
        self.last_take: float | None = None
        self.behind_s = 0.0  # time spent behind a live source
        self.processed = 0
        self.last_people = 0
        self.detected = 0
        self.redrawn = 0
        self.started = time.time()
        self.ended: float | None = None
        self.wake: Callable[[], None] = lambda: None  # tells the engine something changed
        # the reader and the writer each get a thread of their own: many cameras must not starve a shared pool
        self.threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"stream-{name or 'source'}")

    def _connection(self, event: str, fields: dict) -> None:
        self.disconnected = event == "source_disconnected"

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
        if not self.drops_allowed:  # files (whatever the policy) and live sources under `block`
            while len(self.waiting) >= self.cfg.runtime.queue_size and not self.stopping:
                self.room.clear()
                await self.room.wait()
        elif len(self.waiting) >= self.cfg.runtime.queue_size:
            self.waiting.popleft()  # latest: superseded by a newer frame; drop_oldest: no room
            self.dropped["waiting_too_long" if self.policy == "latest" else "queue_full"] += 1
            self._mark_behind(time.time())
        if self.stopping:
            self.left += 1
            return
        self.waiting.append(frame)
        self.max_waiting = max(self.max_waiting, len(self.waiting))
        self.wake()

    # ------------------------------------------------------------------------------------------- taking

    def admission(self) -> int:
        """How many more frames the engine may take now. Files are bounded by what is in flight (their
        outputs never drop, so this is their back-pressure); live streams only by what waits."""
        if self.stopping:
            return 0
        if self.drops_allowed:
            return len(self.waiting)
        limit = self.cfg.runtime.queue_size + 2 * self.cfg.runtime.max_frames_per_batch
        return max(0, min(len(self.waiting), limit - self.in_flight))

    def take(self, n: int) -> list[Frame]:
        """Up to n frames for the engine: the newest (latest policy) or the oldest (otherwise); live frames older
        than max_frame_age_s and those passed over for newer ones are dropped, counted."""
        now = time.time()
        if self.drops_allowed:
            limit = self.cfg.runtime.max_frame_age_s
            old = 0
            while self.waiting and now - self.waiting[0].wall_s > limit:
                self.waiting.popleft()
                old += 1
            if self.policy == "latest":
                while len(self.waiting) > n:
                    self.waiting.popleft()
                    old += 1
            self.dropped["waiting_too_long"] += old
            if old:
                self._mark_behind(now)
        frames = [self.waiting.popleft() for _ in range(min(n, len(self.waiting)))]
        if self.live and self.last_take is not None and self.under_load(now):
            self.behind_s += now - self.last_take
        self.last_take = now
        self.in_flight += len(frames)
        self.room.set()
        return frames

    def _mark_behind(self, now: float) -> None:
        self.behind_until = now + LOAD_HOLD_S

    def under_load(self, now: float | None = None) -> bool:
        """A live source falling behind: frames were dropped for want of time within the last LOAD_HOLD_S."""
        return self.live and (now or time.time()) < self.behind_until

    def detector_every(self) -> int:
        every = self.cfg.detector.every
        if every == "auto":
            return AUTO_EVERY_BEHIND if self.under_load() else 1
        return every

    def needs_detection(self, frame: Frame) -> bool:
        """Whether `frame`, the next one taken, is a detector frame (the tracker carries boxes on the others)."""
        if frame.index in self.replay:
            return False
        due = self.detect_countdown <= 0
        self.detect_countdown = self.detector_every() - 1 if due else self.detect_countdown - 1
        return due

    def track(self, frame: Frame, detections: np.ndarray | None) -> tuple[list[Person], list[int]]:
        """The people of a frame (track ids) and the tracks that ended by then."""
        if frame.index in self.replay:
            return recorded_people(self.replay[frame.index]), []
        if detections is not None:
            self.detected += 1
            tracked = self.tracker.update(detections, frame.pts_s)
        else:
            tracked = self.tracker.carry(frame.pts_s)
        return [Person(tid, box, score) for tid, box, score in tracked], self.tracker.pop_ended()

    # ------------------------------------------------------------------------------------------- writing

    def deliver(self, result: FrameResult) -> None:
        """A computed result, for the writer. A live stream whose output is still busy with a whole batch of
        earlier results drops the oldest of them (output too slow); its ended tracks ride on the next one."""
        if self.cut:  # a second Ctrl-C came while it was computed
            self.release(1)
            return
        result.source = self.name
        if result.frame.index in self.replay:  # drawn again: the recorded people, as they were written
            result.people, result.replayed = recorded_people(self.replay.pop(result.frame.index)), True
        else:
            self.processed += 1
        if self.drops_allowed and len(self.outbox) >= self.cfg.runtime.max_frames_per_batch:
            stale = self.outbox.popleft()
            heir = self.outbox[0] if self.outbox else result
            heir.ended_tracks = [*stale.ended_tracks, *heir.ended_tracks]
            self.dropped["output_too_slow"] += 1
            self.in_flight -= 1
        self.outbox.append(result)
        self.max_outbox = max(self.max_outbox, len(self.outbox))
        self.outbox_ready.set()

    def stop_taking(self) -> None:
        """A stop (Ctrl-C, SIGTERM, the window closed, the source removed): the reader stops, frames only waiting
        are left unprocessed, counted; frames the engine already took are still written."""
        self.halt.set()
        self.stopping = True
        self.left += len(self.waiting)
        self.waiting.clear()
        self.room.set()
        self._maybe_end()

    def release(self, n: int) -> None:
        """Frames taken that will not be written after all (a stop came before they reached the models, or a
        second Ctrl-C before they were written)."""
        self.in_flight -= n
        self.left += n
        self._maybe_end()

    def write(self, result: FrameResult, on_result: Callable | None) -> None:
        if self.fenced:
            return
        try:
            self._write(result, on_result)
        except Fenced as e:  # the source moved to another worker while this one was cut off: stop writing it
            self.fenced = True
            self.halt.set()
            self.source.stats.events.append(str(e))

    def _write(self, result: FrameResult, on_result: Callable | None) -> None:
        if self.steady is not None:
            start = time.perf_counter()
            self.steady.apply(result)
            self.metrics.stage("temporal", (time.perf_counter() - start) * 1e3)
        if result.replayed:
            for sink in self.sinks:
                if sink.redraw:
                    sink.write(result)
            self.redrawn += 1
            return
        start = time.perf_counter()
        for track_id in result.ended_tracks:
            self.smoother.drop(track_id)
        for p in result.people:
            if p.keypoints is not None:
                p.smoothed = self.smoother(p.track_id, *as_recorded(result.frame.pts_s, p.keypoints, p.keypoint_scores))
        for sink in self.sinks:
            sink.write(result)
        self.last_people = len(result.people)
        self.last_frame, self.last_written = result.frame.index, time.time()
        self.metrics.frames_out += 1
        self.metrics.frame_age_ms.append((time.time() - result.frame.wall_s) * 1e3)
        self.metrics.stage("write", (time.perf_counter() - start) * 1e3)
        if on_result is not None:
            on_result(result)

    async def write_all(self, on_result: Callable | None) -> None:
        """The writer: results in frame order, on this stream's own thread, until the stream has ended."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self.outbox:
                    self.outbox_ready.clear()
                    await self.outbox_ready.wait()
                result = self.outbox.popleft()
                if result is END:
                    return
                await loop.run_in_executor(self.threads, self.write, result, on_result)
                self.in_flight -= 1
                self._maybe_end()
                self.wake()
        finally:
            await loop.run_in_executor(self.threads, self.close)

    def _maybe_end(self) -> None:
        """Once the reader is done and every frame taken is written, the writer finishes the outputs."""
        if not self.ending_sent and not self.reading and self.in_flight == 0 and not self.waiting:
            self.ending_sent = True
            self.outbox.append(END)
            self.outbox_ready.set()

    def discard(self) -> None:
        """A second Ctrl-C: nothing computed is written any more (the outputs still close)."""
        self.stop_taking()
        self.cut = True
        dropped = [r for r in self.outbox if r is not END]
        self.outbox = deque(r for r in self.outbox if r is END)
        self.release(len(dropped))

    def close(self) -> None:
        """Finish every output (once); also after an error or an interruption."""
        if self.closed:
            return
        self.closed = True
        self.ended = time.time()
        for sink in self.sinks:
            sink.close()
        if self.view is not None:
            self.view.close()

    # ------------------------------------------------------------------------------------------- numbers

    def output_stats(self) -> dict[str, dict]:
        """What the outputs that can refuse work (re-stream, MQTT) sent and dropped."""
        return {sink.kind: stats for sink in self.sinks if (stats := sink.stats()) is not None}

    def seconds(self) -> float:
        """How long the stream has run (up to its end)."""
        return max((self.ended or time.time()) - self.started, 1e-9)

    def summary(self, engine_metrics: Metrics, extra: dict) -> dict:
        elapsed = self.seconds()
        s = self.source.stats
        summary = {
            "source": self.cfg.source.uri,
            **({"name": self.name} if self.name else {}),
            "frames_in": s.frames,
            "frames_out": self.metrics.frames_out,
            "dropped": {reason: self.dropped[reason] for reason in DROP_REASONS if self.dropped[reason]},
            "reconnects": s.reconnects,
            "gap_s": round(s.gaps_s, 2),
            "corrupt_skipped": s.corrupt,
            **({"conversions": s.conversions} if s.conversions else {}),
            "resumed_from_frame": self.resumed.next_frame if self.resumed else None,
            **({"left_unprocessed": self.left} if self.left else {}),
            **({"redrawn_frames": self.redrawn} if self.redrawn else {}),
            "seconds": round(elapsed, 2),
            "fps": round(self.metrics.frames_out / elapsed, 2),
            "processed_fps": round(self.processed / elapsed, 2),
            "written_fps": round(self.metrics.frames_out / elapsed, 2),
            "under_load_share": round(self.behind_s / elapsed, 3) if self.live else 0.0,
            "detector": {"every": self.cfg.detector.every, "frames_detected": self.detected},
            **({"outputs": outputs} if (outputs := self.output_stats()) else {}),
            **({"temporal": self.steady.summary()} if self.steady is not None else {}),
            **extra,
            "events": (s.events + extra.get("events", []))[-10:],
        }
        if self.error is not None:
            summary["error"] = str(self.error)
        merged = Metrics(stage_ms={**engine_metrics.stage_ms, **self.metrics.stage_ms},
                         batch_sizes=engine_metrics.batch_sizes, frame_age_ms=self.metrics.frame_age_ms,
                         frames_out=self.metrics.frames_out)  # fmt: skip
        return {**summary, **merged.summary()}


def recorded_people(record: dict) -> list[Person]:
    """The people of a JSONL record, as the run that wrote it had them."""
    people = []
    for p in record["people"]:
        arrays = {k: None if p.get(k) is None else np.array(p[k], np.float64)
                  for k in ("keypoints", "keypoint_scores", "keypoints_smoothed")}  # fmt: skip
        people.append(Person(p["track_id"], np.array(p["box"], np.float32), p["score"], arrays["keypoints"],
                             arrays["keypoint_scores"], arrays["keypoints_smoothed"]))  # fmt: skip
    return people


def source_error(stream: Stream, several: bool) -> Sapiens2StreamError:
    """The stream's failure as the one-line error the command line prints."""
    message = str(stream.error) if isinstance(stream.error, Sapiens2StreamError) else (
        f"{type(stream.error).__name__}: {stream.error}")  # fmt: skip
    return Sapiens2StreamError(f"source {stream.name}: {message}" if several else message)
