"""What happened: zones, lines, dwell, crowding and falls as events, from tracked people's keypoints.

    from sapiens2_stream.events import EventRules
    rules = EventRules({"zones": {...}, "lines": {...}, "poses": {...}}, frame_size=(w, h))
    events = rules.update(time_s, [(track_id, keypoints [308, 2], scores [308], box_xyxy), ...])
    rules.counts()    # {"zones": {name: occupancy}, "lines": {name: {"in": n, "out": m}}}

- **On the floor.** With the 3-D stage, a zone may be given in metres on the floor instead (`floor_m`: world X, Y;
  the world frame of world.json): a person is where their feet stand, whatever the camera's angle. People passed
  to `update` then carry a fifth item, their feet's (X, Y) on the floor, or None.
- **Anchors.** Where a person is: `feet` (the mid-point of the confident ankles, heels and toes: where they stand,
  whatever their arms or a bag do to the box), `hips`, `box_bottom`, `center`, or any keypoint by name. Polygons and
  lines in pixels, or in 0-1 of the frame when every coordinate is within [0, 1].
- **Zones.** `enter` when a person's anchor has been inside for `min_s`; `exit` (with `dwell_s`, from the first
  frame inside to the first frame outside) when it has been outside for `min_s` or the track has been gone for
  `patience_s`; `loitering` once per visit when the dwell passes `loitering_s`; `crowded` when more than
  `max_people` are inside, `cleared` when no longer. The hysteresis (`min_s`) keeps someone standing on a
  boundary from flooding events: a visit is one visit.
- **Lines.** A person crosses when their anchor, within the segment's span, has been on one side and then stays on
  the other for `min_s`, further than `margin_px` from the line (a dead band: standing on the line counts nothing,
  turning back before crossing counts nothing). `in` is from the right of the directed line (start -> end, as drawn
  on the picture) to its left; `out` the other way; `in:` / `out:` name them in the events.
- **Poses.** `fall`: the trunk goes from upright (within 30 degrees of vertical) to lying (beyond 60 degrees; a trunk
  seen shorter than upright leans along the camera's view by the angle whose cosine is the ratio) with the hips
  dropping by a quarter of the person's upright height, within `fall_s` (1.2 s), and stays down for `down_s`
  (0.6 s; the event's time is when the trunk reached lying): sitting down keeps the trunk upright, bending over
  keeps the hips up, lying down slowly takes longer. The trunk is the smoothed shoulders' and hips' middles, read
  once at least one shoulder and one hip are sure (a model that sees a person lying on a side is unsure of the
  lower ones). `hands_up`: both wrists above the nose by a tenth of the person's height for `hands_s` (0.5 s),
  once until they come down. `lying`: the trunk lying (as for a fall) and the person low (their box under 45% of
  their upright height, or wider than tall for someone never seen upright) for `lying.after_s` (10 s)
  continuously, however they got there (a fall, lying down slowly, already down when first seen): once, then `up`
  with `down_s`, the seconds from lying down to rising, when they rise or leave. Sitting, crouching and bending
  keep the trunk upright or the person tall; a change shorter than `RISE_S` in either direction is a wobble of the
  keypoints, not a change of pose.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from ..config import from_dict
from ..models.metadata import keypoint_index
from .options import EventsConfig, LineConfig, ZoneConfig

FEET = ("left_ankle", "right_ankle", "left_heel", "right_heel", "left_big_toe", "right_big_toe", "left_small_toe",
        "right_small_toe")  # fmt: skip
MIN_SCORE = 0.3
UPRIGHT_TRUNK = 0.85  # the upright size is learnt only while the trunk is this long (not while it leans away)
LOW = 0.45  # lying: the box's height under this share of the person's upright height
RISE_S = 0.5  # lying and rising are said only once they last this long


def ids(*names: str) -> list[int]:
    index = keypoint_index()
    return [index[n] for n in names]


def anchor_point(kind: str, keypoints: np.ndarray, scores: np.ndarray, box: np.ndarray) -> np.ndarray | None:
    """Where a person is by `kind` (see the module), or None when its keypoints are not confident."""
    x0, y0, x1, y1 = box
    if kind == "box_bottom":
        return np.array([(x0 + x1) / 2, y1])
    if kind == "center":
        return np.array([(x0 + x1) / 2, (y0 + y1) / 2])
    chosen = ids(*FEET) if kind == "feet" else ids("left_hip", "right_hip") if kind == "hips" else ids(kind)
    sure = [k for k in chosen if scores[k] >= MIN_SCORE]
    return keypoints[sure].mean(0) if sure else None


def settled(pending: dict, track_id: int, changed: bool, time_s: float, min_s: float) -> float | None:
    """Hysteresis: while a track's state differs from the one it is counted in (`changed`), when that began, once
    it has held for `min_s` (then forgotten: the caller counts the new state); None before that. A return to the
    counted state forgets it."""
    if not changed:
        pending.pop(track_id, None)
        return None
    since = pending.setdefault(track_id, time_s)
    if time_s - since < min_s:
        return None
    del pending[track_id]
    return since


def in_polygon(point: np.ndarray, polygon: np.ndarray) -> bool:
    """Even-odd rule."""
    x, y = point
    inside = False
    for (x0, y0), (x1, y1) in zip(polygon, np.roll(polygon, -1, axis=0), strict=True):
        if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
            inside = not inside
    return inside


@dataclass
class Zone:
    name: str
    polygon: np.ndarray
    anchor: str = "feet"
    loitering_s: float | None = None
    max_people: int | None = None
    min_s: float = 0.3
    on_floor: bool = False  # the polygon is in metres on the floor (world X, Y), the people's feet from the 3-D stage
    inside: dict = field(default_factory=dict)  # track -> (entered at, loitering said)
    pending: dict = field(default_factory=dict)  # track -> since when it has been on the other side of the outline
    crowded: bool = False


@dataclass
class Line:
    name: str
    start: np.ndarray
    end: np.ndarray
    anchor: str = "feet"
    in_name: str = "in"
    out_name: str = "out"
    min_s: float = 0.2
    margin_px: float = 4.0
    side: dict = field(default_factory=dict)  # track -> the side it is counted on (+1 left, -1 right)
    pending: dict = field(default_factory=dict)  # track -> since when it has been on the other side
    counts: dict = field(default_factory=lambda: {"in": 0, "out": 0})


@dataclass
class PoseState:
    history: deque = field(default_factory=lambda: deque(maxlen=120))  # (time, trunk angle, hip y, height)
    upright_height: float | None = None
    upright_trunk: float | None = None  # the shoulders-to-hips length in the picture while upright
    fallen_at: float | None = None  # when the fall began (last upright with the hips up)
    down_since: float | None = None  # when the trunk reached lying
    fall_said: bool = False
    hands_since: float | None = None
    hands_said: bool = False
    lying_since: float | None = None  # when the trunk last lay down (after_s counts from here)
    lying_said: bool = False
    up_since: float | None = None  # when a lying person last got up (rising counts from here)


class EventRules:
    def __init__(self, config: EventsConfig | dict | None, frame_size: tuple[int, int],
                 patience_s: float = 1.0) -> None:  # fmt: skip
        """`config`: the `events:` section (validated here when given as a mapping: a wrong key or value is a
        Sapiens2StreamError naming it); `frame_size` (w, h): zones and lines in 0-1 of the frame scale by it;
        `patience_s`: a track unseen this long has left."""
        if not isinstance(config, EventsConfig):
            config = from_dict(EventsConfig, config or {}, "events")
        self.frame_size = frame_size
        self.patience_s = patience_s
        self.zones = [self._zone(n, z) for n, z in config.zones.items()]
        self.lines = [self._line(n, v) for n, v in config.lines.items()]
        poses = config.poses
        self.fall, self.hands_up = poses.fall, poses.hands_up
        self.lying_after_s = None if poses.lying is None else poses.lying.after_s
        self.fall_s, self.down_s, self.hands_s = poses.fall_s, poses.down_s, poses.hands_s
        self.poses: dict[int, PoseState] = {}
        self.last_seen: dict[int, float] = {}
        self.ids = count(1)
        self.totals: dict[str, int] = {}  # events so far, by kind

    # ------------------------------------------------------------------------------------------- setup

    def _points(self, points, in_picture: bool = True) -> np.ndarray:
        """Points as the schema checked them, in pixels when they were given in 0-1 of the frame."""
        p = np.asarray(points, np.float64)
        if in_picture and (p >= 0).all() and (p <= 1).all():  # fractions of the frame
            p = p * np.asarray(self.frame_size, np.float64)
        return p

    def _zone(self, name: str, spec: ZoneConfig) -> Zone:
        on_floor = spec.floor_m is not None
        polygon = self._points(spec.floor_m if on_floor else spec.polygon, in_picture=not on_floor)
        return Zone(name, polygon, spec.anchor, spec.loitering_s, spec.max_people, spec.min_s, on_floor)

    def _line(self, name: str, spec: LineConfig) -> Line:
        start, end = self._points(spec.points)[:2]
        return Line(name, start, end, spec.anchor, spec.in_name, spec.out_name, spec.min_s, spec.margin_px)

    # ------------------------------------------------------------------------------------------- a frame

    def update(self, time_s: float, people: list) -> list[dict]:
        events: list[dict] = []
        seen = set()
        for track_id, keypoints, scores, box, *floor in people:
            seen.add(track_id)
            self.last_seen[track_id] = time_s
            keypoints, scores, box = np.asarray(keypoints), np.asarray(scores), np.asarray(box, np.float64)
            for zone in self.zones:
                if zone.on_floor:  # where the person stands on the floor, metres (the 3-D stage's feet), if known
                    point = floor[0] if floor and floor[0] is not None else None
                else:
                    point = anchor_point(zone.anchor, keypoints, scores, box)
                if point is not None:
                    self._zone_step(zone, track_id, time_s, in_polygon(point, zone.polygon), events)
            for line in self.lines:
                point = anchor_point(line.anchor, keypoints, scores, box)
                if point is not None:
                    self._line_step(line, track_id, time_s, point, events)
            if self.fall or self.hands_up or self.lying_after_s is not None:
                self._pose_step(track_id, time_s, keypoints, scores, box, events)
        for track_id, last in list(self.last_seen.items()):  # gone longer than the tracker's patience: it left
            if track_id not in seen and time_s - last > self.patience_s:
                for zone in self.zones:
                    if track_id in zone.inside:
                        self._exit(zone, track_id, last, events)
                    zone.pending.pop(track_id, None)
                for line in self.lines:
                    line.side.pop(track_id, None)
                    line.pending.pop(track_id, None)
                state = self.poses.pop(track_id, None)
                if state is not None and state.lying_said:
                    events.append(self._event("up", track_id, last, down_s=round(last - state.lying_since, 3),
                                              left=True))  # fmt: skip
                del self.last_seen[track_id]
        for zone in self.zones:
            self._crowding(zone, time_s, events)
        return events

    def _event(self, kind: str, track_id: int | None, time_s: float, **fields) -> dict:
        self.totals[kind] = self.totals.get(kind, 0) + 1
        return {"id": next(self.ids), "kind": kind, "track_id": track_id, "time_s": round(time_s, 6), **fields}

    def _zone_step(self, zone: Zone, track_id: int, time_s: float, inside: bool, events: list) -> None:
        since = settled(zone.pending, track_id, inside != (track_id in zone.inside), time_s, zone.min_s)
        if since is not None and inside:
            zone.inside[track_id] = [since, False]
            events.append(self._event("enter", track_id, since, zone=zone.name))
        elif since is not None:
            self._exit(zone, track_id, since, events)
        if track_id in zone.inside and zone.loitering_s is not None and not zone.inside[track_id][1]:
            dwell = time_s - zone.inside[track_id][0]
            if dwell >= zone.loitering_s:
                zone.inside[track_id][1] = True
                events.append(self._event("loitering", track_id, time_s, zone=zone.name, dwell_s=round(dwell, 3)))

    def _exit(self, zone: Zone, track_id: int, time_s: float, events: list) -> None:
        entered, _ = zone.inside.pop(track_id)
        events.append(self._event("exit", track_id, time_s, zone=zone.name, dwell_s=round(time_s - entered, 3)))

    def _crowding(self, zone: Zone, time_s: float, events: list) -> None:
        if zone.max_people is None:
            return
        crowded = len(zone.inside) > zone.max_people
        if crowded != zone.crowded:
            zone.crowded = crowded
            events.append(self._event("crowded" if crowded else "cleared", None, time_s, zone=zone.name,
                                      people=len(zone.inside)))  # fmt: skip

    def _line_step(self, line: Line, track_id: int, time_s: float, point: np.ndarray, events: list) -> None:
        direction = line.end - line.start
        length = np.linalg.norm(direction)
        along = float((point - line.start) @ direction) / length**2
        across = float(direction[0] * (point[1] - line.start[1]) - direction[1] * (point[0] - line.start[0])) / length
        if not 0.0 <= along <= 1.0 or abs(across) < line.margin_px:
            line.pending.pop(track_id, None)  # beyond the segment's ends, or on the line: nothing decided
            return
        side = -1 if across > 0 else 1  # image y points down: positive cross product is the right of start->end
        counted = line.side.setdefault(track_id, side)
        since = settled(line.pending, track_id, side != counted, time_s, line.min_s)
        if since is not None:
            line.side[track_id] = side
            direction_name = "in" if side == 1 else "out"
            line.counts[direction_name] += 1
            events.append(self._event("crossing", track_id, since, line=line.name, direction=direction_name,
                                      to=line.in_name if side == 1 else line.out_name,
                                      counts=dict(line.counts)))  # fmt: skip

    def _pose_step(self, track_id, time_s, keypoints, scores, box, events) -> None:
        state = self.poses.setdefault(track_id, PoseState())
        shoulders, hips, wrists, nose = ids("left_shoulder", "right_shoulder"), ids("left_hip", "right_hip"), \
            ids("left_wrist", "right_wrist"), ids("nose")[0]  # fmt: skip
        if (scores[shoulders] < MIN_SCORE).all() or (scores[hips] < MIN_SCORE).all():
            return  # one shoulder and one hip seen is enough: lying on a side, the lower ones are hidden (the
            # smoothed keypoints carry the unsure ones on)
        trunk = keypoints[shoulders].mean(0) - keypoints[hips].mean(0)
        angle = float(np.degrees(np.arctan2(abs(trunk[0]), -trunk[1])))  # 0: upright (shoulders above the hips)
        hip_y = float(keypoints[hips, 1].mean())
        height, length = float(box[3] - box[1]), float(np.linalg.norm(trunk))
        if angle < 30 and (state.upright_trunk is None or length > UPRIGHT_TRUNK * state.upright_trunk):
            state.upright_height = height if state.upright_height is None else 0.9 * state.upright_height + 0.1 * height
            state.upright_trunk = length if state.upright_trunk is None else 0.9 * state.upright_trunk + 0.1 * length
        if state.upright_trunk:  # a trunk shorter than upright leans along the camera's view (away or towards it)
            angle = max(angle, float(np.degrees(np.arccos(min(1.0, length / state.upright_trunk)))))
        state.history.append((time_s, angle, hip_y))
        if self.fall:
            self._fall(state, track_id, time_s, angle, hip_y, events)
        if self.lying_after_s is not None:
            low = height < LOW * state.upright_height if state.upright_height else box[2] - box[0] > height
            self._lying(state, track_id, time_s, angle >= 60 and low, events)
        if self.hands_up and state.upright_height:
            up = (scores[wrists] >= MIN_SCORE).all() and scores[nose] >= MIN_SCORE and \
                (keypoints[wrists, 1] < keypoints[nose, 1] - 0.1 * state.upright_height).all()  # fmt: skip
            if not up:
                state.hands_since, state.hands_said = None, False
            else:
                state.hands_since = state.hands_since if state.hands_since is not None else time_s
                if not state.hands_said and time_s - state.hands_since >= self.hands_s:
                    state.hands_said = True
                    events.append(self._event("hands_up", track_id, state.hands_since))

    def _fall(self, state: PoseState, track_id, time_s, angle, hip_y, events) -> None:
        if angle < 60:  # not lying (any more)
            state.fallen_at, state.down_since, state.fall_said = None, None, False
            return
        if state.down_since is None:
            state.down_since = time_s
        if state.fallen_at is None and time_s - state.down_since <= self.fall_s:
            # lying: was the person upright, hips well higher, less than fall_s before the trunk went down? (the hips
            # may still be dropping in the first frames down)
            for when, was_angle, was_hip in reversed(state.history):
                if state.down_since - when > self.fall_s:
                    break
                if was_angle < 30 and state.upright_height and hip_y - was_hip > state.upright_height / 4:
                    state.fallen_at = when
                    break
        if state.fallen_at is not None and not state.fall_said and time_s - state.down_since >= self.down_s:
            state.fall_said = True
            events.append(self._event("fall", track_id, state.down_since, started_s=round(state.fallen_at, 6)))

    def _lying(self, state: PoseState, track_id, time_s, down: bool, events) -> None:
        if down:
            state.up_since = None
            if state.lying_since is None:
                state.lying_since = time_s
            if not state.lying_said and time_s - state.lying_since >= self.lying_after_s:
                state.lying_said = True
                events.append(self._event("lying", track_id, time_s, since_s=round(state.lying_since, 6)))
            return
        if state.lying_since is None:
            return
        state.up_since = time_s if state.up_since is None else state.up_since
        if time_s - state.up_since < RISE_S:
            return  # a wobble: still lying
        if state.lying_said:
            events.append(self._event("up", track_id, state.up_since,
                                      down_s=round(state.up_since - state.lying_since, 3)))  # fmt: skip
        state.lying_since, state.lying_said, state.up_since = None, False, None

    @property
    def on_floor(self) -> bool:
        """Whether a zone is on the floor (its people need their feet in 3-D)."""
        return any(zone.on_floor for zone in self.zones)

    def counts(self) -> dict:
        return {"zones": {z.name: len(z.inside) for z in self.zones},
                "lines": {line.name: dict(line.counts) for line in self.lines}}  # fmt: skip
