"""The `tracker:` and `smoothing:` sections: identities across frames, and each track's keypoint smoothing
(in a run and in `track.smooth_keypoints` alike: the defaults live here only)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from ..config import AtLeast0, Count, Share, section


@section(key="tracker")
class TrackerConfig:
    iou: Share = 0.3  # minimum IoU to match a detection to a track
    high_score: Share = 0.5  # detections above this are matched first (ByteTrack)
    max_lost_s: AtLeast0 = 1.0  # keep unmatched tracks this long (short occlusions)
    min_hits: Count = 1  # report a track after this many matches


@section(key="smoothing")
class SmoothingConfig:
    """Keypoint smoothing per track, in a run and in `track.smooth_keypoints` alike (the defaults live here only)."""

    method: Literal["none", "kalman", "adaptive", "rts", "one_euro"] = "adaptive"  # see the site's page "Tracks,
    # smoothing and steady video": adaptive (IMM of a steady and a turning filter) is the default everywhere
    params: dict[str, float] = field(default_factory=dict)  # the method's parameters (see the smoothing docs)
    min_score: AtLeast0 = 0.3  # keypoints below this predict only
