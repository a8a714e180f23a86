"""A take's Pose2Sim project, made when a run of its cameras ends (`outputs.pose2sim`), wherever the pipeline runs:
the command line, `stream()`, the Python API's `run`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ...errors import Sapiens2StreamError
from ...export.options import Pose2SimOutput
from ...export.pose2sim import export_pose2sim
from ...threed.calibration import read_calibration
from .base import GroupStage, register_stage

log = logging.getLogger("sapiens2_stream")


@dataclass
class Take:
    cfg: object
    interrupted: object  # () -> bool
    report: dict | None = None


@register_stage("pose2sim")
class Pose2SimProject(GroupStage):
    """Every source's JSONL (complete once the sources closed) written as one synchronised Pose2Sim project in
    OUTPUT/pose2sim/. An interrupted run makes none: a project is of the whole take. A project that cannot be made
    (say, a calibration that does not name the cameras) is said in one line and in the summary; the sources'
    own outputs stay as they were written."""

    section, doc = "outputs.pose2sim", "the take's cameras as one synchronised Pose2Sim project when the run ends"
    Options = Pose2SimOutput

    def enabled(self, cfg) -> bool:
        return cfg.outputs.pose2sim.enabled

    def check(self, cfg) -> None:
        """A calibration that does not name every source (the project pairs them by name)."""
        calibration = cfg.outputs.pose2sim.calibration
        if calibration:
            cameras = read_calibration(calibration)
            absent = [c.source.name for c in cfg.per_source() if c.source.name not in cameras]
            if absent:
                raise Sapiens2StreamError(f"outputs.pose2sim.calibration: no camera named {', '.join(absent)} in "
                                          f"{calibration} (it has {', '.join(cameras)})")  # fmt: skip

    def open(self, ctx, emit) -> Take:
        return Take(ctx.cfg, ctx.interrupted)

    def close(self, state: Take) -> None:
        if state.interrupted():
            return
        cfg, p2s = state.cfg, state.cfg.outputs.pose2sim
        output = Path(cfg.outputs.dir) / "pose2sim"
        folders = [Path(c.outputs.dir) for c in cfg.per_source()]
        try:
            state.report = {"folder": str(output), **export_pose2sim(folders, output, p2s.skeleton, p2s.calibration,
                                                                     p2s.sync, p2s.fps)}  # fmt: skip
        except Sapiens2StreamError as e:
            log.error("outputs.pose2sim: no project: %s", e)
            state.report = {"folder": str(output), "error": str(e)}

    def summary(self, state: Take) -> dict:
        return {"pose2sim": state.report} if state.report is not None else {}
