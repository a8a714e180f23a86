"""The `angles:` section: joint angles per person, live (the angles stage) and from a run's files (`sapiens2-stream
angles`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..config import Above0, Share, Switch, section

Side = Literal["auto", "right", "left", "front", "back"]


@section(key="angles")
class AnglesConfig:
    """Joint angles per person: 2-D as Sports2D names them, 3-D as OpenSim's coordinates where the person is in
    metres; each track's .mot, CSV and plot in OUTPUT/angles/; heel strikes and toe-offs as events."""

    enabled: Switch = False  # off unless asked: every person's angles in the records and files, gait events
    side: Side = "auto"  # which side of the person the camera sees, for the 2-D angles (Sports2D's visible_side):
    # auto per frame from the feet, or forced
    min_score: Share = 0.3  # a keypoint less sure than this makes the angles that use it null (with the reason)
    filter: Literal["butterworth", "none"] = "butterworth"  # Sports2D's default: zero-lag in the files, causal live
    cutoff_hz: Above0 = 6.0  # the Butterworth filter's cut-off
    order: Annotated[int, Field(ge=2, le=8, multiple_of=2)] = 4  # its order (even: zero-lag runs it twice at half)
    bone_tolerance: Share = 0.25  # 3-D: a bone longer or shorter than this share of the person's own length (from
    # their first sure frames) makes the angles that use it null
    gait: Switch = True  # heel strikes and toe-offs as events; cadence, stride time, step length and speed per track
    files: Switch = True  # each track's .mot, CSV (and plot) in OUTPUT/angles/ when it ends
    plots: Switch = True  # a PNG of each track's angles over time, with its files

    def __bool__(self) -> bool:
        return bool(self.enabled)
