"""Live motion capture across a fleet: the cameras of one calibrated group may run on different workers; each
worker sends its group cameras' results through Ray (not a shared file) to one `MocapHub`, a Ray actor the driver
starts on the cluster's head node (which the cluster cannot lose anyway), which makes the moments with the same
`LiveMocap` as a single run and writes OUTPUT/3d/ on the fleet's shared storage.

A worker that dies takes its cameras' results with it: the hub counts them missing (a live camera silent for
`max_skew_s` is never waited for) and goes on with the other views; when the cameras are re-homed or their worker
restarts, their results come again and they rejoin. Live cameras' capture times are their nodes' wall clocks:
keep the nodes' clocks in step (NTP), or the moments pair the wrong frames.
"""

from __future__ import annotations

import logging

from ..runtime.live_mocap import CameraView
from ..runtime.observer import Observer
from ..runtime.stages.group import GroupPlan, GroupStages


class MocapHub:
    """The one place a fleet's group is triangulated (a Ray actor; `offer` calls come from every worker): the run's
    own group stages (triangulate, write_3d and any between) on their own runner, as a single run has them: each
    camera's view is offered to them on the runner's thread, and a stage that raises is off from then on, counted
    in the hub's report and its summary, while the others go on. The hub says nothing itself: the driver says
    what its reports hold (once), so that a failure is not said again by every process that saw it."""

    def __init__(self, plan: GroupPlan) -> None:
        """`plan`: the run's group stages, cut from its configuration by the driver (`pipeline.group_plan`)."""
        logging.getLogger("sapiens2_stream").addHandler(logging.NullHandler())  # (an actor's process of its own)
        self.stages = GroupStages(plan)
        self.stages.start()  # polled there: moments whose cameras went silent still come out

    def offer(self, view: CameraView, camera: str, live: bool) -> None:
        self.stages.offer(view, camera, live)

    def report(self) -> dict:
        """For the driver: the group stages' reports, as a run's console and /metrics read them (triangulate's
        under "3d": the latest moment, its figures and the summary), and the stages that failed."""
        return {"reports": self.stages.reports(), "errors": list(self.stages.errors)}

    def close(self) -> dict:
        """The last moments made and every file complete (the per-person tracks too); what the stages add to the
        summary (`live_mocap`), and the stages that failed (`errors`)."""
        self.stages.ending()
        self.stages.ended()
        return {**self.stages.summary(), "errors": list(self.stages.errors)}


class MocapFeed(Observer):
    """A worker's side: each result of a group camera to the hub, fire and forget (a slow hub never slows a
    camera; a dead one loses the 3-D stream, never the cameras' own outputs)."""

    def __init__(self, hub, group: list[str]) -> None:
        self.hub, self.group = hub, set(group)

    def result(self, result, stream) -> None:
        if stream.label in self.group:
            self.hub.offer.remote(CameraView.of(result), stream.label, stream.live)
