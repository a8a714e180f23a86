"""The Python API: the pipeline inside your own loop, notebook, robot or service.

    import sapiens2_stream as s2

    for result in s2.stream("walk.mp4", tasks=["pose"], size="0.4b"):      # a generator of per-frame results
        print(result.source, result.frame_index, [p.keypoints.shape for p in result.people])

    model = s2.Sapiens2(tasks=["pose", "seg"], size="1b")                 # models loaded once, for many calls
    for result in model.stream(["cam1.mp4", "cam2.mp4"]): ...             # several sources: result.source says which
    results = model.predict(["a.jpg", "b.jpg", frame_array])              # single pictures, batched
    summary = s2.run("walk.mp4", on_result=print, output="out/")          # a callback instead of a loop
    async for result in s2.astream("rtsp://...", buffer="latest"): ...    # under asyncio

A source is a path, URL, `webcam:N`, an image folder or glob, a list of those, or an iterable of numpy pictures
(HxWx3 uint8; `bgr=True` for OpenCV's; items may be `(picture, seconds)`). Options: `pipeline=` a YAML to start
from, then the settings people change most (`tasks`, `size`, `models` {task: hub id, folder or file},
`device`, `detector`, `flip`, `smoothing`, `temporal`, `threed`, `angles`), `set={"dotted.key": value}` for any
other YAML key, `stages=[...]` your own stage objects (`open(source) -> state`, `__call__(state, result)`,
`close(state)`: they run inside the pipeline and their `result.extra` reaches the outputs), `on_moment=` a callback
for each moment of a calibrated camera group (`GroupMoment`: its people in metres with their angles and OpenSim
kinematics where those stages run), `output=` a folder to
also write the usual files (nothing is written by default), and for live sources
`buffer="latest"` (a consumer slower than the pipeline gets the newest results, the others counted as dropped in
`dropped`) or `"all"` (every result; the pipeline waits for the consumer).

The pipeline starts on the first `next()` and runs on a thread and event loop of its own, so it works the same in
a script and inside Jupyter (where a loop already runs). Leaving the loop (`break`, `close()`, the generator
collected, Ctrl-C) stops it as Ctrl-C stops the command line: the outputs complete, no thread left. Errors reach
the caller as `Sapiens2StreamError`, with the one line the command line prints.
"""

from __future__ import annotations

import asyncio
import copy
import queue
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .config import DEFAULT_FPS, Mode, Switch, from_dict, parse_yaml, section, set_value
from .errors import Sapiens2StreamError
from .io.records import jsonl_record
from .io.sink import best_keypoints
from .io.sources import Feed, forget_feed, register_feed
from .models.metadata import pose_metadata
from .models.tasks import hub_id
from .registry import SINKS, STAGES
from .runtime.pipeline import Pipeline, load_models
from .runtime.pipeline_config import config_from
from .runtime.results import FrameResult
from .runtime.task_sections import temporal_outputs


@section
class ApiOptions:
    """The Python API's keyword options (`sapiens2_stream.stream(source, **options)`, `Sapiens2(...)`): the settings
    people change most, each a shortcut to YAML keys."""

    tasks: list[str] | None = None  # the tasks to run (default: the pipeline's models, else pose)
    size: str = "0.4b"  # the released size of their models (hub ids)
    pipeline: str | None = None  # a pipeline YAML to start from
    models: dict[str, str | dict[str, Any]] = field(default_factory=dict)  # task -> hub id, folder or file
    # (models.<task>.source), or the whole models.<task> section (source, runtime, flip, ...)
    device: str | None = None  # runtime.device
    detector: str | dict[str, Any] | None = None  # detector.type, or the whole detector section
    flip: Mode | None = None  # models.<task>.flip for every task
    smoothing: Literal["none", "kalman", "adaptive", "rts", "one_euro"] | None = None  # smoothing.method
    temporal: Switch | dict[str, Any] | None = None  # true: every output of the tasks that run steadied; false: none;
    # or the whole temporal section
    threed: Switch | Literal["auto"] | dict[str, Any] | None = None  # threed.enabled, or the whole threed section
    angles: Switch | dict[str, Any] | None = None  # angles.enabled (people get `angles`), or the whole section
    set: dict[str, Any] = field(default_factory=dict)  # any other YAML key: {"dotted.key": value}


