"""What a stage is given besides its own section: a small context, never the whole configuration.

The runner cuts each source's single-source configuration into the stage's own section (`options_for`: the
section its class names, `Stage.section`) and a `SourceContext` (what a source stage may know of its source and of
the stages before it); a group stage gets its section and a `GroupContext` (the run's sources and folders). The
section is cut by `PipelineBase.options_for`; the contexts here (`source_context`, `group_context`), where the
runtime's policy lives (which stages emit events, which sources form a camera group), not in the configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...io.options import SourceConfig
from ...io.stage_files import FileOutbox
from ...track.options import SmoothingConfig
from ..options import ModelSection

if TYPE_CHECKING:
    from ..pipeline_config import PipelineConfig


@dataclass
class SourceContext:
    """A source stage's view of its source. The first group of fields is known from the configuration (what
    `enabled` and `check` see, at `validate` too); the second only once the source is open (`open` sees them)."""

    label: str  # the source's name (several sources), else the pipeline's
    source: SourceConfig
    out_dir: Path  # the source's output folder
    models: dict[str, ModelSection]  # the models that run, by task
    events: bool = False  # results carry events (a source stage that `emits` them runs: events, angles' gait)
    smoothing: SmoothingConfig = field(default_factory=SmoothingConfig)  # how the keypoints were smoothed (the
    # per-track files smooth again, offline, the same way)
    patience_s: float = 1.0  # how long a lost track keeps its identity (tracker.max_lost_s): events wait as long
    lifted: bool = False  # the single-camera 3-D stage puts its people in metres (`threed:` with pose and pointmap)
    # known once the source is open
    reader: Any = None  # the opened source (io.sources.Source): its frame rate and size
    resumed: Any = None  # the interrupted run continued by --resume (runtime.resume.Resumed), or None
    numbers: Any = None  # the source's counters (runtime.numbers.SourceNumbers)
    sinks: Any = None  # what its sinks share with the run (io.outputs.SinkSetup)
    tell: Callable[[Any], None] = lambda result: None  # a written result to the run's observers


@dataclass
class SourcePlan:
    """What one source's stream is given, cut from its single-source configuration before anything opens: the
    sections it reads itself (its input, the runtime's policy, the detector's schedule, the tracker, the outputs a
    resumed run reads back), each of its source stages' own section by name, and the context they are told."""

    source: SourceConfig
    runtime: Any  # runtime.options.RuntimeConfig
    detector: Any  # detect.options.DetectorConfig
    tracker: Any  # track.options.TrackerConfig
    outputs: Any  # the `outputs:` section
    options: dict[str, Any]  # each source stage's section, by the stage's name
    ctx: SourceContext

    def resumed_at(self, start_frame: int) -> SourcePlan:
        """The same plan for a run continued from `start_frame` (its stages are told so too)."""
        source = replace(self.source, start_frame=start_frame)
        return replace(self, source=source, ctx=replace(self.ctx, source=source))


@dataclass
class GroupContext:
    """A group stage's view of the run: its sources (their configurations, the camera group among them, and the
    folder each writes to), its own output folder and MQTT topic, and once open, the sources' nominal frame rates by
    label, the run's MQTT client (or None), whether the run was interrupted (asked at the end: a Pose2Sim project
    is made of complete takes only), when it continues one (`--resume`), the moments that run wrote, and where the
    files a group stage makes go (`files`: its jobs, run by the group's sink into the output folder)."""

    sources: list[SourceConfig]  # the named sources (`sources:`); empty for a single `source:`
    group: list[str]  # the calibrated camera group triangulated together (`threed:`; none: fewer than two)
    folders: dict[str, Path]  # each source's output folder, by name
    out_dir: Path
    topic: str = ""  # outputs.mqtt.topic ({source} in it names the sender)
    rates: dict[str, float | None] = field(default_factory=dict)
    mqtt: Any = None
    interrupted: Callable[[], bool] = lambda: False
    resumed: list | None = None  # --resume: the interrupted run's moments (OUTPUT/3d/keypoints_3d.jsonl), read
    # back (io.records.RecordedMoment)
    files: FileOutbox = field(default_factory=FileOutbox)  # the files the group stages make at the end, handed to
    # the group's `stage_files` sink (stages.group), never written by a stage itself


def source_context(cfg: PipelineConfig) -> SourceContext:
    """The context of the source of a single-source configuration (`PipelineConfig.per_source`)."""
    from ...registry import STAGES

    events = any(cls().emits(cfg.options_for(cls)) for cls in STAGES.values() if cls.scope == "source")
    models = cfg.enabled_models()
    return SourceContext(cfg.source.name or cfg.name, cfg.source, Path(cfg.outputs.dir), models, events,
                         cfg.smoothing, cfg.tracker.max_lost_s, cfg.threed.lifts(models))  # fmt: skip


def source_plan(cfg: PipelineConfig, stages: list) -> SourcePlan:
    """The plan of the source of a single-source configuration (`PipelineConfig.per_source`), for the run's source
    stages `stages`."""
    options = {s.name: cfg.options_for(s) for s in stages if s.scope == "source"}
    return SourcePlan(cfg.source, cfg.runtime, cfg.detector, cfg.tracker, cfg.outputs, options, source_context(cfg))


def group_context(cfg: PipelineConfig) -> GroupContext:
    """The context of a run of a whole configuration: several sources or one."""
    from ..live_mocap import triangulation_group

    folders = {c.source.name: Path(c.outputs.dir) for c in cfg.per_source()}
    sources = list(cfg.sources or [])
    return GroupContext(sources, triangulation_group(cfg.threed, sources), folders, Path(cfg.outputs.dir),
                        cfg.outputs.mqtt.topic)  # fmt: skip


def runs(cfg: PipelineConfig, stage) -> bool:
    """Whether `stage` runs for `cfg` (a source stage: for this single-source configuration; a group stage: for
    this whole one)."""
    ctx = group_context(cfg) if stage.scope == "group" else source_context(cfg)
    return stage.scope == "batch" or stage.enabled(cfg.options_for(stage), ctx)
