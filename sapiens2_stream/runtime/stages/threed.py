"""People in metres from one camera: pose and pointmap lifted (`threed:`)."""

from __future__ import annotations

from ...threed.calibration import camera_named
from ...threed.options import ThreeDConfig
from ..results import FrameResult
from ..threed_run import ThreeDRun
from .base import Stage, register_stage
from .context import SourceContext


@register_stage("threed")
class ThreeD(Stage):
    """The source's lifter on pose and pointmap, between the smoother (it lifts the smoothed keypoints) and the
    sinks (they write `keypoints_3d`); world.json and the per-track files are handed to the outputs when the source
    closes."""

    section, doc = "threed", "people in metres from one camera: pose and pointmap lifted, floor, TRC/C3D/BVH"

    Options = ThreeDConfig
    files_off = {"files": False}

    def enabled(self, options: ThreeDConfig, ctx: SourceContext) -> bool:
        return options.lifts(ctx.models)

    def check(self, options: ThreeDConfig, ctx: SourceContext) -> None:
        camera_named(options.calibration, ctx.label)

    def open(self, options: ThreeDConfig, ctx: SourceContext) -> ThreeDRun:
        files = ctx.sinks.files if ctx.sinks is not None and options.files else None
        return ThreeDRun(options, ctx.out_dir, ctx.label, files)

    def __call__(self, state: ThreeDRun, result: FrameResult) -> None:
        state(result)

    def close(self, state: ThreeDRun) -> None:
        state.close()

    def summary(self, state: ThreeDRun) -> dict:
        return {"threed": state.summary()}
