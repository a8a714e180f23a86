"""The sections that grow with the task table (models/tasks.py): `models:`, one optional section per task, and
`temporal:`, a switch per filtered output beside the shared parameters (`options.TemporalParameters`). A task
registered before the configuration is assembled gets its own."""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING

from ..config import Mode, section
from ..models.tasks import pipeline_tasks
from .options import ModelSection, TemporalParameters

# models: one optional section per task of the table (models/tasks.py), in its order
if TYPE_CHECKING:  # editors and type checkers follow the classes written out (`schema --stub`)
    from .config_shape import ModelsConfig, TemporalConfig
else:
    ModelsConfig = section(key="models", cls=dataclasses.make_dataclass(
        "ModelsConfig", [(spec.name, ModelSection | None, None) for spec in pipeline_tasks()],
        namespace={"__module__": __name__,
                   "__doc__": "One section per task of the table (models/tasks.py); a task without one does not run."},
    ))  # fmt: skip


# temporal: a switch per filtered output of the table's tasks (models/tasks.py), then the shared parameters
if not TYPE_CHECKING:
    TemporalConfig = section(key="temporal", cls=dataclasses.make_dataclass(
        "TemporalConfig", [(spec.temporal.key, Mode, "auto") for spec in pipeline_tasks() if spec.temporal],
        bases=(TemporalParameters,),
        namespace={"__module__": __name__, "__doc__": """The temporal filter (the site's "Steady video"): per output
        `auto` (on for live sources and videos, off for photo folders), `on` or `off`; the parameters are shared by
        all of them."""},
    ))  # fmt: skip


def temporal_outputs() -> dict[str, str]:
    """The temporal filter's switches and the task whose output each steadies (the table's `temporal` keys)."""
    return {spec.temporal.key: spec.name for spec in pipeline_tasks() if spec.temporal}


def check_temporal(t: TemporalConfig, models: ModelsConfig, fail: typing.Callable[[str], None]) -> None:
    for output, model in temporal_outputs().items():
        if getattr(t, output) == "on" and getattr(models, model) is None:
            fail(f"temporal.{output} is on but models.{model} is not enabled (use auto or off)")
