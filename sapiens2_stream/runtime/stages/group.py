"""The runner of the cross-source (`group`) stages: once per run, after every source's own stages.

It watches the run as an observer: each result a source wrote is offered to the group stages that take results
(`offer`; triangulate: the cameras of a calibrated group); a moment one of them makes (`emit`) passes through the
group stages after it in `ORDER`, so a stage placed between triangulate and write_3d sees each moment before it is
written. A fleet's hub runs the same runner on the results its workers send (`fleet.mocap`).
"""

from __future__ import annotations

from ..observer import Observer
from .context import GroupContext, options_of


class GroupStages(Observer):
    """The enabled group stages of a run, in order, and their states."""

    def __init__(self, stages: list, cfg, ctx: GroupContext) -> None:
        """`stages`: the enabled group stages in order, each opened with its own section of the run's
        configuration `cfg` and the run's context `ctx`."""
        self.stages = stages
        self.states: dict[str, object] = {}
        for i, stage in enumerate(stages):
            emit = lambda moment, after=i + 1: self.pass_on(after, moment)  # noqa: E731
            self.states[stage.name] = stage.open(options_of(stage, cfg), ctx, emit)

    def pass_on(self, start: int, moment) -> None:
        """A moment made by the stage before `start`, through the stages from `start` on."""
        for stage in self.stages[start:]:
            stage(self.states[stage.name], moment)

    def state(self, name: str):
        """A group stage's state (None when it does not run): the console and /metrics read triangulate's."""
        return self.states.get(name)

    def offer(self, result, label: str, live: bool) -> None:
        """A source's result, from anywhere (a run's writer thread, a fleet hub's caller)."""
        for stage in self.stages:
            stage.offer(self.states[stage.name], result, label, live)

    # ------------------------------------------------------------------------------------------- observer

    def started(self, pipeline) -> list:
        return [task for stage in self.stages for task in stage.started(self.states[stage.name])]

    def result(self, result, stream) -> None:
        self.offer(result, stream.label, stream.live)

    def source_closed(self, stream) -> None:
        for stage in self.stages:
            stage.source_closed(self.states[stage.name], stream.label)

    def ending(self) -> None:
        for stage in self.stages:
            stage.ending(self.states[stage.name])

    def ended(self) -> None:
        """Every stage closed in order (triangulate's last moments pass on before write_3d closes its files)."""
        for stage in self.stages:
            stage.close(self.states[stage.name])

    def summary(self) -> dict:
        out: dict = {}
        for stage in self.stages:
            out.update(stage.summary(self.states[stage.name]))
        return out
