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

from ..runtime.live_mocap import LiveMocap, result_view
from ..runtime.observer import Observer
from ..runtime.stages.group import GroupPlan, GroupStages


class MocapHub:
    """The one place a fleet's group is triangulated (a Ray actor; `add_frame` calls come from every worker): the
    run's own group stages (triangulate, write_3d and any between), as a single run has them."""

    def __init__(self, plan: GroupPlan) -> None:
        """`plan`: the run's group stages, cut from its configuration by the driver (`pipeline.group_plan`)."""
        self.stages = GroupStages(plan)
        self.mocap: LiveMocap = self.stages.state("triangulate")
        self.stages.start()  # polled there: moments whose cameras went silent still come out

    def add_frame(self, camera: str, live: bool, wall_s: float, pts_s: float, keypoints, scores, lifted=None) -> None:
        self.mocap.add_frame(camera, live, wall_s, pts_s, keypoints, scores, lifted)  # under the state's lock

    def report(self) -> dict:
        """For the driver: the triangulate stage's report, as a run's console and /metrics read it (the latest
        moment, its figures and the summary)."""
        return self.stages.reports()["3d"]

    def close(self) -> dict:
        """The last moments made and every file complete (the per-person tracks too); the summary."""
        self.stages.ending()
        self.stages.ended()
        return self.mocap.summary()


class MocapFeed(Observer):
    """A worker's side: each result of a group camera to the hub, fire and forget (a slow hub never slows a
    camera; a dead one loses the 3-D stream, never the cameras' own outputs)."""

    def __init__(self, hub, group: list[str]) -> None:
        self.hub, self.group = hub, set(group)

    def result(self, result, stream) -> None:
        if stream.label in self.group:
            self.hub.add_frame.remote(stream.label, stream.live, result.frame.wall_s, result.frame.pts_s,
                                      *result_view(result))  # fmt: skip
