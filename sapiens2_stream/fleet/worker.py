"""One fleet worker: a Ray actor per GPU (or per few CPUs) that loads the models once and runs the multi-source
pipeline of `run` for the cameras fleet.json gives it.

`sync()` is the only way cameras come and go: it compares what runs here with what fleet.json says and starts or
stops cameras to match. The driver calls it after every change; the constructor calls it too, so a worker that
Ray restarts (its process killed, OOM) takes its cameras back by itself, each continuing in its own folder with a
new segment, the next frame index and a new range of track ids. Calls come on several threads (a threaded actor),
so `stats()` answers while the pipeline runs.

Workers are detached actors: Ray would otherwise kill them without warning the moment their driver dies, leaving
every camera's last segment unfinished. Instead each worker watches its driver's job in Ray's job table (Ray marks
it dead as soon as the driver's connection drops) and, when it is gone, stops its cameras like a Ctrl-C (outputs
complete and playable) and ends itself, so nothing runs on unwatched.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..config import from_dict
from ..console.events import EventCollector
from ..console.live import LiveViews
from ..console.status import counters, state
from ..errors import Sapiens2StreamError
from ..io.options import SourceConfig
from ..runtime.live_mocap import triangulation_group
from ..runtime.pipeline_config import PipelineConfig
from .mocap import MocapFeed
from .record import added_sources, assigned_to, continuation, fence_for

MEASURE_ROUNDS = 3  # batches timed per size in the capacity measurement


DRIVER_CHECK_S = 0.5  # how often a worker looks at its driver's job


def driver_alive(job_id: str) -> bool:
    """Whether the driver's Ray job still runs, by Ray's job table. Where the head cannot be asked, the driver
    counts as alive: the cluster is then down and Ray ends its processes itself."""
    try:
        from ray._private import state  # the job table has no public accessor without the dashboard

        jobs = state.jobs()
    except Exception:
        return True
    return not any(job["JobID"] == job_id and job["IsDead"] for job in jobs)


def node_id() -> str:
    """The Ray node this worker runs on; "local" outside Ray (the class used by itself: tests, benchmarks).
    Asked only when Ray is up: `get_runtime_context()` would otherwise start Ray, or join whatever cluster this
    machine runs, and die with it."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


