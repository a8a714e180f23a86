"""One source's stages at work: opened when the source starts, each result through them in order on the source's
writer thread, each one timed, results redrawn by --resume only through the stages that take them, and a
failure kept where it happened: the stage is said once (one line naming source, stage and error; the traceback
with --debug), counted, and left out for this source from then on, while its other stages and every other source
go on. Its close still runs, once."""

from __future__ import annotations

import logging
import time

from ...errors import Sapiens2StreamError
from ...io.sink import Fenced
from ..results import FrameResult
from .base import Failures, reports_of

log = logging.getLogger("sapiens2_stream")


class SourceStages:
    def __init__(self, stages: list, stream) -> None:
        """`stages`: the run's source stages in order (those enabled for this source run), each given its own
        section (`stream.plan.options`) and the source's context (`stream.context()`)."""
        self.stream = stream
        self.ctx = stream.context()
        self.options = {s.name: stream.plan.options.get(s.name) for s in stages}
        self.stages = [s for s in stages if s.enabled(self.options[s.name], self.ctx)]
        self.states: dict[str, object] = {}
        self.failed = Failures(f"source {stream.label}: stage", "(the stage is off for this source; the rest goes on)")
        self.closed = False

    def open(self) -> None:
        """Open every stage for this source. A configuration error (Sapiens2StreamError) is the run's to say (the
        stages opened so far are closed); any other failure of a stage's open leaves that stage out."""
        for stage in self.stages:
            try:
                self.states[stage.name] = stage.open(self.options[stage.name], self.ctx)
            except Sapiens2StreamError:
                self.close()
                raise
            except Exception as e:
                self.fail(stage, e, None)

    def state(self, name: str):
        """A stage's state for this source (None when the stage does not run for it)."""
        return self.states.get(name)

    def __call__(self, result: FrameResult) -> None:
        times = self.stream.numbers.times
        for stage in self.stages:
            if stage.name in self.failed or (result.replayed and not stage.replay):
                continue
            start = time.perf_counter()
            try:
                stage(self.states[stage.name], result)
            except Fenced:
                raise
            except Exception as e:
                self.fail(stage, e, result.frame.index)
            times.stage(stage.name, (time.perf_counter() - start) * 1e3)

    def fail(self, stage, error: Exception, frame: int | None) -> None:
        """Say and count a stage's failure; it runs no more for this source."""
        message = self.failed.fail(stage.name, error, "" if frame is None else f" at frame {frame}")
        self.stream.numbers.stage_failed(stage.name, message, frame)

    def close(self) -> None:
        """Close every opened stage, once, in order (a failing close is said and counted; the others still close)."""
        if self.closed:
            return
        self.closed = True
        for stage in self.stages:
            if stage.name not in self.states:
                continue
            try:
                stage.close(self.states[stage.name])
            except Exception as e:
                if stage.name not in self.failed:
                    self.fail(stage, e, None)

    def reports(self) -> dict:
        """The source stages' status now (`base.reports_of`): the console's source status and /metrics."""
        return reports_of(self.stages, self.states, self.failed)

    def summary(self) -> dict:
        """What the stages add to the source's summary."""
        out: dict = {}
        for stage in self.stages:
            if stage.name in self.states:
                out.update(stage.summary(self.states[stage.name]))
        return out
