"""The temporal filter of the dense outputs: steady matte, part labels, normals and depth (`temporal:`)."""

from __future__ import annotations

from ..options import TemporalConfig
from ..results import FrameResult
from ..temporal_filter import TemporalFilter, filtered_outputs
from .base import Stage, register_stage


@register_stage("temporal")
class Temporal(Stage):
    """The source's temporal filter. Results redrawn by --resume pass through it too: their dense outputs were
    computed again and are steadied like the others."""

    section, doc = "temporal", "steady mattes, part labels, normals and depth over time"

    Options = TemporalConfig
    replay = True

    def enabled(self, cfg) -> bool:
        return bool(filtered_outputs(cfg.temporal, cfg.enabled_models(), cfg.source))

    def open(self, stream) -> TemporalFilter:
        cfg = stream.cfg
        return TemporalFilter(cfg.temporal, filtered_outputs(cfg.temporal, cfg.enabled_models(), cfg.source))

    def __call__(self, state: TemporalFilter, result: FrameResult) -> None:
        state.apply(result)

    def summary(self, state: TemporalFilter) -> dict:
        return {"temporal": state.summary()}
