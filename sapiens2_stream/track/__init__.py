"""Person tracks across frames and keypoint smoothing along them."""

from .smoothing import OnlineSmoother, smooth_keypoints
from .tracker import Track, Tracker

__all__ = ["OnlineSmoother", "Track", "Tracker", "smooth_keypoints"]
