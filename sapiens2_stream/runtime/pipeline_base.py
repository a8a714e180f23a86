"""What of the pipeline YAML is no component's own: the input(s), users' stages and the name (`PipelineBase`), with
the ways a whole configuration is cut for one source and for one stage. The assembled `PipelineConfig`
(`runtime.pipeline_config`) is this with every declared section added."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any, Self

from ..config import section
from ..io.options import SourceConfig
from ..user_stages import StageConfig
from .options import ModelSection


@section
class PipelineBase:
    """What is no component's own: the input(s), your own stages, the fleet and the pipeline's name."""

    source: SourceConfig = field(default_factory=SourceConfig)
    sources: list[SourceConfig] | None = None  # several inputs in one process, instead of `source`
    stages: list[StageConfig] = field(default_factory=list)  # your own stages, run for every source in frame order
    # (see the site's page "Your own stages")
    name: str = "pipeline"  # names a single source in the summary, Prometheus and MQTT

    def enabled_models(self) -> dict[str, ModelSection]:
        return {k: v for k, v in vars(self.models).items() if v is not None}

    def per_source(self) -> list[Self]:
        """One single-source configuration per input. Named sources (`sources:`) write to OUTPUT/<name>/; the
        single `source:` writes to OUTPUT/ itself."""
        if self.sources is None:
            return [self if self.source.events is None else dataclasses.replace(self, events=self.source.events)]
        return [self.for_source(src) for src in self.sources]

    def named(self, default: str = "cam1") -> Self:
        """This configuration with its input(s) as `sources:` (the single `source:` named `default` unless it has a
        name), for what addresses sources by name (the console, the fleet): outputs then go to OUTPUT/<name>/."""
        if self.sources is not None:
            return self
        return dataclasses.replace(self, sources=[dataclasses.replace(self.source, name=self.source.name or default)])

    def for_source(self, src: SourceConfig) -> Self:
        """The single-source configuration of the named source `src`: its outputs in OUTPUT/<name>/."""
        outputs = dataclasses.replace(self.outputs, dir=str(Path(self.outputs.dir) / src.name))
        events = self.events if src.events is None else src.events
        return dataclasses.replace(self, source=src, sources=None, outputs=outputs, events=events)

    # What a stage is given: its own section (`options_for`) and a context (`stages.context.source_context` and
    # `group_context`), never the whole configuration.

    def options_for(self, stage) -> Any:
        """The section `stage` reads (`stage.section`, dotted: `outputs.pose2sim`); None for a stage without one
        (users' stages: their options were given when they were made)."""
        key = getattr(stage, "section", None)
        value: Any = self if key else None
        for part in key.split(".") if key else ():
            value = getattr(value, part)
        return value
