"""The pipeline's stages, one file each, in the order a frame meets them (`base.in_order` of the registry):

    take -> detect -> track -> infer -> temporal -> smooth -> threed -> events -> write

plus users' own stages (`stages:` in the YAML, `stages=` in the Python API) wherever they say. See `base` for what
a stage is, `runner` for how one source's stages run, `user` for users' stages.
"""

from __future__ import annotations

from . import detect, events, infer, smooth, take, temporal, threed, track, write  # noqa: F401  (they register)
from .base import REGISTRY, Stage, in_order, register_stage
from .handoff import END, Handoff, Item
from .runner import SourceStages
from .user import SourceInfo, UserStage, api_stage, yaml_stage

__all__ = ["END", "REGISTRY", "Handoff", "Item", "SourceInfo", "SourceStages", "Stage", "UserStage", "api_stage",
           "builtin_stages", "in_order", "register_stage", "yaml_stage"]  # fmt: skip


def builtin_stages(run) -> list[Stage]:
    """One of each registered stage, for the run `run`."""
    return [cls(run) for cls in REGISTRY.values()]
