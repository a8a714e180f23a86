"""Users' own stages: a class named in the YAML (`stages: [{name, use: "module:Class" or "path/file.py:Class", after,
options}]`) or an object given to the Python API (`stream(..., stages=[CrowdCSV(...)])`).

A user's stage has four parts, as the built-in ones have (those get their section and a context):
`open(source) -> state` (optional; `source` is a `SourceInfo`), `__call__(state, result)`, `close(state)`
(optional) and `replay` (optional, default False). It sees every result of each source in frame order, with its
people (boxes, track ids, keypoints, smoothed keypoints, 3-D, the frame's events), and may add to `result.extra` and
`person.extra`: the JSONL and MQTT records carry them under `extra`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import Sapiens2StreamError
from ...user_stages import StageConfig, stage_object
from .context import SourceContext


@dataclass(frozen=True)
class SourceInfo:
    """What a user's stage is told of the source it opens for."""

    name: str  # the source's name (several sources), else the pipeline's
    uri: str
    output_dir: Path  # the source's output folder
    live: bool  # a camera or stream (frames may be dropped), not a file
    fps: float | None  # the source's frame rate where it says


class UserStage:
    """A user's stage object behind the runner's stage interface."""

    builtin, scope = False, "source"

    def __init__(self, stage, name: str, after: str) -> None:
        if not callable(stage):
            raise Sapiens2StreamError(f"stage {name!r}: {type(stage).__name__} has no __call__(state, result)")
        self.stage, self.name, self.after = stage, name, after
        self.replay = bool(getattr(stage, "replay", False))

    def enabled(self, options, ctx: SourceContext) -> bool:
        return True

    def check(self, options, ctx: SourceContext) -> None:
        pass

    def open(self, options, ctx: SourceContext):
        opener = getattr(self.stage, "open", None)
        if opener is None:
            return None
        reader = ctx.reader
        return opener(SourceInfo(ctx.label, ctx.source.uri, ctx.out_dir, reader.live, reader.fps or reader.rate))

    def __call__(self, state, result) -> None:
        self.stage(state, result)

    def close(self, state) -> None:
        closer = getattr(self.stage, "close", None)
        if closer is not None:
            closer(state)

    def summary(self, state) -> dict:
        return {}


def api_stage(stage) -> UserStage:
    """A stage object given to the Python API: its `name` (default: its class's, in lower case) and `after`
    (default: events, so that it sees the events and its fields reach every output)."""
    return UserStage(stage, getattr(stage, "name", type(stage).__name__.lower()), getattr(stage, "after", "events"))


def yaml_stage(cfg: StageConfig, where: str) -> UserStage:
    """The stage a `stages:` entry names, made with its options."""
    return UserStage(stage_object(cfg, where), cfg.name, cfg.after)
