"""Sapiens2 models in PyTorch: backbone, task heads, presets and checkpoint loading."""

from .config import SIZES, TASKS, BackboneConfig, HeadConfig, ModelConfig, hub_id, preset
from .loading import build_model, load_model
from .metadata import pose_metadata, seg_metadata
from .sapiens2 import (
    MattingOutput,
    NormalOutput,
    PointmapOutput,
    PoseOutput,
    PretrainOutput,
    Sapiens2,
    SegOutput,
    pose_loss,
    seg_loss,
)
from .tiny import make_tiny_checkpoints, tiny_config

__all__ = [
    "SIZES", "TASKS", "BackboneConfig", "HeadConfig", "ModelConfig", "hub_id", "preset", "build_model",
    "load_model", "pose_metadata", "seg_metadata", "MattingOutput", "NormalOutput", "PointmapOutput",
    "PoseOutput", "PretrainOutput", "Sapiens2", "SegOutput", "pose_loss", "seg_loss", "make_tiny_checkpoints",
    "tiny_config",
]  # fmt: skip