END = object()


def nothing_written() -> dict[str, Any]:
    """output=None: the settings under which no stage and no output writes a file, as each declares them (its
    `files_off`), so a new one that writes files is off here by its own declaration."""
    declared = [*STAGES.loaded().values(), *SINKS.loaded().values()]
    return {f"{d.section}.{key}": value for d in declared for key, value in d.files_off.items()}


@dataclass
class Result:
    """One frame's results. `people[i]`: `track_id`, `box` (COCO xywh px), `score`, `keypoints` [308, 2] px,
    `keypoint_scores` [308], `smoothed` [308, 2], `keypoints_3d` [308, 3] m and its confidence when the 3-D stage
    runs, `angles` ({"2d", "3d", "confidence", "why", "side"}) with `angles=True`. Dense outputs that ran: `seg`
    [H, W] labels, `alpha` [H, W], `normals`, `pointmap` [H, W, 3]."""

    source: str
    frame_index: int
    time_s: float
    people: list
    image: np.ndarray | None = None  # the RGB frame (keep_frames=True)
    seg: np.ndarray | None = None
    alpha: np.ndarray | None = None
    normals: np.ndarray | None = None
    pointmap: np.ndarray | None = None
    raw: FrameResult | None = field(default=None, repr=False)  # the pipeline's own result
    models: dict = field(default_factory=dict, repr=False)
    skipped: int = 0  # buffer="latest": results dropped since the one before this (the consumer was slower)

    keypoint_names = pose_metadata().names
    skeleton = pose_metadata().skeleton

    @property
    def events(self) -> list[dict]:
        """The events this frame made (zones, lines, poses, gait), each as events.jsonl has it."""
        return [] if self.raw is None else list(self.raw.events)

    def to_dict(self) -> dict:
        """Exactly the JSONL record of this frame."""
        return jsonl_record(self.raw, self.source, self.models)

    def plot(self, draw: tuple[str, ...] = ("pose", "boxes", "seg"), threshold: float = 0.3) -> np.ndarray:
        """The annotated picture (RGB), as the video output draws it; needs keep_frames=True."""
        from .io.video_sinks import annotate

        if self.raw is None or self.raw.frame.rgb is None:
            raise Sapiens2StreamError("plot() needs the frame: stream(..., keep_frames=True)")
        return annotate(self.raw, list(draw), threshold)

    def to_supervision(self, threshold: float = 0.3):
        """(supervision.Detections with tracker ids, supervision.KeyPoints) of the people (pip install supervision)."""
        import supervision as sv

        boxes = np.array([p.box for p in self.people], np.float32).reshape(-1, 4)
        xyxy = np.c_[boxes[:, :2], boxes[:, :2] + boxes[:, 2:]]
        detections = sv.Detections(xyxy=xyxy, confidence=np.array([p.score for p in self.people], np.float32),
                                   class_id=np.zeros(len(self.people), int),
                                   tracker_id=np.array([p.track_id for p in self.people], int))  # fmt: skip
        points = [best_keypoints(p) for p in self.people]
        xy = np.array(points, np.float32).reshape(-1, 308, 2)
        scores = np.array([p.keypoint_scores for p in self.people], np.float32).reshape(-1, 308)
        return detections, sv.KeyPoints(xy=xy, class_id=np.zeros(len(self.people), int), keypoint_confidence=scores,
                                        detection_confidence=detections.confidence)  # fmt: skip


