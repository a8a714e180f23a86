"""The last stage: the source's outputs (files, window, re-stream, MQTT, webhooks), then whoever observes."""

from __future__ import annotations

from dataclasses import dataclass

from ...io.options import OutputsBase
from ...io.outputs import SinkInputs, check_sinks, make_sinks
from ...io.sink import Sink
from ..results import FrameResult
from .base import Stage, register_stage


def sink_inputs(cfg) -> SinkInputs:
    """What a source's outputs read besides `outputs:` (a single-source configuration)."""
    models = {task: m.source for task, m in cfg.enabled_models().items()}
    return SinkInputs(models, bool(cfg.events), cfg.smoothing, cfg.source.name or cfg.name)


@dataclass
class SourceOutputs:
    stream: object
    sinks: list[Sink]


@register_stage("write")
class Write(Stage):
    """The source's sinks, opened when the source starts (so building a pipeline truncates nothing), then the run's
    observers. A result redrawn by --resume goes only to the sinks that draw (its records were written by the
    interrupted run)."""

    section, doc = "outputs", "the source's outputs (files, window, re-stream, MQTT, webhooks), then the observers"

    Options = OutputsBase  # with a section per kind of output (io.outputs.SINKS)
    replay = True

    def check(self, cfg) -> None:
        check_sinks(cfg.outputs, cfg.enabled_models())

    def open(self, stream) -> SourceOutputs:
        sinks = make_sinks(stream.cfg.outputs, sink_inputs(stream.cfg), stream.source, stream.sink_setup())
        return SourceOutputs(stream, sinks)

    def __call__(self, state: SourceOutputs, result: FrameResult) -> None:
        numbers = state.stream.numbers
        if result.replayed:
            for sink in state.sinks:
                if sink.redraw:
                    sink.write(result)
            numbers.redrawn += 1
            return
        for sink in state.sinks:
            sink.write(result)
        numbers.wrote(result.frame.index, len(result.people), result.frame.wall_s)
        for observer in self.run.observers:
            observer.result(result, state.stream)

    def close(self, state: SourceOutputs) -> None:
        for sink in state.sinks:
            sink.close()

    def summary(self, state: SourceOutputs) -> dict:
        """What the outputs that can refuse work (re-stream, MQTT, virtual camera) sent and dropped."""
        outputs = {sink.kind: stats for sink in state.sinks if (stats := sink.stats()) is not None}
        return {"outputs": outputs} if outputs else {}
