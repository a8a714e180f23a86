"""The temporal filter of the dense outputs: steady matte, part labels, normals and depth (`temporal:`)."""

from __future__ import annotations

from ..results import FrameResult
from ..task_sections import TemporalConfig
from ..temporal_filter import TemporalFilter, filtered_outputs
from .base import Stage, register_stage
from .context import SourceContext


@register_stage("temporal")
class Temporal(Stage):
    """The source's temporal filter. Results redrawn by --resume pass through it too: their dense outputs were
    computed again and are steadied like the others."""

    section, doc = "temporal", "steady mattes, part labels, normals and depth over time"

    Options = TemporalConfig
    replay = True

    def enabled(self, options: TemporalConfig, ctx: SourceContext) -> bool:
        return bool(filtered_outputs(options, ctx.models, ctx.source))

    def open(self, options: TemporalConfig, ctx: SourceContext) -> TemporalFilter:
        return TemporalFilter(options, filtered_outputs(options, ctx.models, ctx.source))

    def __call__(self, state: TemporalFilter, result: FrameResult) -> None:
        state.apply(result)

    def summary(self, state: TemporalFilter) -> dict:
        return {"temporal": state.summary()}
