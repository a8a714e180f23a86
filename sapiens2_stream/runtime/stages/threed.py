"""People in metres from one camera: pose and pointmap lifted (`threed:`)."""

from __future__ import annotations

from ...threed.calibration import camera_named
from ...threed.options import ThreeDConfig
from ..results import FrameResult
from ..threed_run import ThreeDRun
from .base import Stage, register_stage


@register_stage("threed")
class ThreeD(Stage):
    """The source's lifter on pose and pointmap, between the smoother (it lifts the smoothed keypoints) and the
    sinks (they write `keypoints_3d`); world.json and the per-track files are written when the source closes."""

    section, doc = "threed", "people in metres from one camera: pose and pointmap lifted, floor, TRC/C3D/BVH"

    Options = ThreeDConfig

    def enabled(self, cfg) -> bool:
        return cfg.lifts_3d()

    def check(self, cfg) -> None:
        camera_named(cfg.threed.calibration, cfg.source.name or cfg.name)

    def open(self, stream) -> ThreeDRun:
        return ThreeDRun(stream.cfg.threed, stream.cfg.outputs.dir, stream.label)

    def __call__(self, state: ThreeDRun, result: FrameResult) -> None:
        state(result)

    def close(self, state: ThreeDRun) -> None:
        state.close()

    def summary(self, state: ThreeDRun) -> dict:
        return {"threed": state.summary()}
