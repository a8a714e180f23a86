"""The `events:` section (zones, lines, poses) that the events stage reads; a camera's own `source.events` is
the same section."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from ..config import Above0, AtLeast0, Switch, section, switched_section
from ..models.metadata import pose_metadata

ANCHORS = ("feet", "hips", "box_bottom", "center")  # where a person is, besides any keypoint by name


def check_anchor(anchor: str) -> None:
    if anchor not in ANCHORS and anchor not in pose_metadata().names:
        raise ValueError(f".anchor: {anchor!r} is not one of {', '.join(ANCHORS)} or a keypoint")


def crosses_itself(polygon: list) -> bool:
    """Whether two edges of a polygon that are not neighbours cross."""
    edges = list(zip(polygon, [*polygon[1:], polygon[0]], strict=True))

    def side(a, b, c) -> int:
        cross = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return (cross > 0) - (cross < 0)

    for i, (a, b) in enumerate(edges):
        for j, (c, d) in enumerate(edges):
            if abs(i - j) > 1 and {i, j} != {0, len(edges) - 1}:
                if side(a, b, c) * side(a, b, d) < 0 and side(c, d, a) * side(c, d, b) < 0:
                    return True
    return False


Points = list[Annotated[list[float], Field(min_length=2, max_length=2)]]


@section
class ZoneConfig:
    """A zone (`events.zones.NAME`): who enters, leaves, stays and how many are inside."""

    polygon: Points | None = None  # [x, y] corners: pixels, or 0-1 of the frame when every value is within [0, 1]
    floor_m: Points | None = None  # instead of polygon: [X, Y] corners in metres on the floor (the 3-D stage's
    # world frame): a person is where their feet stand
    anchor: str = "feet"  # where a person is: feet, hips, box_bottom, center or a keypoint's name
    loitering_s: AtLeast0 | None = None  # a `loitering` event once per visit longer than this
    max_people: Annotated[int, Field(ge=0)] | None = None  # `crowded` when more are inside, `cleared` after
    min_s: AtLeast0 = 0.3  # the hysteresis: inside (or outside) this long before it counts

    def __post_init__(self) -> None:
        """The outline's own checks (said as `events.zones.NAME...` by `from_dict`)."""
        if self.polygon is not None and self.floor_m is not None:
            raise ValueError(": give polygon (the picture) or floor_m (metres), not both")
        key = "floor_m" if self.floor_m is not None else "polygon"
        corners = getattr(self, key)
        if corners is None or len(corners) < 3:
            raise ValueError(f".{key}: expected at least 3 [x, y] points")
        if crosses_itself(corners):
            raise ValueError(f".{key}: its edges cross each other")
        check_anchor(self.anchor)


@section
class LineConfig:
    """A line (`events.lines.NAME`): crossings in both directions."""

    points: Points | None = None  # [[x, y], [x, y]]: start and end (pixels or 0-1 of the frame)
    anchor: str = "feet"  # where a person is (as for zones)
    in_name: str = field(default="in", metadata={"alias": "in"})  # what a crossing from the right of start->end to
    # its left is called
    out_name: str = field(default="out", metadata={"alias": "out"})  # and the other way
    min_s: AtLeast0 = 0.2  # on the other side this long before it counts
    margin_px: AtLeast0 = 4.0  # a dead band either side of the line (pixels): standing on it counts nothing

    def __post_init__(self) -> None:
        if self.points is None or len(self.points) < 2:
            raise ValueError(".points: expected at least 2 [x, y] points")
        check_anchor(self.anchor)


@section
class LyingConfig:
    """`events.poses.lying`: someone down on the floor (after a fall the camera missed, or after lying down)."""

    after_s: AtLeast0 = 10.0  # how long the trunk lies, continuously, before `lying` is said


LyingSwitch = Annotated[
    LyingConfig | None,
    BeforeValidator(switched_section, json_schema_input_type=LyingConfig | bool | Literal["on", "off"] | None),
]


@section
class PosesConfig:
    """Poses (`events.poses`): falls, people lying and hands up, from the smoothed keypoints."""

    fall: Switch = False  # a `fall`: the trunk from upright to lying, the hips dropping, within fall_s
    hands_up: Switch = False  # `hands_up`: both wrists above the nose for hands_s
    lying: LyingSwitch = None  # `lying` after after_s down, `up` (seconds down) when they rise or leave; on: 10 s
    fall_s: Above0 = 1.2  # how fast the trunk goes down in a fall
    down_s: AtLeast0 = 0.6  # how long it stays down before the fall is said
    hands_s: AtLeast0 = 0.5  # how long the hands stay up before it is said

    def any(self) -> bool:
        return self.fall or self.hands_up or self.lying is not None


@section(key="events", doc='zones, lines and poses: events.jsonl, MQTT TOPIC/events; see the site\'s page "Events"')
class EventsConfig:
    """Zones, lines and poses (`events:`): events.jsonl, MQTT TOPIC/events, webhooks (the site's page "Events")."""

    zones: dict[str, ZoneConfig] = field(default_factory=dict)  # by name
    lines: dict[str, LineConfig] = field(default_factory=dict)  # by name
    poses: PosesConfig = field(default_factory=PosesConfig)

    def __bool__(self) -> bool:
        """Whether any rule is given (the events stage runs only then)."""
        return bool(self.zones or self.lines or self.poses.any())
