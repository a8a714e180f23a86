"""The runner of the cross-source (`group`) stages: once per run, after every source's own stages, on a thread of
their own.

It watches the run as an observer: each result a source wrote is offered to the group stages that take results
(`offer`; triangulate: the cameras of a calibrated group); a moment one of them makes (`emit`) passes through the
group stages after it in `ORDER`, so a stage placed between triangulate and write_3d sees each moment before it is
written. A fleet's hub runs the same runner on the results its workers send (`fleet.mocap`).

Every call into a group stage happens on the runner's thread (`group-stages`): the sources' writer threads and the
event loop only queue what happened (a result offered, a source closed), so a slow or failing group stage never
holds a camera's own outputs or the loop. When nothing comes for `WAKE_S` the stages are polled (`poll`: moments
whose cameras went silent still come out). A run that continues an interrupted one (`--resume`) first gives every
stage the moments that run wrote (`resume`), so ids go on and the files at the end hold the whole take. A stage
that raises is said once (one line; the traceback with
--debug), counted in the summary's `errors` (so the run exits 3), and left out from then on; the stages after it
still get every moment and every source's outputs go on to their end. Its close still runs, once. The files a
stage makes at the end (per person: TRC/C3D/BVH, angles, kinematics) are jobs it hands over (`GroupContext.files`,
as a source stage hands its to the `stage_files` sink), run here into the output folder once every stage closed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...io.stage_files import run_jobs
from ..live_mocap import Moment
from ..observer import Observer
from .base import Failures, reports_of
from .context import GroupContext

log = logging.getLogger("sapiens2_stream")

WAKE_S = 0.005  # how often the stages are polled when nothing comes
END = object()


@dataclass
class GroupPlan:
    """What a run's group stages are given, cut from the run's configuration by the runner (`pipeline.group_plan`):
    the enabled stages in order, each one's own section by its name, and the run's context. Plain data: a fleet's
    driver sends it to its hub, which opens the stages where their files are written (`fleet.mocap`)."""

    stages: list
    options: dict[str, Any]
    ctx: GroupContext


class GroupStages(Observer):
    """The enabled group stages of a run, in order, their states and the thread they run on."""

    def __init__(self, plan: GroupPlan, listeners: list[Callable[[Moment], None]] = ()) -> None:
        """`plan`: the enabled group stages in order, each opened here with its own section and the run's context.
        `listeners`: each moment once it has passed every stage (the Python API's `on_moment`), on the stages'
        thread; one that raises is said and left out as a stage."""
        stages, ctx = plan.stages, plan.ctx
        self.stages = stages
        self.listeners = list(listeners)
        self.outbox, self.out_dir = ctx.files, ctx.out_dir  # the files the stages make at the end: written here
        self.states: dict[str, object] = {}
        self.errors: list[dict] = []  # {stage, error, moment}: the stages that failed (each off since)
        self.failed = Failures(
            "group stage", "(the stage is off for the rest of the run; the sources and the other stages go on)"
        )
        self.moments = 0  # moments made so far (where a failure happened)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        for i, stage in enumerate(stages):
            emit = lambda moment, after=i + 1: self.pass_on(after, moment)  # noqa: E731
            self.states[stage.name] = stage.open(plan.options[stage.name], ctx, emit)
        if ctx.resumed:
            for stage in stages:
                self._call(stage, "resume", ctx.resumed)

    def state(self, name: str):
        """A group stage's state (None when it does not run)."""
        return self.states.get(name)

    def reports(self) -> dict:
        """The group stages' status now, by their `reports` keys (`base.reports_of`): the console's 3-D view and
        /metrics read them (triangulate's under "3d"), as a source's status is read from its stages."""
        return reports_of(self.stages, self.states, self.failed)

    def start(self) -> None:
        """Start the stages' thread (once)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._work, name="group-stages", daemon=True)
            self.thread.start()

    def offer(self, result, label: str, live: bool) -> None:
        """A source's result, from anywhere (a run's writer thread, a fleet hub's caller): queued for the stages."""
        self.inbox.put(("offer", result, label, live))

    def pass_on(self, start: int, moment) -> None:
        """A moment made by the stage before `start` (on the stages' thread), through the stages from `start` on."""
        self.moments += 1
        for stage in self.stages[start:]:
            self._call(stage, "__call__", moment)
        for listener in list(self.listeners):
            try:
                listener(moment)
            except Exception as e:
                self.listeners.remove(listener)
                self._fail("on_moment", e)

    def _work(self) -> None:
        while True:
            try:
                job = self.inbox.get(timeout=WAKE_S)
            except queue.Empty:
                job = ("poll",)
            if job is END:
                return
            method, *args = job
            for stage in self.stages:
                self._call(stage, method, *args)

    def _call(self, stage, method: str, *args) -> None:
        if stage.name in self.failed:
            return
        try:
            getattr(stage, method)(self.states[stage.name], *args)
        except Exception as e:
            self._fail(stage.name, e)

    def _fail(self, name: str, error: Exception) -> None:
        message = self.failed.fail(name, error, f" after {self.moments} moments")
        self.errors.append({"stage": name, "error": message, "moment": self.moments})

    # ------------------------------------------------------------------------------------------- observer

    def started(self, pipeline) -> list:
        self.start()
        return []

    def result(self, result, stream) -> None:
        self.offer(result, stream.label, stream.live)

    def source_closed(self, stream) -> None:
        self.inbox.put(("source_closed", stream.label))

    def ending(self) -> None:
        self.inbox.put(("ending",))

    def ended(self) -> None:
        """What was queued done, then every stage closed in order (triangulate's last moments pass on before
        write_3d closes its files): a failing close is said and counted, the others still close."""
        self.inbox.put(END)
        if self.thread is not None:
            self.thread.join()
        else:  # never started (a run stopped before its first frame): what was queued is done here
            self._work()
        for stage in self.stages:
            try:
                stage.close(self.states[stage.name])
            except Exception as e:
                if stage.name not in self.failed:
                    self._fail(stage.name, e)
        # each stage's files, once all closed; one that fails is said and counted, the others are still written
        run_jobs(self.outbox.take(), self.out_dir, lambda job, e: self._fail(f"files {job.subfolder}", e))

    def summary(self) -> dict:
        out: dict = {}
        for stage in self.stages:
            out.update(stage.summary(self.states[stage.name]))
        return out
