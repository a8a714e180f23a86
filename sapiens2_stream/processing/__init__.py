"""Batched, device-side pre- and post-processing for every Sapiens2 task, with flip test-time augmentation."""

from .crops import PersonCrops, crop_persons
from .dense import FrameBatch, composite, mattes, metric_pointmaps, prepare_frames, seg_labels, unit_normals
from .flip import merge_flip, with_flipped
from .geometry import INPUT_SIZE, crop_windows
from .heatmaps import decode_heatmaps
from .targets import heatmap_targets, resize_labels

__all__ = [
    "PersonCrops", "crop_persons", "decode_heatmaps", "FrameBatch", "composite", "mattes", "metric_pointmaps",
    "prepare_frames", "seg_labels", "unit_normals", "merge_flip", "with_flipped", "INPUT_SIZE", "crop_windows",
    "heatmap_targets", "resize_labels",
]  # fmt: skip