@dataclass
class GroupMoment:
    """One moment of a calibrated camera group (`threed.calibration` naming two or more of the sources), given to
    `on_moment` once every group stage has added to it: exactly a line of OUTPUT/3d/keypoints_3d.jsonl. `people[i]`:
    `id`, `keypoints_3d` [308] of [x, y, z] m in the calibration's world (None where not triangulated),
    `confidence` [308], `views`, `error_px`, and what the group stages add: `angles` (`angles:`), `kinematics`
    ({OpenSim coordinate: degrees}, or None with `kinematics_why`; `kinematics:`)."""

    time: float  # seconds: a live camera's wall clock at capture, a file's own timestamps
    views: list[str]
    people: list[dict]

    def to_dict(self) -> dict:
        """Exactly the JSONL record of this moment."""
        return {"time": self.time, "views": self.views, "people": self.people}


class Sapiens2:
    """The models of a configuration, loaded once, serving `stream`, `run` and `predict` calls."""

    def __init__(self, tasks: Iterable[str] | None = None, size: str = "0.4b", pipeline: str | None = None,
                 **options) -> None:  # fmt: skip
        """`tasks` (default: the pipeline's models, else pose) at `size`, or `models={task: source}`; the other
        options as in the module's docstring."""
        self.base = options_to_data(tasks, size, pipeline, options)
        # The models' configuration, checked as far as it goes without the sources (each call's own): a take's
        # Pose2Sim project needs its cameras, which come with `stream([...])`.
        self.cfg = config_from(copy.deepcopy(self.base), ["outputs.pose2sim.enabled=false"], source="placeholder.mp4")
        self.loaded = load_models(self.cfg)

    def close(self) -> None:
        """Free the models' threads (the session is done); they are gone when this returns."""
        self.loaded.close(wait=True)

    def __enter__(self) -> Sapiens2:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stream(self, source, *, output: str | None = None, buffer: str = "all", keep_frames: bool = False,
               bgr: bool = False, fps: float | None = None, set: dict | None = None, stages: list = (),
               on_moment: Callable[[GroupMoment], None] | None = None) -> Iterator[Result]:  # fmt: skip
        """Results frame by frame (see the module). `stages`: your own stage objects (see the module).
        `on_moment`: each moment of a calibrated camera group (`GroupMoment`), on the group stages' thread."""
        run = Run(self, source, output, buffer, keep_frames, bgr, fps, set or {}, stages=stages, on_moment=on_moment)
        try:
            yield from run.results()
        finally:
            run.stop()

    def run(self, source, on_result: Callable[[Result], None], *, output: str | None = None,
            keep_frames: bool = False, bgr: bool = False, fps: float | None = None,
            set: dict | None = None, stages: list = (),
            on_moment: Callable[[GroupMoment], None] | None = None) -> dict:  # fmt: skip
        """Every result to `on_result` (on the pipeline's writer thread), each moment of a calibrated camera group
        to `on_moment` (on the group stages' thread); returns the run's summary."""
        run = Run(self, source, output, "all", keep_frames, bgr, fps, set or {}, callback=on_result, stages=stages,
                  on_moment=on_moment)  # fmt: skip
        try:
            for _ in run.results():
                pass
        finally:
            run.stop()
        return run.summary

    def predict(self, images, *, bgr: bool = False, keep_frames: bool = False) -> list[Result]:
        """Results of single pictures (arrays or paths, one or a list), in order, batched together."""
        from .io.sources import read_image

        items = images if isinstance(images, list | tuple) else [images]
        pictures = []
        for item in items:
            if isinstance(item, str | Path):
                picture = read_image(Path(item))
                if picture is None:
                    raise Sapiens2StreamError(f"{item}: cannot read it as a picture")
                pictures.append(picture)
            else:
                pictures.append(item)
        return list(self.stream(pictures, bgr=bgr and not isinstance(items[0], str | Path), keep_frames=keep_frames,
                                set={"smoothing.method": "none"}))  # fmt: skip  # pictures apart: nothing smoothed


