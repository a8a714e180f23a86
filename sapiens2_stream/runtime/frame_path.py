"""A frame's whole path, told top to bottom in this one file.

    read      its source's reader, on the stream's own thread                         read()
    wait      in its source's queue, by the source's drop policy                      flow.Waiting
    take      the next micro-batch, fairly across sources, timed for live ones        stages/take.py
    detect    people boxes on the detector's thread, for the frames due a detection   stages/detect.py
    track     each source's tracker: ids, boxes carried between detections            stages/track.py
    infer     every task's batched forward on the device thread, flip TTA, decoding   stages/infer.py
    deliver   each result to its source's writer, in frame order                      deliver()
    source's  temporal, smooth, 3-D, angles, kinematics, events, users' stages, then  write_all() ->
    stages    write: the sinks, and the observers told of each result written          stages.SourceStages
    (group)   across sources, once per moment: triangulate ... write_3d, pose2sim     stages.group.GroupStages

`begin` starts a source's reader and writer; `run_batches` runs the batch stages in two lanes: the first (take,
detect, track) prepares the next batch while the second (infer) runs this one, and takes the next frames only once
the second has taken its batch, so live frames are taken just before the models free up rather than ageing behind
them. The lanes time the stages (`StageTimes`) and keep the models' clock (`flow.ModelClock`), which the planner
reads to size and time live batches.

What is passed along is `runtime.flow`'s (the queues and the planner, the `Item`, the hand-offs, the clock, the run's
`BatchRun`); a source's own state and numbers are its `stream.Stream`'s; the pipeline opens, runs and stops all of
it and tells none of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import Sapiens2StreamError
from .flow import BatchRun, Handoff
from .results import FrameResult

if TYPE_CHECKING:
    from .observer import Observer
    from .stream import Stream

BATCH_STAGES = ("take", "detect", "track", "infer")  # the path above, in `stages.base.ORDER`'s order


def begin(stream: Stream, group: asyncio.TaskGroup, observers: list[Observer], wake: Callable[[], None]) -> None:
    """A source joins the run (on the run's loop): the observers are told, its reader and its writer start in the
    run's task group. `wake`: tells the planner something changed (a frame arrived, one was written, the end)."""
    for observer in observers:
        observer.source_added(stream)
    group.create_task(read(stream, wake))
    group.create_task(write_all(stream, observers, wake))


async def read(stream: Stream, wake: Callable[[], None]) -> None:
    """Read the source on the stream's own thread into its queue until it ends or is halted. A broken source ends
    its own stream; the others go on."""
    loop = asyncio.get_running_loop()

    async def arrive(frame) -> None:
        if await stream.waiting.arrive(frame):
            wake()

    def produce() -> None:
        for frame in stream.source.frames(stream.halt):
            asyncio.run_coroutine_threadsafe(arrive(frame), loop).result()

    try:
        await loop.run_in_executor(stream.threads, produce)
    except Exception as e:
        stream.error = e
    finally:
        stream.reading = False
        stream.maybe_end()
        wake()


async def run_batches(stages: Sequence, states: dict, batch: BatchRun, observers: list[Observer],
                      to_writer: Callable[[Stream, FrameResult], None] | None = None) -> None:  # fmt: skip
    """Batch after batch until every source has ended (or a stop). `stages`: the batch stages, in `BATCH_STAGES`'
    order; `states`: what each opened (by name; the take stage's: the micro-batches); `batch`: the run's (its
    times and clock are kept here); the observers are told `ending` once the last batch is delivered;
    `to_writer`: where a result goes (`deliver`)."""
    if tuple(s.name for s in stages) != BATCH_STAGES:
        raise Sapiens2StreamError(f"the batch stages are {', '.join(BATCH_STAGES)}, in that order; a new one "
                                  "needs its place in runtime.frame_path")  # fmt: skip
    _, detect, track, infer = stages
    prepared, clock, to_writer = Handoff(), batch.clock, to_writer or deliver

    async def timed(stage, items: list) -> tuple[list, float]:
        """The stage's work on `items`, and its seconds (its time per frame goes to the run's stage times)."""
        start = time.perf_counter()
        done = await stage(states[stage.name], items)
        seconds = time.perf_counter() - start
        batch.times.stage(stage.name, seconds * 1e3 / len(items), len(items))
        return done, seconds

    async def prepare() -> None:
        """Lane one: take, detect, track; the next batch is taken once the models took the last one."""
        async for taken in states["take"]:  # the take stage's micro-batches (`flow.Planner.batches`)
            items, seconds = await timed(detect, taken)
            clock.detected(seconds)
            items, _ = await timed(track, items)
            await prepared.hand_over(items)
        prepared.end()

    async def compute() -> None:
        """Lane two: the models, then each result to its source's writer."""
        async for items in prepared:
            results = []
            with clock.computing(len(items), any(i.behind for i in items)) as took:
                results, seconds = await timed(infer, items)
                took.seconds = seconds if results else None
            for item, result in results:
                to_writer(item.stream, result)
        for observer in observers:
            observer.ending()

    try:
        async with asyncio.TaskGroup() as lanes:  # a lane that fails stops the other
            lanes.create_task(prepare())
            lanes.create_task(compute())
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None


def deliver(stream: Stream, result: FrameResult) -> None:
    """A computed result, for its source's writer. A frame a resumed run draws again gets the people recorded for
    it. A live stream whose output is still busy with a whole batch of earlier results drops the oldest of them
    (output too slow; the age limit applies to frames waiting for work, never to work done, but a writer that
    cannot keep up must not queue without end); its ended tracks ride on the next one."""
    if stream.cut:  # a second Ctrl-C came while it was computed
        stream.release(1)
        return
    result.source = stream.name
    if result.frame.index in stream.tracking.replay:  # drawn again: the recorded people, as they were written
        result.people, result.replayed = stream.tracking.replayed_people(result.frame.index), True
    else:
        stream.numbers.processed += 1
    most = stream.runtime.max_frames_per_batch if stream.waiting.drops_allowed else None
    if dropped := stream.outbox.put(result, most):
        stale, heir = dropped
        heir.ended_tracks = [*stale.ended_tracks, *heir.ended_tracks]
        stream.numbers.dropped["output_too_slow"] += 1
        stream.waiting.finished(1)


async def write_all(stream: Stream, observers: list[Observer], wake: Callable[[], None]) -> None:
    """The source's writer: each result through the source's stages in frame order (`Stream.write`, on the
    stream's own thread), until the stream has ended; then its outputs close and the observers are told."""
    loop = asyncio.get_running_loop()
    try:
        try:
            async for result in stream.outbox:
                await loop.run_in_executor(stream.threads, stream.write, result)
                stream.written()
                wake()
        finally:
            await loop.run_in_executor(stream.threads, stream.close)
    finally:
        for observer in observers:
            observer.source_closed(stream)
