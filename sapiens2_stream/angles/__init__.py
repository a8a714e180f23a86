"""Joint angles from tracked people: the 2-D angles Sports2D computes (its names, keypoints, offsets, signs and
ranges), 3-D anatomical angles named after OpenSim's coordinates wherever people are in metres, filters that keep
them steady over time, gait events, and the files people plot them from (.mot, CSV, PNG). Reading a pipeline file
needs only `angles.options`; the rest is imported when first used."""

from ..lazy import lazy_names

__getattr__ = lazy_names(__name__, {"planar_angles": ".planar", "anatomical_angles": ".anatomical",
                                    "TrackAngles": ".tracks"})  # fmt: skip
__all__ = ["TrackAngles", "anatomical_angles", "planar_angles"]