class FleetWorker:
    def __init__(self, cfg: PipelineConfig, name: str, driver_job: str | None = None, views: bool = False,
                 hub=None) -> None:  # fmt: skip
        """`driver_job`: the Ray job id of the driver; without it (tests of the class itself) nothing is watched.
        `views`: keep each camera's live view for the driver's console. `hub`: the fleet's MocapHub, which this
        worker's cameras of the calibrated group send their results to."""
        from ..runtime.pipeline import Pipeline, load_models

        self.cfg, self.name = cfg, name
        # restarted by Ray after the driver died (a detached actor outlives it): start nothing, end
        self.leaving = driver_job is not None and not driver_alive(driver_job)
        self.out = Path(cfg.outputs.dir)
        self.node = node_id()
        self.lock = threading.Lock()
        self.loaded = load_models(cfg)
        self.epochs: dict[str, int] = {}
        # cameras come by sync
        self.pipeline = Pipeline(replace(cfg, sources=[]), loaded=self.loaded, serve=True)
        self.views = self.pipeline.observe(LiveViews()) if views else None  # for the driver's console
        self.events = self.pipeline.observe(EventCollector()).recent  # the cameras' events, for the driver
        if hub is not None:
            self.pipeline.observe(MocapFeed(hub, triangulation_group(cfg.threed, cfg.sources or [])))
        self.summary: dict | None = None
        self.thread = threading.Thread(target=self._run, name=f"fleet-{name}", daemon=True)
        self.thread.start()
        while self.pipeline.loop is None and self.thread.is_alive():
            time.sleep(0.01)
        if driver_job is not None:
            threading.Thread(target=self._watch_driver, args=(driver_job,), name="driver-watch", daemon=True).start()
        self.sync()

    def _run(self) -> None:
        from ..runtime.pipeline import SourceFailed

        try:
            self.summary = self.pipeline.run()
        except SourceFailed as e:  # a camera failed; the others finished and the summary says so
            self.summary = e.summary

    def _watch_driver(self, job_id: str) -> None:
        while not self.leaving and driver_alive(job_id):
            time.sleep(DRIVER_CHECK_S)
        self.leaving = True
        import ray

        try:
            self.stop()
        finally:
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # ------------------------------------------------------------------------------------------- driver calls

    def info(self) -> dict:
        """Who and where: the driver records it in fleet.json."""
        return {"pid": os.getpid(), "node_id": self.node, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "device": str(self.loaded.device)}  # fmt: skip

    def sees(self, path: str) -> bool:
        """Whether this node sees a file the driver wrote (the output folder is on shared storage)."""
        return Path(path).exists()

    def measure(self) -> float:
        """Frames/s this worker processes live cameras at: synthetic frames with two people each through the
        detector and the models, in micro-batches of the size live sources get (as many frames as fit in
        `runtime.max_frame_age_s` at the cost per frame measured on single frames). Warm-ups are not counted."""
        from ..runtime.flow import frames_within

        rt = self.cfg.runtime
        per_frame = self._seconds_per_batch(1)
        size = frames_within(rt.max_frame_age_s, per_frame, rt.max_frames_per_batch)
        return size / (per_frame if size == 1 else self._seconds_per_batch(size))

    def _seconds_per_batch(self, size: int) -> float:
        """Median seconds of a batch of `size` frames (after one warm-up batch)."""
        from ..io.sources import Frame
        from ..runtime.results import Person

        engine, detector = self.loaded.engine, self.loaded.detector
        rng = np.random.default_rng(0)
        frames = [Frame(i, i / 30, time.time(), rng.integers(0, 255, (360, 640, 3), dtype=np.uint8))
                  for i in range(size)]  # fmt: skip
        people = [[Person(j, np.array([60.0 + 300 * j, 40, 120, 280], np.float32), 1.0) for j in range(2)]
                  for _ in frames]  # fmt: skip
        times = []
        for _ in range(MEASURE_ROUNDS + 1):
            start = time.perf_counter()
            detector.detect_frames(frames)
            engine.executor.submit(engine.run, frames, people).result()
            times.append(time.perf_counter() - start)
        return float(np.median(times[1:]))

    def sync(self) -> dict[str, int]:
        """Start the cameras fleet.json gives this worker and stop those it no longer does; returns what runs."""
        with self.lock:
            wanted = {} if self.leaving else assigned_to(self.out, self.name)
            for cam in self.running():
                if wanted.get(cam) != self.epochs.get(cam):
                    self.pipeline.remove_source(cam)
                    del self.epochs[cam]
            running = self.running()
            sources = {s.name: s for s in self.cfg.sources or []}
            sources.update({n: from_dict(SourceConfig, e, n) for n, e in added_sources(self.out).items()})
            for cam, epoch in wanted.items():
                if cam in running or cam not in sources:
                    continue
                folder = self.out / cam
                first_frame, first_track = continuation(folder, self.cfg.outputs.jsonl.name)
                source = replace(sources[cam], start_frame=first_frame)
                fence = fence_for(folder, self.name, epoch, self.node)

                def continued(stream, fence=fence, first_track=first_track) -> None:  # this worker's hold on it
                    stream.folder_checks.append(fence)
                    stream.tracking.start_ids_at(first_track)

                try:
                    self.pipeline.add_source(source, continued)
                except Sapiens2StreamError:
                    continue  # fenced at opening (moved on meanwhile) or not running: the next sync decides
                self.epochs[cam] = epoch
            return dict(self.epochs)

    def running(self) -> dict:
        """This worker's cameras whose streams are open, by name."""
        return {s.name: s for s in self.pipeline.streams if not s.closed and s.name in self.epochs}

    def stats(self, events_after: tuple[int, int] | None = None) -> dict:
        """The worker's numbers for the driver (also its sign of life): per camera, what it read and wrote and
        the age of its latest result. `events_after` (pid, seq): also the events after number `seq` of the
        process `pid` (all it keeps when that was another process: Ray restarted this worker)."""
        cameras = {}
        for s in self.running().values():
            cameras[s.name] = {
                "epoch": self.epochs[s.name], **counters(s),
                "state": "fenced" if s.fenced else state(s), "uri": s.source.source_id,
                "recording": str(s.feed.recording) if s.feed.recording else None,
            }  # fmt: skip
        answer = {**self.info(), "worker": self.name, "cameras": cameras}
        if events_after is not None:
            pid, seq = events_after
            answer["events"] = self.events.since(seq if pid == os.getpid() else 0)
        return answer

    def live(self, camera: str, after: int) -> dict | None:
        """The camera's live view since fragment `after`, for the driver's console (see LiveTap.since)."""
        view = self._view(camera)
        return None if view is None else view.since(after)

    def snapshot(self, camera: str) -> bytes | None:
        """The camera's latest annotated picture as JPEG (counts as watching, so one is drawn if none is)."""
        view = self._view(camera)
        return None if view is None else view.jpeg()

    def _view(self, camera: str):
        stream = self.running().get(camera)
        return None if stream is None or self.views is None else self.views.of(stream)

    def stop(self, timeout: float = 60.0) -> dict:
        """Stop every camera (outputs complete and playable) and the pipeline; returns each camera's summary."""
        self.pipeline.finish()
        self.thread.join(timeout)
        self.loaded.close()
        return (self.summary or {}).get("sources", {})
