"""A take's Pose2Sim project, made when a run of its cameras ends (`outputs.pose2sim`), wherever the pipeline runs:
the command line, `stream()`, the Python API's `run`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...errors import Sapiens2StreamError
from ...export.options import Pose2SimOutput
from ...export.pose2sim import export_pose2sim
from ...threed.calibration import cameras_named
from .base import GroupStage, register_stage
from .context import GroupContext

log = logging.getLogger("sapiens2_stream")


@dataclass
class Take:
    options: Pose2SimOutput
    ctx: GroupContext
    report: dict | None = None


@register_stage("pose2sim")
class Pose2SimProject(GroupStage):
    """Every source's JSONL (complete once the sources closed) written as one synchronised Pose2Sim project in
    OUTPUT/pose2sim/. An interrupted run makes none: a project is of the whole take. A project that cannot be made
    (say, a calibration that does not name the cameras) is said in one line and in the summary; the sources'
    own outputs stay as they were written."""

    section, doc = "outputs.pose2sim", "the take's cameras as one synchronised Pose2Sim project when the run ends"
    Options = Pose2SimOutput
    files_off = {"enabled": False}

    def enabled(self, options: Pose2SimOutput, ctx: GroupContext) -> bool:
        return options.enabled

    def check(self, options: Pose2SimOutput, ctx: GroupContext) -> None:
        """A calibration that does not name every source (the project pairs them by name)."""
        if options.calibration:
            cameras_named(options.calibration, ctx.folders, "outputs.pose2sim.calibration")

    def open(self, options: Pose2SimOutput, ctx: GroupContext, emit) -> Take:
        return Take(options, ctx)

    def close(self, state: Take) -> None:
        if state.ctx.interrupted():
            return
        p2s, output, folders = state.options, state.ctx.out_dir / "pose2sim", list(state.ctx.folders.values())
        try:
            state.report = {"folder": str(output), **export_pose2sim(folders, output, p2s.skeleton, p2s.calibration,
                                                                     p2s.sync, p2s.fps)}  # fmt: skip
        except Sapiens2StreamError as e:
            log.error("outputs.pose2sim: no project: %s", e)
            state.report = {"folder": str(output), "error": str(e)}

    def summary(self, state: Take) -> dict:
        return {"pose2sim": state.report} if state.report is not None else {}
