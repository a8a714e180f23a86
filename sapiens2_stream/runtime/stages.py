"""The pipeline's stages, in the order a frame meets them. `STAGES` is the one list; a new stage goes into it.

    take -> detect -> track -> infer || temporal -> smooth -> threed -> events -> write

Batch stages work on micro-batches of frames from every source (`Item`s); the pipeline runs them in lanes, each
an asyncio task, a new lane starting at each stage marked `apart` (infer: detecting the next batch overlaps
inference of this one). Result stages work on one source's results in frame order, on that source's writer
thread. Between lanes, and between the models and each source's writer, the one hand-off is a `Handoff`: items
in order, then `END`.

A stage is an object with a short `name`; a batch stage is awaited with the batch (the first, `take`, with
nothing, and gives None at the end of input), a result stage is called with the source's stream and the result.
Each stage's time per frame goes to the run's numbers under its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..events import EventRules
from ..events.rules import FEET, ids
from ..io.sink import as_recorded
from ..io.sources import Frame
from .results import FrameResult, Person

END = object()  # the end of input, on every hand-off
FEET_IDS = np.array(ids(*FEET))


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


# ----------------------------------------------------------------------------------------------- batch stages


class Take:
    """The frames of the next micro-batch, fairly across sources (the planner), or None once every source has
    ended. Live frames are taken just before the models free up, so they do not age while the previous batch
    runs; under `block` nothing is dropped, so frames age anyway."""

    name, apart, per_source = "take", False, False

    def __init__(self, run) -> None:
        self.run, self.planner = run, run.planner

    async def __call__(self, _=None) -> list[Item] | None:
        run, planner, rt = self.run, self.planner, self.run.cfg.runtime
        while True:
            planner.work.clear()
            if planner.ready():
                break
            if all(not s.reading and not s.waiting for s in run.streams) and (run.stop.is_set() or not run.serve):
                return None
            await planner.work.wait()
        want = planner.size()
        deadline = time.monotonic() + rt.max_wait_ms / 1000
        while sum(s.admission() for s in planner.ready()) < want and any(s.reading for s in run.streams):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            planner.work.clear()
            try:
                await asyncio.wait_for(planner.work.wait(), remaining)
            except TimeoutError:
                break
        if any(s.drops_allowed for s in run.streams):
            delay = planner.busy_until - time.monotonic() - (planner.detect_s or 0.0)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(planner.models_free.wait(), delay)
        return [Item(stream, frame) for stream, frame in planner.take()]


class Detect:
    """People boxes of the detector frames, on the detector's own thread (one detector shared by every source)."""

    name, apart, per_source = "detect", False, False

    def __init__(self, run) -> None:
        self.run = run

    async def __call__(self, items: list[Item]) -> list[Item]:
        start = time.perf_counter()
        for item in items:
            item.detect = item.stream.tracking.needs_detection(item.frame)
        frames = [i.frame.rgb for i in items if i.detect]
        if frames:
            run = self.run
            found = await asyncio.get_running_loop().run_in_executor(run.loaded.detect_thread, run.detector.detect,
                                                                     frames)  # fmt: skip
            for item, boxes in zip((i for i in items if i.detect), found, strict=True):
                item.detections = boxes
        self.run.planner.observe_detection(time.perf_counter() - start)
        return items


class Track:
    """Each source's tracker: track ids for the people of each frame, and the tracks that ended."""

    name, apart, per_source = "track", False, False

    def __init__(self, run) -> None:
        self.run = run

    async def __call__(self, items: list[Item]) -> list[Item]:
        for item in items:
            item.people, item.ended = item.stream.tracking.track(item.frame, item.detections if item.detect else None)
        return items


class Infer:
    """Every task of the table on the batch, on the one device thread; each result goes to its source's writer.
    A stop that came before the frames reached the models releases them; a second Ctrl-C abandons the batch on
    the models (the device thread finishes it unheard)."""

    name, apart, per_source = "infer", True, False

    def __init__(self, run) -> None:
        self.run, self.planner = run, run.planner

    async def __call__(self, items: list[Item]) -> list[Item]:
        run, planner = self.run, self.planner
        if run.stop.is_set():
            return release(items)
        load = any(item.stream.under_load() for item in items)
        n = len(items)
        planner.busy_until = time.monotonic() + (planner.cost_per_frame or 0.0) * n
        planner.models_free.clear()
        start = time.perf_counter()
        engine = run.engine
        running = asyncio.get_running_loop().run_in_executor(
            engine.executor, engine.run, [i.frame for i in items], [i.people for i in items], load
        )
        abandoned = asyncio.ensure_future(run.abandon.wait())
        try:
            await asyncio.wait([running, abandoned], return_when=asyncio.FIRST_COMPLETED)
        finally:
            abandoned.cancel()
            planner.models_free.set()
        if not running.done():
            return release(items)
        planner.observe(time.perf_counter() - start, n)
        people = sum(len(i.people) for i in items)
        if people:
            run.times.batch_sizes["people"].append(people)
        for item, result in zip(items, running.result(), strict=True):
            result.ended_tracks = item.ended
            item.stream.deliver(result)
        return items


