"""The last stage: the source's outputs (files, window, re-stream, MQTT, webhooks), then whoever observes."""

from __future__ import annotations

from dataclasses import dataclass

from ...io.options import OutputsBase
from ...io.outputs import SinkInputs, check_sinks, make_sinks
from ...io.sink import Sink
from ..results import FrameResult
from .base import Stage, register_stage
from .context import SourceContext


def sink_inputs(ctx: SourceContext) -> SinkInputs:
    """What a source's outputs read besides `outputs:`."""
    models = {task: m.source for task, m in ctx.models.items()}
    return SinkInputs(models, ctx.events, ctx.smoothing, ctx.label)


@dataclass
class SourceOutputs:
    ctx: SourceContext
    sinks: list[Sink]


@register_stage("write")
class Write(Stage):
    """The source's sinks, opened when the source starts (so building a pipeline truncates nothing), then the run's
    observers. A result redrawn by --resume goes only to the sinks that draw (its records were written by the
    interrupted run)."""

    section, doc = "outputs", "the source's outputs (files, window, re-stream, MQTT, webhooks), then the observers"

    Options = OutputsBase  # with a section per kind of output (registry.SINKS)
    replay = True

    def check(self, options: OutputsBase, ctx: SourceContext) -> None:
        check_sinks(options, ctx.models)

    def open(self, options: OutputsBase, ctx: SourceContext) -> SourceOutputs:
        return SourceOutputs(ctx, make_sinks(options, sink_inputs(ctx), ctx.reader, ctx.sinks))

    def __call__(self, state: SourceOutputs, result: FrameResult) -> None:
        numbers = state.ctx.numbers
        if result.replayed:
            for sink in state.sinks:
                if sink.redraw:
                    sink.write(result)
            numbers.redrawn += 1
            return
        for sink in state.sinks:
            sink.write(result)
        numbers.wrote(result.frame.index, len(result.people), result.frame.wall_s)
        state.ctx.tell(result)

    def close(self, state: SourceOutputs) -> None:
        for sink in state.sinks:
            sink.close()

    def summary(self, state: SourceOutputs) -> dict:
        """What the outputs that can refuse work (re-stream, MQTT, virtual camera) sent and dropped."""
        outputs = {sink.kind: stats for sink in state.sinks if (stats := sink.stats()) is not None}
        return {"outputs": outputs} if outputs else {}