class Run:
    """One pipeline run on its own thread, its results handed over through a queue."""

    def __init__(self, session: Sapiens2, source, output, buffer, keep_frames, bgr, fps, overrides,
                 callback=None, stages: list = (), on_moment=None) -> None:  # fmt: skip
        if buffer not in ("all", "latest"):
            raise Sapiens2StreamError(f"buffer={buffer!r}: choose 'all' or 'latest'")
        self.feeds = []
        uris = [self._uri(s, bgr, fps) for s in (source if isinstance(source, list) and not is_picture_list(source)
                                                   else [source])]  # fmt: skip
        self.temporary = None if output else tempfile.TemporaryDirectory(prefix="sapiens2-api-")
        data = copy.deepcopy(session.base)
        for key, value in {**({} if output else nothing_written()), **overrides}.items():
            set_value(data, key, value)
        cfg = config_from(data, (), uris if len(uris) > 1 else uris[0], output or self.temporary.name)
        self.keep_frames, self.callback, self.latest = keep_frames, callback, buffer == "latest"
        self.queue: queue.Queue = queue.Queue(maxsize=1 if self.latest else 8)
        self.dropped = 0
        self.summary: dict = {}
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.models = {task: m.source for task, m in cfg.enabled_models().items()}
        told = None if on_moment is None else lambda m: on_moment(GroupMoment(**copy.deepcopy(m.record)))
        self.pipeline = Pipeline(cfg, loaded=session.loaded, on_result=self._on_result, stages=list(stages),
                                 on_moment=told)  # fmt: skip
        self.names = {s.label: s.source.source_id for s in self.pipeline.streams}
        self.thread = threading.Thread(target=self._main, name="sapiens2-api", daemon=True)

    def _uri(self, source, bgr: bool, fps: float | None) -> str:
        if isinstance(source, str | Path):
            return str(source)
        feed = Feed(source, bgr, fps or DEFAULT_FPS)
        uri = register_feed(feed)
        self.feeds.append(uri)
        return uri

    def _main(self) -> None:
        try:
            self.summary = self.pipeline.run()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = e
        finally:
            self._put(END, wait=True)

    def _on_result(self, result: FrameResult, pipeline) -> None:
        wrapped = Result(result.source or next(iter(self.names.values())), result.frame.index, result.frame.pts_s,
                         result.people, result.frame.rgb if self.keep_frames else None, result.seg, result.alpha,
                         result.normals, result.pointmap, result, self.models)  # fmt: skip
        if self.callback is not None:
            self.callback(wrapped)
            return
        self._put(wrapped, wait=not self.latest)

    def _put(self, item, wait: bool) -> None:
        while not self.stopping.is_set() or item is END:
            try:
                if wait or item is END:
                    self.queue.put(item, timeout=0.1)
                else:
                    self.queue.put_nowait(item)
                return
            except queue.Full:
                if not wait and item is not END:
                    try:  # the newest wins: the oldest waiting result is dropped and counted
                        self.queue.get_nowait()
                        self.dropped += 1
                    except queue.Empty:
                        pass
                elif item is END and self.stopping.is_set():
                    try:
                        self.queue.get_nowait()
                    except queue.Empty:
                        pass

    def results(self) -> Iterator[Result]:
        self.thread.start()
        counted = 0
        while True:
            item = self.queue.get()
            if item is END:
                break
            item.skipped, counted = self.dropped - counted, self.dropped
            yield item
        self.thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Stop the run (Ctrl-C semantics) and wait for its thread: the outputs complete."""
        self.stopping.set()
        if self.thread.is_alive():
            self.pipeline.request_stop()
            self.thread.join()
        for stream in self.pipeline.streams:  # the run let its readers' threads end on their own: wait for them
            stream.threads.shutdown(wait=True)
        for uri in self.feeds:
            forget_feed(uri)
        if self.temporary is not None:
            self.temporary.cleanup()


def stream(source, *, tasks=None, size: str = "0.4b", pipeline: str | None = None, **options) -> Iterator[Result]:
    """Results frame by frame from a new session (models loaded for this call; keep a `Sapiens2` for many)."""
    run_options = {k: options.pop(k) for k in ("output", "buffer", "keep_frames", "bgr", "fps", "stages",
                                               "on_moment") if k in options}  # fmt: skip
    session = Sapiens2(tasks, size, pipeline, **options)  # `set` too: model settings must reach the loaded models
    try:
        yield from session.stream(source, **run_options)
    finally:
        session.close()


async def astream(source, **options) -> AsyncIterator[Result]:
    """`stream` for `async for`: the results come through the running loop without blocking it."""
    loop = asyncio.get_running_loop()
    results = stream(source, **options)
    try:
        while True:
            item = await loop.run_in_executor(None, next, results, END)
            if item is END:
                return
            yield item
    finally:
        await loop.run_in_executor(None, results.close)


def run(source, on_result: Callable[[Result], None], *, tasks=None, size: str = "0.4b",
        pipeline: str | None = None, **options) -> dict:  # fmt: skip
    """Every result to `on_result`; returns the run's summary."""
    run_options = {k: options.pop(k) for k in ("output", "keep_frames", "bgr", "fps", "stages", "on_moment")
                   if k in options}  # fmt: skip
    with Sapiens2(tasks, size, pipeline, **options) as session:
        return session.run(source, on_result, **run_options)


