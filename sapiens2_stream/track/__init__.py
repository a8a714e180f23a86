"""Person tracks across frames and keypoint smoothing along them (imported when first used: reading a pipeline
file needs only `track.options`)."""

from ..lazy import lazy_names

__getattr__ = lazy_names(__name__, {"OnlineSmoother": ".smoothing", "smooth_keypoints": ".smoothing",
                                    "Track": ".tracker", "Tracker": ".tracker"})  # fmt: skip
__all__ = ["OnlineSmoother", "Track", "Tracker", "smooth_keypoints"]
