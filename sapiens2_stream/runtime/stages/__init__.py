"""The pipeline's stages, one file each, in the order a frame meets them (`base.ORDER`, the one list):

    take -> detect -> track -> infer -> temporal -> smooth -> threed -> angles -> kinematics -> events -> write
      -> (across the sources of a calibrated group) triangulate -> group_angles -> group_kinematics -> write_3d
         -> pose2sim

plus users' own stages (`stages:` in the YAML, `stages=` in the Python API) wherever they say. See `base` for what
a stage is, `runner` for how one source's stages run, `user` for users' stages. Every module of this package is
imported here, so a built-in stage registers whatever its file is called. The batch stages' path is told in
`runtime.frame_path`.
"""

from __future__ import annotations

import importlib
import pkgutil

from ...errors import Sapiens2StreamError
from ...registry import STAGES
from . import base
from .base import ORDER, Stage, in_order, register_stage
from .runner import SourceStages
from .user import SourceInfo, UserStage, api_stage, yaml_stage

for _module in pkgutil.iter_modules(__path__):  # the built-in stages register as they are imported
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ORDER", "STAGES", "SourceInfo", "SourceStages", "Stage", "UserStage", "api_stage", "builtin_stages",
           "in_order", "register_stage", "yaml_stage"]  # fmt: skip


def builtin_stages() -> list[Stage]:
    """One of each built-in stage, for one run (a name in `ORDER` that no file registered is a programming
    error)."""
    missing = [name for name in base.ORDER if name not in STAGES]
    if missing:
        raise Sapiens2StreamError(f"stages.base.ORDER names {', '.join(missing)}, which no stage file registers")
    return [cls() for cls in STAGES.values()]
