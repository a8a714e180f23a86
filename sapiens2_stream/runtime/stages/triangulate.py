"""Live motion capture across sources: the cameras of one calibrated group triangulated as their results arrive."""

from __future__ import annotations

from ...threed.options import ThreeDConfig
from ..live_mocap import LiveMocap, checked_group
from .base import GroupStage, register_stage
from .context import GroupContext


@register_stage("triangulate")
class Triangulate(GroupStage):
    """The sources a calibration names (`threed.calibration`, `threed.cameras`; two or more) made into moments:
    each camera's results paired by capture time within `max_skew_s`, triangulated, then passed on to the group
    stages after this one (write_3d writes them)."""

    section, doc = "threed", "a calibrated camera group's people in metres, as their results arrive (moments)"
    Options = ThreeDConfig
    reports = "3d"

    def enabled(self, options: ThreeDConfig, ctx: GroupContext) -> bool:
        return bool(checked_group(options, ctx.sources))

    def check(self, options: ThreeDConfig, ctx: GroupContext) -> None:
        checked_group(options, ctx.sources)

    def open(self, options: ThreeDConfig, ctx: GroupContext, emit) -> LiveMocap:
        return LiveMocap(options, ctx.sources, checked_group(options, ctx.sources), ctx.rates, emit)

    def offer(self, state: LiveMocap, result, label: str, live: bool) -> None:
        state.result(result, label, live)

    def resume(self, state: LiveMocap, moments: list[dict]) -> None:
        state.resume(moments)

    def poll(self, state: LiveMocap) -> None:
        state.poll()  # moments whose cameras all went silent still come out

    def source_closed(self, state: LiveMocap, label: str) -> None:
        state.source_closed(label)

    def close(self, state: LiveMocap) -> None:
        state.flush()  # the moments still waiting, passed on before the stages after this one close

    def summary(self, state: LiveMocap) -> dict:
        return {"live_mocap": state.summary()}

    def report(self, state: LiveMocap) -> dict:
        """The latest moment's record (the console's 3-D view; None before the first), its figures and the
        summary so far (/metrics: `mocap_metrics`)."""
        return {"latest": state.latest, "last": state.last, "summary": state.summary()}
