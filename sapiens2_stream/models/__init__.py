"""Sapiens2 models in PyTorch: the table of tasks, backbone, task heads, presets and checkpoint loading."""

from .config import ModelConfig, preset
from .loading import build_model, load_model
from .metadata import pose_metadata, seg_metadata
from .outputs import MattingOutput, NormalOutput, PointmapOutput, PoseOutput, PretrainOutput, SegOutput
from .sapiens2 import Sapiens2, pose_loss, seg_loss
from .shapes import BackboneConfig, HeadConfig
from .tasks import SIZES, TASKS, TaskSpec, hub_id, pipeline_tasks, register_task, task_spec
from .tiny import make_tiny_checkpoints, tiny_config

__all__ = [
    "SIZES", "TASKS", "TaskSpec", "BackboneConfig", "HeadConfig", "ModelConfig", "hub_id", "preset", "build_model",
    "load_model", "pose_metadata", "seg_metadata", "MattingOutput", "NormalOutput", "PointmapOutput",
    "PoseOutput", "PretrainOutput", "Sapiens2", "SegOutput", "pose_loss", "seg_loss", "make_tiny_checkpoints",
    "tiny_config", "pipeline_tasks", "register_task", "task_spec",
]  # fmt: skip
