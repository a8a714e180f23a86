"""Whether each camera of a fleet has a living owner and a fresh result: the driver's /healthz, its status lines
and the ages /metrics gives. Read from the driver's record and the workers' latest answers; changes nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

ANSWER_S = 3.0  # a worker silent for longer counts as no owner of its cameras (/healthz)


@dataclass
class WorkerState:
    """What the driver knows of one worker, in one record."""

    handle: object  # its Ray actor
    stats: dict = field(default_factory=lambda: {"cameras": {}})  # its latest answer
    asked: object = None  # the stats call in flight
    seen: float = 0.0  # when it last answered
    lost: bool = False  # its node died and its cameras moved
    awaited_since: float | None = None  # since when cameras wait for its restart on a free GPU
    event_cursor: tuple[int, int] = (0, 0)  # (pid, seq) of the last event taken from it


@dataclass
class CameraState:
    """What the driver knows of one camera beyond the record: when it was given to its worker, and when its latest
    result was written (as last reported)."""

    assigned_at: float = 0.0
    result_wall: float | None = None


class Health:
    """The cameras' health, from the record (`record.data`: who runs what), the workers' states and the cameras'
    (the dicts themselves: the driver keeps them up to date)."""

    def __init__(self, record, workers: dict[str, WorkerState], cameras: dict[str, CameraState],
                 max_result_age_s: float) -> None:  # fmt: skip
        self.record, self.workers, self.cameras, self.max_result_age_s = record, workers, cameras, max_result_age_s

    def owner_alive(self, camera: str) -> bool:
        """Whether the camera's worker is on a living node and answered lately (a worker restarting, or on a node
        not yet declared dead, does not)."""
        worker = self.workers[self.record.data["sources"][camera]["worker"]]
        return not worker.lost and time.time() - worker.seen < ANSWER_S

    def result_age(self, camera: str, now: float) -> float:
        """Since the camera's latest result (before its first: since it was assigned)."""
        c = self.cameras.get(camera)
        if c is None:
            return 0.0
        return now - (c.result_wall if c.result_wall is not None else c.assigned_at)

    def fresh(self, camera: str, now: float) -> bool:
        """A result since the camera's current assignment (a moved camera is not fresh until its new worker has
        written), and within fleet.max_result_age_s."""
        c = self.cameras.get(camera, CameraState())
        wall = c.result_wall if c.result_wall is not None else 0.0
        return wall >= c.assigned_at and now - wall <= self.max_result_age_s

    def status(self) -> tuple[int, dict]:
        """503 naming the cameras with no owner or no fresh result; 200 otherwise (/healthz)."""
        now = time.time()
        ages = {cam: round(self.result_age(cam, now), 2) for cam in self.record.data["sources"]}
        orphans = sorted(c for c in ages if not self.owner_alive(c))
        stale = sorted(c for c in ages if not self.fresh(c, now) and c not in orphans)
        body = {"status": "ok" if not (orphans or stale) else "unhealthy", "result_age_s": ages}
        if orphans:
            body["no_owner"] = orphans
        if stale:
            body["no_fresh_result"] = stale
        return (503 if orphans or stale else 200), body

    def lines(self, group_errors: list[dict]) -> list[str]:
        """A status line per worker, and one naming the group stages off after an error (`group_errors`)."""
        now, lines = time.time(), []
        for name, worker in self.record.data["workers"].items():
            known = self.workers[name]
            fps = sum(c["processed_fps"] for c in known.stats["cameras"].values())
            ages = [self.result_age(c, now) for c in worker["sources"]]
            state = "lost" if known.lost else "up" if now - known.seen < ANSWER_S else "no answer"
            lines.append(f"{name} [{state}] node {worker['node_id'][:8]} gpu {worker['gpus'] or '-'}: "
                         f"{len(worker['sources'])} camera(s), {fps:.1f} frames/s, oldest result "
                         f"{max(ages, default=0):.1f} s")  # fmt: skip
        if group_errors:
            lines.append(f"group stages off after an error: {', '.join(e['stage'] for e in group_errors)}")
        return lines
