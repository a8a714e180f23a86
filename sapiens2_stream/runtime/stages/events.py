"""Events: zones, lines and poses on the smoothed keypoints (`events:`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...events import EventRules
from ...events.options import EventsConfig
from ...events.rules import FEET, ids
from ...io.sink import best_keypoints
from ..results import FrameResult, Person
from .base import Stage, register_stage
from .context import SourceContext

FEET_IDS = np.array(ids(*FEET))


@dataclass
class SourceEvents:
    """A source's event rules, made at its first result (zones in 0-1 of the frame need the frame's size)."""

    cfg: EventsConfig
    patience_s: float
    label: str
    rules: EventRules | None = None


@register_stage("events")
class Events(Stage):
    """The source's event rules: what they find goes with the result to the sinks (events.jsonl, MQTT, webhooks)."""

    section, doc = "events", "zones, lines, dwell, crowding, falls and lying: events with the result"

    Options = EventsConfig
    reports = "event_counts"

    def enabled(self, options: EventsConfig, ctx: SourceContext) -> bool:
        return bool(options)

    def emits(self, options: EventsConfig) -> bool:
        return bool(options)

    def open(self, options: EventsConfig, ctx: SourceContext) -> SourceEvents:
        return SourceEvents(options, ctx.patience_s, ctx.label)

    def __call__(self, state: SourceEvents, result: FrameResult) -> None:
        if state.rules is None:
            h, w = result.frame.rgb.shape[:2]
            state.rules = EventRules(state.cfg, (w, h), state.patience_s)
        rules = state.rules
        world = result.world_from_camera if rules.on_floor else None  # feet found only for floor zones
        people = [(p.track_id, best_keypoints(p), p.keypoint_scores, np.r_[p.box[:2], p.box[:2] + p.box[2:]],
                   feet_on_floor(p, world)) for p in result.people if p.keypoints is not None]  # fmt: skip
        result.events += [{**e, "source": state.label, "frame": result.frame.index}
                          for e in rules.update(result.frame.pts_s, people)]  # fmt: skip
        result.event_rules = rules

    def summary(self, state: SourceEvents) -> dict:
        return {} if state.rules is None else {"event_counts": state.rules.counts()}

    def report(self, state: SourceEvents) -> dict | None:
        """Zones' occupancy, lines' crossings and events by kind (`kinds`) so far."""
        rules = state.rules
        return None if rules is None else {**rules.counts(), "kinds": dict(rules.totals)}


def feet_on_floor(person: Person, world: np.ndarray | None) -> np.ndarray | None:
    """Where a person stands on the floor (world X, Y in metres): the mid-point of their confident feet keypoints in
    3-D, in the 3-D stage's world frame; None without them."""
    if world is None or person.keypoints_3d is None:
        return None
    feet = FEET_IDS
    sure = feet[(person.keypoints_3d_confidence[feet] > 0.5) & np.isfinite(person.keypoints_3d[feet]).all(1)]
    if not len(sure):
        return None
    point = world[:3, :3] @ person.keypoints_3d[sure].mean(0) + world[:3, 3]
    return point[:2]
