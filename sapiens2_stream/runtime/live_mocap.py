"""Live motion capture in a run: the sources of one calibrated group triangulated as their results arrive (the
`threed:` section with a calibration naming two cameras or more).

Each camera's results wait in a queue by capture time (a live camera's wall clock at capture, a file's own
timestamps moved by its offset: `threed.offsets_s`, else from the soundtracks by `threed.sync`, as `export
pose2sim --sync audio` finds them). The earliest waiting result anchors a moment; every other camera gives its
result nearest that time within `max_skew_s` (default: half the fastest camera's frame interval), and the moment
is made as soon as each camera has either shown a later result or stayed silent for `max_skew_s` since the anchor
arrived: a stalled or dead camera never holds the others back longer than that, and it counts as missing in the
status. The moment goes through `threed.Triangulator`, then to the group stages after `triangulate` (the
`write_3d` stage: OUTPUT/3d/keypoints_3d.jsonl in the world frame of the calibration, metres, MQTT TOPIC/3d, the
VMC and OSC targets, and at the end TRC / C3D / BVH per person in OUTPUT/3d/tracks_3d/); /metrics (people, views
per person, reprojection error, latency) and the console's 3-D view read this state.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..config import DEFAULT_FPS
from ..errors import Sapiens2StreamError
from ..io.options import SourceConfig
from ..io.records import RecordedMoment, recorded_moment
from ..io.sink import best_keypoints
from ..io.soundtracks import sound_offsets, soundtrack
from ..io.source_kinds import source_kind
from ..threed import Triangulator
from ..threed.calibration import read_calibration
from ..threed.options import ThreeDConfig

MOMENTS = Path("3d") / "keypoints_3d.jsonl"  # a group's moments, in the run's output folder


def triangulation_group(t: ThreeDConfig, sources: Sequence[SourceConfig]) -> list[str]:
    """The sources (`sources:`) triangulated together: `threed.cameras`, else every source the calibration names
    (none when fewer than two)."""
    if not t.calibration or not sources:
        return []
    names = [s.name for s in sources]
    cameras = read_calibration(t.calibration)
    group = list(t.cameras) if t.cameras else [n for n in names if n in cameras]
    missing = [n for n in group if n not in cameras or n not in names]
    if missing:
        raise Sapiens2StreamError(f"threed.cameras: {', '.join(missing)} not both a source and a camera of "
                                  f"{t.calibration}")  # fmt: skip
    return group if len(group) >= 2 else []


def checked_group(t: ThreeDConfig, sources: Sequence[SourceConfig]) -> list[str]:
    """`triangulation_group`, its `threed.offsets_s` checked against it: what building a pipeline refuses."""
    group = triangulation_group(t, sources)
    unknown = sorted(set(t.offsets_s) - set(group)) if group else []
    if unknown:
        raise Sapiens2StreamError(f"threed.offsets_s: {', '.join(unknown)} not a camera of the group "
                                  f"({', '.join(group)})")  # fmt: skip
    return group


def file_offsets(t: ThreeDConfig, sources: Sequence[SourceConfig], group: list[str]) -> tuple[dict[str, float], str]:
    """The group's file cameras' time offsets (camera time t is the group's t + offset) and how they were found:
    `threed.offsets_s` over what the soundtracks say (`threed.sync`); live cameras go by capture time."""
    files = {s.name: Path(s.uri) for s in sources if s.name in group and source_kind(s).name == "file"}
    found: dict[str, float] = {}
    if t.sync != "none" and len(files) >= 2:
        try:
            offsets = sound_offsets({name: soundtrack(path) for name, path in files.items()}, 1 / 30, t.sync)
        except ValueError as e:
            raise Sapiens2StreamError(f"threed.sync audio: {e}") from None
        found = {name: o.offset_s for name, o in offsets.items()}
    method = "given" if t.offsets_s else "audio" if found else "none"
    return {name: 0.0 for name in files} | found | dict(t.offsets_s), method


def result_view(result) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A result's people as one camera's view: keypoints [P, 308, 2] (smoothed where smoothing ran), scores
    [P, 308], and where the single-camera 3-D stage ran, their lifted keypoints [P, 308, 3] (camera frame, NaN where
    not known), else None."""
    people = [p for p in result.people if p.keypoints is not None]
    keypoints = np.array([best_keypoints(p) for p in people])
    scores = np.array([p.keypoint_scores for p in people]).reshape(-1, 308)
    lifted = None
    if people and all(p.keypoints_3d is not None for p in people):
        lifted = np.array([np.where((p.keypoints_3d_confidence > 0)[:, None], p.keypoints_3d, np.nan) for p in people])
    return keypoints.reshape(-1, 308, 2), scores, lifted


@dataclass
class CameraView:
    """One camera's result as the group needs it: its capture times and its people's keypoints (`result_view`).
    A fleet's worker sends its hub this, not the whole result."""

    wall_s: float
    pts_s: float
    keypoints: np.ndarray
    scores: np.ndarray
    lifted: np.ndarray | None = None

    @classmethod
    def of(cls, result) -> CameraView:
        """A result's view (a view already made: itself)."""
        if isinstance(result, CameraView):
            return result
        return cls(result.frame.wall_s, result.frame.pts_s, *result_view(result))


@dataclass
class Moment:
    """One moment of a camera group: the people in metres (world frame of the calibration) from the views that
    came within `max_skew_s`. `people`: `threed.Triangulator`'s (id, xyz [308, 3], confidence, views, lifted,
    error_px); `record`: what OUTPUT/3d/keypoints_3d.jsonl, MQTT TOPIC/3d and the console get (a group stage
    between triangulate and write_3d may add to it, e.g. under a person's `extra`)."""

    time_s: float
    views: list[str]
    people: list
    record: dict

    @cached_property
    def recorded(self) -> RecordedMoment:
        """The moment as a reader of OUTPUT/3d/keypoints_3d.jsonl gets it (rounded as written): what the group
        stages compute from, so that the commands on the run's files give their values."""
        return recorded_moment(self.record)


class LiveMocap:
    """The triangulate stage's state: results wait by capture time, moments are made and triangulated, and each
    goes to `emit` (the group stages after triangulate: write_3d writes it)."""

    def __init__(self, t: ThreeDConfig, sources: Sequence[SourceConfig], group: list[str],
                 rates: dict[str, float | None], emit: Callable[[Moment], None]) -> None:  # fmt: skip
        cameras = read_calibration(t.calibration)
        self.group, self.emit = group, emit
        self.triangulator = Triangulator({name: cameras[name] for name in group})
        fastest = max((r for r in rates.values() if r), default=DEFAULT_FPS)
        self.max_skew_s = 0.5 / fastest if t.max_skew_s == "auto" else float(t.max_skew_s)
        self.offsets, self.sync = file_offsets(t, sources, group)
        self.waiting: dict[str, deque] = {name: deque() for name in group}  # (time, view, arrived): view as
        # Triangulator.update takes it, (keypoints, scores) or (keypoints, scores, lifted)
        live = {s.name: source_kind(s).live for s in sources}
        self.live = {name: live.get(name, False) for name in group}  # a file lags, never stalls: wait for it
        self.closed: set[str] = set()
        self.lock = threading.Lock()
        self.moments = 0
        self.ids: set[int] = set()  # every person triangulated
        self.missing = {name: 0 for name in group}
        self.late = {name: 0 for name in group}  # results that came after their moment was made without them
        self.made_until = -np.inf  # the time of the latest moment made
        self.missed_last: set[str] = set()  # the cameras that latest moment went without
        self.latency_ms: deque[float] = deque(maxlen=1000)
        self.last = {"people": 0, "views_per_person": 0.0, "error_px": float("nan")}  # the latest moment, for /metrics
        self.latest: dict | None = None  # the latest moment's record, for the console's 3-D view

    def resume(self, moments: list[RecordedMoment]) -> None:
        """`--resume`: the interrupted run's moments: counted, their people's ids go on (those seen in its last
        second are tracked on from where they were), and a result from before its last moment is late."""
        with self.lock:
            self.triangulator.continue_from(moments)
            self.moments += len(moments)
            self.ids.update(p.id for m in moments for p in m.people)
            self.made_until = moments[-1].time if moments else self.made_until

    def source_closed(self, camera: str) -> None:
        with self.lock:
            self.closed.add(camera)
        self.poll()

    def result(self, result, camera: str, live: bool) -> None:
        """A source's result (or its `CameraView`), if it is a camera of the group."""
        if camera in self.waiting:
            view = CameraView.of(result)
            self.add_frame(camera, live, view.wall_s, view.pts_s, view.keypoints, view.scores, view.lifted)

    # ------------------------------------------------------------------------------------------- moments

    def add_frame(self, camera: str, live: bool, wall_s: float, pts_s: float, keypoints: np.ndarray,
                  scores: np.ndarray, lifted: np.ndarray | None = None) -> None:  # fmt: skip
        """A camera's result by its capture times: a live camera's wall clock at capture, a file's timestamp moved
        by its offset."""
        when = wall_s if live else pts_s + self.offsets.get(camera, 0.0)
        self.add(camera, when, keypoints, scores, lifted=lifted)

    def add(self, camera: str, time_s: float, keypoints: np.ndarray, scores: np.ndarray,
            arrived: float | None = None, lifted: np.ndarray | None = None) -> None:  # fmt: skip
        """One camera's result at capture time `time_s` (`arrived`: when it came, default now; `lifted`: its
        people's 3-D keypoints from its pointmap, camera frame, as `Triangulator.update` takes them)."""
        arrived = time.monotonic() if arrived is None else arrived
        with self.lock:
            if time_s < self.made_until or (camera in self.missed_last and time_s - self.made_until <= self.max_skew_s):
                self.late[camera] += 1  # its moment went out without it: not a moment of its own
                return
            view = (keypoints, scores) if lifted is None else (keypoints, scores, lifted)
            self.waiting[camera].append((time_s, view, arrived))
            self._make_ready(arrived)

    def poll(self, now: float | None = None) -> None:
        """Make the moments whose wait is over (a camera silent for `max_skew_s`)."""
        with self.lock:
            self._make_ready(time.monotonic() if now is None else now)

    def flush(self) -> None:
        """Every moment still waiting, with what there is (the end of input)."""
        with self.lock:
            self._make_ready(np.inf)

    def _make_ready(self, now: float) -> None:
        while True:
            anchor = min((q[0] for q in self.waiting.values() if q), key=lambda r: r[0], default=None)
            if anchor is None:
                return
            when, arrived = anchor[0], anchor[2]
            waited = now - arrived >= self.max_skew_s
            for name, queue in self.waiting.items():  # each camera: a later result shown, or no use waiting
                if not (any(r[0] >= when for r in queue) or name in self.closed or (self.live[name] and waited)):
                    return
            views, latest = {}, arrived
            for name, queue in self.waiting.items():
                near = [r for r in queue if abs(r[0] - when) <= self.max_skew_s]
                if near:
                    chosen = min(near, key=lambda r: abs(r[0] - when))
                    views[name] = chosen[1]
                    latest = max(latest, chosen[2])
                    while queue and queue[0][0] <= chosen[0]:
                        queue.popleft()
                else:
                    self.missing[name] += 1
            self.made_until, self.missed_last = when, set(self.waiting) - set(views)
            self._moment(when, views, latest)

    def _moment(self, when: float, views: dict, latest_arrival: float) -> None:
        people = self.triangulator.update(when, {n: v for n, v in views.items() if len(v[0])})
        self.moments += 1
        self.ids.update(p.id for p in people)
        self.latency_ms.append((time.monotonic() - latest_arrival) * 1000 if np.isfinite(latest_arrival) else 0.0)
        errors = [p.error_px for p in people if np.isfinite(p.error_px)]
        self.last = {"people": len(people), "views_per_person": float(np.mean([len(p.views) for p in people]))
                     if people else 0.0, "error_px": float(np.mean(errors)) if errors else float("nan")}  # fmt: skip
        record = {"time": round(when, 6), "views": sorted(views), "people": [
            {"id": p.id, "views": p.views, "lifted": p.lifted,
             "error_px": None if not np.isfinite(p.error_px) else round(p.error_px, 2),
             "keypoints_3d": [None if not np.isfinite(x).all() else [round(float(v), 4) for v in x] for x in p.xyz],
             "confidence": [round(float(c), 4) for c in p.confidence]} for p in people]}  # fmt: skip
        self.emit(Moment(when, sorted(views), people, record))
        self.latest = record

    def summary(self) -> dict:
        latency = np.array(self.latency_ms) if self.latency_ms else np.zeros(1)
        return {"cameras": self.group, "max_skew_ms": round(self.max_skew_s * 1000, 1), "moments": self.moments,
                "offsets_s": {name: round(o, 4) for name, o in self.offsets.items()}, "sync": self.sync,
                "moments_missing": self.missing, "late_results": self.late, "people": len(self.ids),
                "latency_ms": {"p50": round(float(np.percentile(latency, 50)), 1),
                               "p95": round(float(np.percentile(latency, 95)), 1)}}  # fmt: skip
