"""Keypoint smoothing per track (`smoothing:`)."""

from __future__ import annotations

from ...io.records import as_recorded
from ...track import OnlineSmoother
from ...track.options import SmoothingConfig
from ..results import FrameResult
from .base import Stage, register_stage
from .context import SourceContext


@register_stage("smooth")
class Smooth(Stage):
    """The source's keypoint smoother, per track (an ended track's filter is dropped). A resumed run's smoothers
    are restored from the interrupted run's records; results it redraws keep their recorded smoothed keypoints."""

    section, doc = "smoothing", "each track's keypoints smoothed (adaptive IMM Kalman by default)"

    Options = SmoothingConfig

    def open(self, options: SmoothingConfig, ctx: SourceContext) -> OnlineSmoother:
        smoother = OnlineSmoother(options.method, options.min_score, **options.params)
        if ctx.resumed is not None:
            ctx.resumed.restore_smoother(smoother)
        return smoother

    def __call__(self, smoother: OnlineSmoother, result: FrameResult) -> None:
        for track_id in result.ended_tracks:
            smoother.drop(track_id)
        for p in result.people:
            if p.keypoints is not None:
                p.smoothed = smoother(p.track_id, *as_recorded(result.frame.pts_s, p.keypoints, p.keypoint_scores))
