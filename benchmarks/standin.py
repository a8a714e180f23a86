"""A device that costs what the model costs, for proving on a CPU host what a GPU carries (issue 72).

On a GPU everything `InferenceEngine.run` does happens on the device and the host waits for its results. The
stand-in takes the place of that call on the engine's device thread: per micro-batch it waits, without holding the
GIL (as waiting on a synchronise does), what the batch would cost the device, and returns the results the real
engine gives, of the same shapes and dtypes (captured from one real run per frame size, then copied).

The cost of a batch, per task it runs: `fixed + per_input x inputs`, each input (a person's crop for pose, the
frame for the whole-frame tasks, seg, matting, normal and pointmap, as the engine sends them) twice where flip TTA
is on for the batch. The defaults are the committed H200 figures (docs/speed.md, 2026-12-04) for a 0.4b pose model
at 1024x768, bf16, compiled: 103.3 crops/s at batch 1 and 116.6 at batch 8 give `per_input` 8.42 ms and `fixed`
1.26 ms. Other sizes cost by their FLOPs per input (`FLOP_PER_INPUT`), other input sizes by their pixels. `scale`
divides the device's speed (every wait times `scale`), so that on a small host some rows are bound by the device.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from dataclasses import dataclass

import cv2
import numpy as np

from sapiens2_stream.runtime.results import FrameResult

H200_FIXED_S, H200_PER_INPUT_S = 0.00126, 0.00842  # a 0.4b model at 1024x768, bf16, compiled, on an H200
FLOP_PER_INPUT = {"0.4b": 3.9, "0.8b": 7.2, "1b": 12.2, "5b": 37.0}  # TFLOP per 1024x768 input (their ratio counts)
REFERENCE_PIXELS = 1024 * 768


@dataclass(frozen=True)
class TaskCost:
    """What one task costs the device: its model's size and input size (height, width)."""

    size: str = "0.4b"
    input_size: tuple[int, int] = (1024, 768)

    def seconds(self, inputs: int, flip: bool) -> float:
        """Device seconds for `inputs` crops or frames of this task in one batch, at the H200's pace."""
        per_input = H200_PER_INPUT_S * FLOP_PER_INPUT[self.size] / FLOP_PER_INPUT["0.4b"]
        per_input *= self.input_size[0] * self.input_size[1] / REFERENCE_PIXELS
        return H200_FIXED_S + per_input * inputs * (2 if flip else 1) if inputs else 0.0

    def per_second(self, flip: bool = False) -> float:
        """Inputs per second at large batches (the fixed cost spread out)."""
        return 1.0 / (self.seconds(1_000, flip) / 1_000)


class DeviceTime:
    """The time a device spent on batches: each batch's seconds (`busy`) and the window from the first batch's
    start to the last one's end."""

    def __init__(self) -> None:
        self.busy: list[float] = []
        self.window: list[float] = []  # perf_counter of the first batch's start and the last one's end

    def spent(self, start: float, end: float) -> None:
        self.busy.append(end - start)
        self.window[:] = [self.window[0] if self.window else start, end]

    def share(self) -> float | None:
        """The busy share while the device had work (from its first batch to its last)."""
        return sum(self.busy) / (self.window[1] - self.window[0]) if self.window else None


class TimedEngine(DeviceTime):
    """The real `InferenceEngine.run`, timed: on a GPU the device thread waits there for the device's results."""

    capture_s = capture_cpu_s = 0.0

    def __init__(self, engine) -> None:
        super().__init__()
        self.real = engine.run

    def __call__(self, frames: list, people: list, under_load: bool = False) -> list:
        start = time.perf_counter()
        try:
            return self.real(frames, people, under_load)
        finally:
            self.spent(start, time.perf_counter())


