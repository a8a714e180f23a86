"""The batch's path (`runtime.frame_path.run_batches`) with stand-in stages: results delivered in frame order, the
next batch detected while the models run this one but taken only once they took it, the models' clock kept from
what the stages took, and nothing measured from a batch the models never finished."""

import asyncio
import time

import pytest

from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.runtime.flow import BatchRun, Item, ModelClock
from sapiens2_stream.runtime.frame_path import run_batches as path_of_batches
from sapiens2_stream.runtime.numbers import StageTimes
from sapiens2_stream.runtime.observer import Observer


class Log:
    def __init__(self):
        self.events = []

    def __call__(self, *event):
        self.events.append((time.monotonic(), *event))

    def at(self, *event) -> float:
        return next(t for t, *e in self.events if tuple(e) == event)


class StandIn:
    """A batch stage that logs when it starts and ends each batch and takes `seconds`."""

    def __init__(self, name, log, seconds=0.0, work=None):
        self.name, self.log, self.seconds, self.work = name, log, seconds, work

    async def __call__(self, state, items):
        number = items[0].frame // 2
        self.log(self.name, "start", number)
        await asyncio.sleep(self.seconds)
        self.log(self.name, "end", number)
        return self.work(items) if self.work else items


class Take:
    """Three batches of two frames each, then the end (its opened state: the batches, as the take stage's)."""

    name = "take"

    def __init__(self, log, stream):
        self.log, self.stream = log, stream

    async def batches(self):
        for number in range(3):
            self.log("take", number)
            yield [Item(self.stream, 2 * number + i) for i in range(2)]


class Stream:
    def __init__(self, log):
        self.log, self.delivered = log, []


def deliver(stream, result):
    stream.delivered.append(result)
    stream.log("deliver", result)


def run_batches(stages, states, batch, observers):
    """The path, the take stage's batches opened, each result delivered to its stand-in stream."""
    if isinstance(stages[0], Take):
        states = {**states, "take": stages[0].batches()}
    return path_of_batches(stages, states, batch, observers, deliver)


class Ending(Observer):
    def __init__(self, log):
        self.log = log

    def ending(self):
        self.log("ending")


def batch_run() -> BatchRun:
    return BatchRun([], None, ModelClock(), None, None, None, False, StageTimes())


def path(log, stream, infer_work):
    """The four stages; the models take 0.2 s a batch of two."""
    return [Take(log, stream), StandIn("detect", log, 0.01), StandIn("track", log),
            StandIn("infer", log, 0.2, infer_work)]  # fmt: skip


def results_of(items):
    return [(item, f"result {item.frame}") for item in items]


def test_the_path_delivers_in_order_and_overlaps_detection_with_the_models():
    log, batch = Log(), batch_run()
    stream = Stream(log)
    stages = path(log, stream, results_of)
    asyncio.run(run_batches(stages, dict.fromkeys(["take", "detect", "track", "infer"]), batch, [Ending(log)]))
    assert stream.delivered == [f"result {i}" for i in range(6)]
    # the next batch is detected while the models run this one ...
    assert log.at("detect", "start", 1) < log.at("infer", "end", 0)
    # ... but taken only once the models took the one before (live frames do not age behind a busy device)
    assert log.at("take", 2) >= log.at("infer", "start", 1)
    assert log.events[-1][1] == "ending" and log.at("ending") > log.at("deliver", "result 5")
    assert set(batch.times.snapshot()["stage_ms_per_frame"]) == {"detect", "track", "infer"}
    # the models' clock: what a frame costs (half of a 0.2 s batch of two), what a detection costs, free again
    assert 0.1 <= batch.clock.cost_per_frame < 0.2 and 0.01 <= batch.clock.detect_s < 0.2
    assert batch.clock.models_free.is_set()


def test_a_batch_the_models_never_finished_measures_nothing():
    log, batch = Log(), batch_run()
    stream = Stream(log)
    asyncio.run(run_batches(path(log, stream, lambda items: []), dict.fromkeys(["take", "detect", "track", "infer"]),
                            batch, []))  # fmt: skip
    assert stream.delivered == [] and batch.clock.cost_per_frame is None and batch.clock.models_free.is_set()


def test_the_models_clock_says_when_they_are_free():
    clock = ModelClock()
    with clock.computing(4) as took:
        took.seconds = 0.2
    with clock.computing(3) as took:
        assert not clock.models_free.is_set() and clock.busy_until - time.monotonic() == pytest.approx(0.15, abs=0.02)
        took.seconds = 0.4
    smoothed = 0.3 * 0.4 / 3 + 0.7 * 0.05  # 0.3: the newest measurement's weight
    assert clock.models_free.is_set() and clock.cost_per_frame == pytest.approx(smoothed)
    with pytest.raises(RuntimeError), clock.computing(2):  # abandoned: free again, nothing measured
        raise RuntimeError("the batch was abandoned")
    assert clock.models_free.is_set() and clock.cost_per_frame == pytest.approx(smoothed)


def test_the_batch_stages_are_the_path_s_four_in_order():
    log = Log()
    stages = path(log, Stream(log), results_of)
    with pytest.raises(Sapiens2StreamError, match="take, detect, track, infer, in that order"):
        asyncio.run(run_batches([stages[0], stages[2], stages[1], stages[3]], {}, batch_run(), []))


def test_a_stage_that_fails_ends_the_path_with_its_error():
    """The models' lane waits for a batch that never comes: the failure of the first lane must end it too."""
    log = Log()

    def broken(items):
        raise RuntimeError("the tracker broke")

    stages = path(log, Stream(log), results_of)
    stages[2] = StandIn("track", log, work=broken)
    with pytest.raises(RuntimeError, match="the tracker broke"):
        asyncio.run(asyncio.wait_for(run_batches(stages, dict.fromkeys(["take", "detect", "track", "infer"]),
                                                 batch_run(), []), 5))  # fmt: skip


NARRATING = ("runtime/frame_path.py", "runtime/stream.py", "runtime/pipeline.py", "runtime/stages/take.py",
             "runtime/stages/track.py")  # fmt: skip  # the files that told a frame's path before it was told in one


def test_a_frame_s_walk_is_told_by_one_narrator():
    """`benchmarks.walk` on one frame of a real pipeline: the runtime's narrating files are called back into at most
    3 times (8 at f5fd237, when the stream, the batch path, the take and the track stages each told part of it), in
    at most 38 files and 37 calls back in all; a file that starts narrating again shows here."""
    from benchmarks.walk import walk

    measured = walk()
    narrating = {f: n for f, n in measured["returns_by_file"].items() if f in NARRATING}
    assert sum(narrating.values()) <= 3, narrating
    assert measured["files_entered"] <= 38 and measured["returns_to_a_file_left"] <= 37, measured
    assert {"runtime/frame_path.py", "runtime/flow.py", "runtime/stages/infer.py"} <= set(measured["files"])