def predict(images, *, tasks=None, size: str = "0.4b", pipeline: str | None = None, **options) -> list[Result]:
    """Results of single pictures from a new session."""
    run_options = {k: options.pop(k) for k in ("bgr", "keep_frames") if k in options}
    with Sapiens2(tasks, size, pipeline, **options) as session:
        return session.predict(images, **run_options)


# ----------------------------------------------------------------------------------------------- configuration


def options_to_data(tasks, size: str, pipeline: str | None, options: dict) -> dict:
    """YAML-shaped data from a pipeline file and the keyword options (checked against `ApiOptions`)."""
    try:
        named = {"tasks": None if tasks is None else list(tasks), "size": size, "pipeline": pipeline}
        given = from_dict(ApiOptions, {**options, **named})
    except Sapiens2StreamError as e:
        raise Sapiens2StreamError(str(e).replace("unknown key", "unknown option", 1)) from None
    if pipeline and not Path(pipeline).is_file():
        raise Sapiens2StreamError(f"{pipeline}: no such pipeline file (see the ready ones in pipelines/)")
    data = parse_yaml(Path(pipeline).read_text(), pipeline) if pipeline else {}
    tasks = given.tasks
    if tasks is None and not pipeline and not given.models:
        tasks = ["pose"]
    if tasks is not None:  # these tasks, keeping what the pipeline says of each
        data["models"] = {task: {**(data.get("models") or {}).get(task, {}), "source": hub_id(task, size)}
                          for task in tasks}  # fmt: skip
    models = data.setdefault("models", {})
    for task, model in given.models.items():
        models.setdefault(task, {}).update(model if isinstance(model, dict) else {"source": model})
    if given.flip is not None:
        for model in models.values():
            model["flip"] = given.flip
    if given.device is not None:
        set_value(data, "runtime.device", given.device)
    if given.smoothing is not None:
        set_value(data, "smoothing.method", given.smoothing)
    if given.detector is not None:
        data["detector"] = given.detector if isinstance(given.detector, dict) else {"type": given.detector}
    if isinstance(given.temporal, dict):
        data["temporal"] = given.temporal
    elif given.temporal is not None:  # every output of the tasks that run steadied, or none
        outputs = temporal_outputs()
        data["temporal"] = {key: "on" if given.temporal and task in models else "off" for key, task in outputs.items()}
    if isinstance(given.threed, dict):
        data["threed"] = given.threed
    elif given.threed is not None:
        set_value(data, "threed.enabled", given.threed)
    if isinstance(given.angles, dict):
        data["angles"] = given.angles
    elif given.angles is not None:
        set_value(data, "angles.enabled", given.angles)
    for key, value in given.set.items():
        set_value(data, key, value)
    return data


def is_picture_list(source) -> bool:
    """A list of pictures (one source of frames), not a list of sources."""
    return bool(source) and isinstance(source[0], np.ndarray | tuple)