class StandInDevice(DeviceTime):
    """`InferenceEngine.run` replaced: waits what the batch costs (`TaskCost` per task, times `scale`; GIL
    released) and gives each frame and person what the real engine gave for a frame of that size (captured once
    per size, copied after)."""

    def __init__(self, engine, costs: dict[str, TaskCost], scale: float = 1.0) -> None:
        super().__init__()
        self.engine, self.real, self.costs, self.scale = engine, engine.run, costs, scale
        self.captured: dict[tuple, tuple[dict, dict]] = {}  # frame shape -> (frame outputs, a person's outputs)
        self.capture_s, self.capture_cpu_s = 0.0, 0.0  # the real engine's time on the captures: not the host's

    def cost(self, frames: list, people: list, under_load: bool) -> float:
        crops = sum(len(p) for p in people)
        total = 0.0
        for task in self.engine.models:
            spec = self.engine.specs[task]
            cost = self.costs.get(task, TaskCost())
            total += cost.seconds(crops if spec.per_person else len(frames), self.engine.flip_for(task, under_load))
        return total * self.scale

    def __call__(self, frames: list, people: list, under_load: bool = False) -> list:
        shape = frames[0].rgb.shape
        if shape not in self.captured:  # once per size, the real engine (not counted as device time)
            before = dict(vars(people[0][0])) if people[0] else {}
            wall, cpu = time.perf_counter(), time.thread_time()
            result = self.real(frames[:1], people[:1], under_load)[0]
            self.capture_s += time.perf_counter() - wall
            self.capture_cpu_s += time.thread_time() - cpu
            person = {k: v for k, v in vars(people[0][0]).items() if v is not before.get(k)} if people[0] else {}
            blank = FrameResult(result.frame, [])
            frame = {k: v for k, v in vars(result).items() if k not in ("frame", "people") and v is not None
                     and v is not getattr(blank, k, None) and not isinstance(v, list)}  # fmt: skip
            if person or not any(self.engine.specs[t].per_person for t in self.engine.models):
                self.captured[shape] = plausible(frame, people[0], shape), person
            return [result, *self(frames[1:], people[1:], under_load)] if len(frames) > 1 else [result]
        start = time.perf_counter()
        time.sleep(self.cost(frames, people, under_load))  # releases the GIL, as waiting on the device does
        self.spent(start, time.perf_counter())
        frame_out, person_out = self.captured[shape]
        results = []
        for f, found in zip(frames, people, strict=True):
            result = FrameResult(f, found)
            for k, v in frame_out.items():
                setattr(result, k, copy.copy(v))
            for p in found:
                for k, v in person_out.items():
                    setattr(p, k, v.copy() if isinstance(v, np.ndarray) else copy.copy(v))
            results.append(result)
        return results


def plausible(frame: dict, people: list, shape: tuple) -> dict:
    """A tiny random model's part labels are noise: a boundary at every pixel, which no trained model gives and
    which sends the part labels' steadying down its slowest path. In their place: labels of the same shape and
    dtype with a trained model's layout, background around each person and two parts inside (upper, lower body),
    and class probabilities at the engine's small width that agree."""
    if "seg" not in frame:
        return frame
    labels = np.zeros(shape[:2], np.uint8)
    for p in people:
        x, y, w, h = (int(v) for v in p.box)
        labels[y : y + h // 2, x : x + w], labels[y + h // 2 : y + h, x : x + w] = 22, 13  # torso, legs
    out = {**frame, "seg": labels}
    if frame.get("seg_probabilities") is not None:
        classes, h, w = frame["seg_probabilities"].shape
        small = cv2.resize(labels, (w, h), interpolation=cv2.INTER_NEAREST)
        probabilities = np.full((classes, h, w), 0.1 / (classes - 1), np.float32)
        np.put_along_axis(probabilities, small[None].astype(np.int64), 0.9, axis=0)
        out["seg_probabilities"] = probabilities.astype(frame["seg_probabilities"].dtype)
    return out


class ThreadClock:
    """The CPU time of every thread of this process while a run goes, by what the thread does: sampled from
    /proc/self/task every `every_s` (a pool's threads end with their run) and named by Python's thread names;
    threads Python did not start (x264's, FFmpeg's, torch's) are `native`."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.cpu: dict[int, tuple[str, float]] = {}  # native thread id -> (name, CPU seconds so far)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="thread-clock", daemon=True)

    def __enter__(self) -> ThreadClock:
        self.start = self.read()
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()

    def _watch(self) -> None:
        while not self.stop.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid, seconds in self.read().items():
            name = names.get(tid) or self.cpu.get(tid, ("native", 0.0))[0]
            self.cpu[tid] = (name, seconds)

    @staticmethod
    def read() -> dict[int, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended between the listing and the read
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        return out

    def busiest(self, wall_s: float, ignore: tuple[str, ...]) -> tuple[str, float]:
        """The Python thread that used the most CPU, and its share of `wall_s` (a thread near 1 is a host's
        bottleneck even where the cores have room: a source's writer works its frames in order)."""
        spent = {name: seconds - self.start.get(tid, 0.0) for tid, (name, seconds) in self.cpu.items()
                 if name != "native" and not name.startswith(ignore)}  # fmt: skip
        name = max(spent, key=spent.get, default="none")
        return name, spent.get(name, 0.0) / wall_s

    def by_role(self, roles: dict) -> dict[str, float]:
        """CPU seconds during the run per role: `roles` maps a thread-name prefix to a role, or to a function of
        the name giving it (the first prefix that matches); unmatched Python threads are `other`, threads Python
        did not start `native`."""
        out: dict[str, float] = {}
        for tid, (name, seconds) in self.cpu.items():
            spent = seconds - self.start.get(tid, 0.0)
            role = next((r for prefix, r in roles.items() if name.startswith(prefix)), "other")
            role = "native" if name == "native" else role(name) if callable(role) else role
            out[role] = out.get(role, 0.0) + spent
        return out
