"""Sapiens2 models in PyTorch: the table of tasks, backbone, task heads, presets and checkpoint loading.

The table, the shapes and the configurations load without torch (the pipeline YAML's schema and the command line
read them); the modules that build and load models are imported when one of their names is first used.
"""

from ..lazy import lazy_names
from .config import ModelConfig, preset
from .metadata import pose_metadata, seg_metadata
from .outputs import MattingOutput, NormalOutput, PointmapOutput, PoseOutput, PretrainOutput, SegOutput
from .shapes import BackboneConfig, HeadConfig
from .tasks import SIZES, TASKS, TaskSpec, hub_id, pipeline_tasks, register_task, task_spec

__getattr__ = lazy_names(__name__, {  # name -> the module that holds it, imported on first use (these import torch)
    "build_model": ".loading", "load_model": ".loading", "Sapiens2Network": ".network", "pose_loss": ".network",
    "seg_loss": ".network", "make_tiny_checkpoints": ".tiny", "tiny_config": ".tiny",
})  # fmt: skip

__all__ = [
    "SIZES", "TASKS", "TaskSpec", "BackboneConfig", "HeadConfig", "ModelConfig", "hub_id", "preset", "build_model",
    "load_model", "pose_metadata", "seg_metadata", "MattingOutput", "NormalOutput", "PointmapOutput",
    "PoseOutput", "PretrainOutput", "Sapiens2Network", "SegOutput", "pose_loss", "seg_loss", "make_tiny_checkpoints",
    "tiny_config", "pipeline_tasks", "register_task", "task_spec",
]  # fmt: skip