def release(items: list[Item]) -> list[Item]:
    """Frames taken that will not reach the models after all."""
    for item in items:
        item.stream.release(1)
    return []


# ----------------------------------------------------------------------------------------------- result stages


class Temporal:
    """The source's temporal filter: steady matte, part labels, normals and depth (the `temporal:` section)."""

    name, apart, per_source = "temporal", False, True

    def __init__(self, run) -> None:
        pass

    def __call__(self, stream, result: FrameResult) -> None:
        if stream.temporal is not None:
            stream.temporal.apply(result)


class Smooth:
    """The source's keypoint smoother, per track (an ended track's filter is dropped)."""

    name, apart, per_source = "smooth", False, True

    def __init__(self, run) -> None:
        pass

    def __call__(self, stream, result: FrameResult) -> None:
        if result.replayed:  # redrawn from its record: the smoothed keypoints are the recorded ones
            return
        for track_id in result.ended_tracks:
            stream.smoother.drop(track_id)
        for p in result.people:
            if p.keypoints is not None:
                p.smoothed = stream.smoother(p.track_id, *as_recorded(result.frame.pts_s, p.keypoints,
                                                                      p.keypoint_scores))  # fmt: skip


class ThreeD:
    """People in metres: the source's lifter on pose and pointmap (the `threed:` section), between the smoother
    (it lifts the smoothed keypoints) and the sinks (they write `keypoints_3d`)."""

    name, apart, per_source = "threed", False, True

    def __init__(self, run) -> None:
        pass

    def __call__(self, stream, result: FrameResult) -> None:
        if stream.threed is not None and not result.replayed:
            stream.threed(result)


class Events:
    """The source's event rules (the `events:` section): zones, lines and poses on the smoothed keypoints; what they
    find goes with the result to the sinks (events.jsonl, MQTT)."""

    name, apart, per_source = "events", False, True

    def __init__(self, run) -> None:
        pass

    def __call__(self, stream, result: FrameResult) -> None:
        if not stream.cfg.events or result.replayed:
            return
        if stream.events is None:
            h, w = result.frame.rgb.shape[:2]
            stream.events = EventRules(stream.cfg.events, (w, h), stream.cfg.tracker.max_lost_s)
        world = result.world_from_camera if stream.events.on_floor else None  # feet found only for floor zones
        people = [(p.track_id, p.smoothed if p.smoothed is not None else p.keypoints, p.keypoint_scores,
                   np.r_[p.box[:2], p.box[:2] + p.box[2:]], feet_on_floor(p, world))
                  for p in result.people if p.keypoints is not None]  # fmt: skip
        result.events = [{**e, "source": stream.label, "frame": result.frame.index}
                         for e in stream.events.update(result.frame.pts_s, people)]  # fmt: skip
        result.event_rules = stream.events


def feet_on_floor(person: Person, world: np.ndarray | None) -> np.ndarray | None:
    """Where a person stands on the floor (world X, Y in metres): the mid-point of their confident feet keypoints in
    3-D, in the 3-D stage's world frame; None without them."""
    if world is None or person.keypoints_3d is None:
        return None
    feet = FEET_IDS
    sure = feet[(person.keypoints_3d_confidence[feet] > 0.5) & np.isfinite(person.keypoints_3d[feet]).all(1)]
    if not len(sure):
        return None
    point = world[:3, :3] @ person.keypoints_3d[sure].mean(0) + world[:3, 3]
    return point[:2]


class Write:
    """The source's sinks (files, window, re-stream, MQTT, ...), then whoever observes the run. A result redrawn
    by --resume goes only to the sinks that draw (its records were written by the interrupted run)."""

    name, apart, per_source = "write", False, True

    def __init__(self, run) -> None:
        self.run = run

    def __call__(self, stream, result: FrameResult) -> None:
        numbers = stream.numbers
        if result.replayed:
            for sink in stream.sinks:
                if sink.redraw:
                    sink.write(result)
            numbers.redrawn += 1
            return
        for sink in stream.sinks:
            sink.write(result)
        numbers.wrote(result.frame.index, len(result.people), result.frame.wall_s)
        for observer in self.run.observers:
            observer.result(result, stream)


STAGES = (Take, Detect, Track, Infer, Temporal, Smooth, ThreeD, Events, Write)
