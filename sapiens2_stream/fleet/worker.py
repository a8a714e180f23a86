"""One fleet worker: a Ray actor per GPU (or per few CPUs) that loads the models once and runs the multi-source
pipeline of `run` for the cameras fleet.json gives it.

`sync()` is the only way cameras come and go: it compares what runs here with what fleet.json says and starts or
stops cameras to match. The driver calls it after every change; the constructor calls it too, so a worker that
Ray restarts (its process killed, OOM) takes its cameras back by itself, each continuing in its own folder with a
new segment, the next frame index and a new range of track ids. Calls come on several threads (a threaded actor),
so `stats()` answers while the pipeline runs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..config import PipelineConfig
from ..errors import Sapiens2StreamError
from .record import assigned_to, continuation, fence_for

WARMUP_FRAMES = 4  # frames per batch of the capacity measurement
WARMUP_ROUNDS = 3


def node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray (tests of the class itself)
        return "local"


class FleetWorker:
    def __init__(self, cfg: PipelineConfig, name: str) -> None:
        from ..runtime.pipeline import Pipeline, load_models

        self.cfg, self.name = cfg, name
        self.out = Path(cfg.outputs.dir)
        self.node = node_id()
        self.lock = threading.Lock()
        self.loaded = load_models(cfg)
        self.epochs: dict[str, int] = {}
        self.pipeline = Pipeline(replace(cfg, sources=[]), loaded=self.loaded, serve=True)  # cameras come by sync
        self.summary: dict | None = None
        self.thread = threading.Thread(target=self._run, name=f"fleet-{name}", daemon=True)
        self.thread.start()
        while self.pipeline.loop is None and self.thread.is_alive():
            time.sleep(0.01)
        self.sync()

    def _run(self) -> None:
        from ..runtime.pipeline import SourceFailed

        try:
            self.summary = self.pipeline.run()
        except SourceFailed as e:  # a camera failed; the others finished and the summary says so
            self.summary = e.summary

    # ------------------------------------------------------------------------------------------- driver calls

    def info(self) -> dict:
        """Who and where: the driver records it in fleet.json."""
        return {"pid": os.getpid(), "node_id": self.node, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "device": str(self.loaded.device)}  # fmt: skip

    def sees(self, path: str) -> bool:
        """Whether this node sees a file the driver wrote (the output folder is on shared storage)."""
        return Path(path).exists()

    def measure(self) -> float:
        """Frames/s this worker processes the pipeline at: a few batches of synthetic frames with two people each
        through the detector and the models (the first batch, a warm-up, is not counted)."""
        engine, detector = self.loaded.engine, self.loaded.detector
        size = (360, 640)
        rng = np.random.default_rng(0)
        from ..io.sources import Frame
        from ..runtime.inference import Person

        frames = [Frame(i, i / 30, time.time(), rng.integers(0, 255, (*size, 3), dtype=np.uint8))
                  for i in range(WARMUP_FRAMES)]  # fmt: skip
        people = [[Person(j, np.array([60.0 + 300 * j, 40, 120, 280], np.float32), 1.0) for j in range(2)]
                  for _ in frames]  # fmt: skip
        times = []
        for _ in range(WARMUP_ROUNDS + 1):
            start = time.perf_counter()
            detector.detect([f.rgb for f in frames])
            engine.executor.submit(engine.run, frames, people).result()
            times.append(time.perf_counter() - start)
        return WARMUP_FRAMES / float(np.median(times[1:]))

    def sync(self) -> dict[str, int]:
        """Start the cameras fleet.json gives this worker and stop those it no longer does; returns what runs."""
        with self.lock:
            wanted = assigned_to(self.out, self.name)
            for cam in self.running():
                if wanted.get(cam) != self.epochs.get(cam):
                    self.pipeline.remove_source(cam)
                    del self.epochs[cam]
            running = self.running()
            sources = {s.name: s for s in self.cfg.sources or []}
            for cam, epoch in wanted.items():
                if cam in running or cam not in sources:
                    continue
                folder = self.out / cam
                first_frame, first_track = continuation(folder, self.cfg.outputs.jsonl.name)
                source = replace(sources[cam], start_frame=first_frame)
                fence = fence_for(folder, self.name, epoch, self.node)
                try:
                    self.pipeline.add_source(source, fence, first_track)
                except Sapiens2StreamError:
                    continue  # fenced at opening (moved on meanwhile) or not running: the next sync decides
                self.epochs[cam] = epoch
            return dict(self.epochs)

    def running(self) -> dict:
        """This worker's cameras whose streams are open, by name."""
        return {s.name: s for s in self.pipeline.streams if not s.closed and s.name in self.epochs}

    def stats(self) -> dict:
        """The worker's numbers for the driver (also its sign of life): per camera, what it read and wrote and
        the age of its latest result."""
        now = time.time()
        cameras = {}
        for s in self.running().values():
            cameras[s.name] = {
                "epoch": self.epochs[s.name], "frames_in": s.source.stats.frames, "frames_out": s.metrics.frames_out,
                "processed": s.processed, "processed_fps": round(s.processed / s.seconds(), 2),
                "dropped": dict(s.dropped), "reconnects": s.source.stats.reconnects,
                "result_age_s": None if s.last_written is None else round(now - s.last_written, 3),
                "state": "fenced" if s.fenced else "failed" if s.error else "live" if s.reading else "ended",
                "people": s.last_people,
            }  # fmt: skip
        return {**self.info(), "worker": self.name, "cameras": cameras}

    def stop(self, timeout: float = 60.0) -> dict:
        """Stop every camera (outputs complete and playable) and the pipeline; returns each camera's summary."""
        self.pipeline.finish()
        self.thread.join(timeout)
        summary = self.summary or {}
        return summary.get("sources", {}) if "sources" in summary else {}
