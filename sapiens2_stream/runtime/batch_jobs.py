"""`sapiens2-stream batch`: many videos, in parallel, resumable.

Each worker loads the models once and processes videos one after another; each video is written to its own
folder exactly as `run` would write it. Locally the single worker runs in this process; with Ray there is one
actor per GPU (or per CPU slot) and each video is a task. A manifest records what is done and what failed (with
the reason, after retries), so a rerun skips finished videos.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from ..errors import Sapiens2StreamError
from .pipeline_config import PipelineConfig
from .ray_cluster import connect, worker_plan

MANIFEST = "manifest.json"
LIST_SUFFIXES = (".txt", ".lst")


def expand_inputs(inputs: list[str]) -> list[Path]:
    """Files, globs and list files (.txt/.lst: one path per line, # comments) -> unique paths, in order."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.suffix in LIST_SUFFIXES and path.is_file():
            lines = [line.strip() for line in path.read_text().splitlines()]
            found += expand_inputs([line for line in lines if line and not line.startswith("#")])
        elif any(c in item for c in "*?["):
            matches = sorted(glob.glob(item))
            if not matches:
                raise Sapiens2StreamError(f"{item}: the pattern matches no file")
            found += [Path(m) for m in matches]
        else:
            found.append(path)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise Sapiens2StreamError("no input videos given")
    return unique


def output_names(videos: list[Path]) -> dict[Path, str]:
    """One folder name per video: its file stem, made unique with a counter when stems repeat."""
    names: dict[Path, str] = {}
    used: set[str] = set()
    for video in videos:
        name, n = video.stem, 1
        while name in used:
            n += 1
            name = f"{video.stem}-{n}"
        used.add(name)
        names[video] = name
    return names


class Manifest:
    """manifest.json in the batch output folder: per video its status, folder, attempts, frames and error."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / MANIFEST
        self.entries: dict[str, dict] = json.loads(self.path.read_text())["videos"] if self.path.exists() else {}

    def done(self, video: Path) -> bool:
        entry = self.entries.get(str(video))
        return bool(entry and entry["status"] == "done" and (self.path.parent / entry["output"]).is_dir())

    def record(self, video: Path, **fields) -> None:
        self.entries[str(video)] = {**self.entries.get(str(video), {}), **fields}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"videos": self.entries}, indent=2))
        os.replace(tmp, self.path)  # never a half-written manifest


class Worker:
    """Holds loaded models and runs the pipeline on one video at a time."""

    def __init__(self, cfg: PipelineConfig) -> None:
        from .pipeline import load_models

        self.cfg = cfg
        self.loaded = load_models(cfg)

    def ready(self) -> bool:
        """Answers once the worker is up (after a restart: its models loaded again)."""
        return True

    def process(self, video: str, out_dir: str) -> dict:
        """Run one video into out_dir (cleared first); returns the run summary or {"error": reason}."""
        from .pipeline import Pipeline
        from .progress import save_summary

        shutil.rmtree(out_dir, ignore_errors=True)
        cfg = replace(
            self.cfg, source=replace(self.cfg.source, uri=video), outputs=replace(self.cfg.outputs, dir=out_dir)
        )
        try:
            summary = Pipeline(cfg, loaded=self.loaded).run()
            save_summary(summary, out_dir)
            return summary
        except Sapiens2StreamError as e:
            return {"error": str(e)}
        except Exception as e:  # a worker must report, not die, so the rest of the batch finishes
            return {"error": f"{type(e).__name__}: {e}"}


def batch_config(cfg: PipelineConfig) -> PipelineConfig:
    """Batch runs are offline: nothing dropped, no window."""
    return replace(
        cfg,
        runtime=replace(cfg.runtime, policy="block"),
        outputs=replace(cfg.outputs, display=False),
    )


def ray_workers(cfg: PipelineConfig, address: str, workers: int | None) -> list:
    """One actor per GPU (or per 4 CPUs) that keeps its models loaded; Ray restarts one whose process dies."""
    ray = connect(address)
    count, options = worker_plan(ray, workers)
    actor = ray.remote(**options, max_restarts=-1, max_task_retries=0)(Worker)
    return [actor.remote(cfg) for _ in range(count)]


def run_batch(
    cfg: PipelineConfig, inputs: list[str], out_dir: str, ray_address: str | None = None,
    workers: int | None = None, retries: int = 2, on_video=None,
) -> dict:  # fmt: skip
    """Process every input video not already done; returns {"done": [...], "failed": {video: reason}, "skipped"}."""
    cfg = batch_config(cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    videos = expand_inputs(inputs)
    names = output_names(videos)
    manifest = Manifest(out)
    todo = [v for v in videos if not manifest.done(v)]
    skipped = [v for v in videos if manifest.done(v)]
    for video in skipped:
        if on_video is not None:
            on_video(video, {"skipped": True})
    attempts = {v: 0 for v in todo}
    done, failed = [], {}

    def finished(video: Path, result: dict) -> bool:
        """Record a result; True when the video needs another try."""
        attempts[video] += 1
        if "error" not in result:
            manifest.record(video, status="done", output=names[video], attempts=attempts[video],
                            frames=result["totals"]["frames_out"],
                            finished=time.strftime("%Y-%m-%dT%H:%M:%S"))  # fmt: skip
            done.append(str(video))
        elif attempts[video] <= retries:
            return True
        else:
            manifest.record(video, status="failed", output=names[video], attempts=attempts[video],
                            error=result["error"])  # fmt: skip
            failed[str(video)] = result["error"]
        if on_video is not None:
            on_video(video, result)
        return False

    if ray_address is None:
        worker = Worker(cfg) if todo else None
        for video in todo:
            while finished(video, worker.process(str(video), str(out / names[video]))):
                pass
        if worker is not None:
            worker.loaded.close()  # its threads end with the batch
    else:
        import ray

        idle = ray_workers(cfg, ray_address, workers) if todo else []
        queue, running, waking = list(todo), {}, {}  # waking: a lost worker's ready() call -> the worker
        while queue or running:
            while queue and idle:
                video, actor = queue.pop(0), idle.pop(0)
                running[actor.process.remote(str(video), str(out / names[video]))] = (video, actor)
            ready, _ = ray.wait([*running, *waking], num_returns=1)
            if ready[0] in waking:  # a restarted worker answers again: it takes videos again
                actor = waking.pop(ready[0])
                try:
                    ray.get(ready[0])
                    idle.append(actor)
                except ray.exceptions.RayError:
                    time.sleep(0.5)  # still restarting (loading its models): ask again
                    waking[actor.ready.remote()] = actor
                continue
            video, actor = running.pop(ready[0])
            try:
                result = ray.get(ready[0])
                idle.append(actor)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                # the worker died on this video (OOM, a lost node): Ray restarts it; the video is retried like
                # any failed one, and the worker takes videos again once it answers
                result = {"error": f"worker lost ({type(e).__name__})"}
                waking[actor.ready.remote()] = actor
            if finished(video, result):
                queue.insert(0, video)
    return {"done": done, "failed": failed, "skipped": [str(v) for v in skipped]}
