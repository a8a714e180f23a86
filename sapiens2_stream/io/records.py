"""A frame's result as the outputs show it, from one place: the fields every view shares (source, frame, times,
per person track, box and score, the frame's part-pixel counts and what users' stages added) and one function per
view built on them: `jsonl_record` (results.jsonl, the Python API's `Result.to_dict()`), `mqtt_message` (MQTT
TOPIC/frames: smoothed keypoints as [x, y, score], all 308, COCO-17 or none). A field added here reaches every view
that shows it.

And the one way back: what reads a run's records (resume, the track files, the Pose2Sim export, the angles and
kinematics commands, the labeller, calibration from people, ...) reads them through `read_frames` and
`read_moments` as typed records, `RecordedFrame` of `RecordedPerson` (results.jsonl) and `RecordedMoment` of
`RecordedMomentPerson` (a camera group's 3d/keypoints_3d.jsonl), never by string keys of its own. How a record
rounds its numbers is here too (`rounded`, `as_recorded`): what keeps the state built from results (the smoother's,
the angles') reproducible from the records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import Sapiens2StreamError
from ..models.metadata import NUM_SEG_CLASSES, pose_metadata
from .sink import best_keypoints

PX_DIGITS, SCORE_DIGITS, PTS_DIGITS, METRE_DIGITS = 2, 4, 6, 4  # what the JSONL keeps: 0.01 px, 1e-4 score, 1 us,
# 0.1 mm


def rounded(a: np.ndarray | None, digits: int = PX_DIGITS) -> list | None:
    """An array as a JSON list, rounded (0.01 px by default)."""
    return None if a is None else np.round(np.asarray(a, np.float64), digits).tolist()


def rounded_points(a: np.ndarray, digits: int) -> list:
    """[N, D] points as JSON lists, rounded, a point with no value (NaN) as null."""
    return [None if not np.isfinite(p).all() else [round(float(v), digits) for v in p] for p in np.asarray(a)]


def as_recorded(pts_s: float, keypoints: np.ndarray, scores: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """A person's time, keypoints and scores exactly as the JSONL records them. The smoother takes these, so a
    resumed run that replays the records reproduces its state bit for bit (a score rounded across the gating
    threshold would otherwise change it)."""
    return (round(pts_s, PTS_DIGITS), np.round(np.asarray(keypoints, np.float64), PX_DIGITS),
            np.round(np.asarray(scores, np.float64), SCORE_DIGITS))  # fmt: skip


def seg_counts(labels: np.ndarray) -> dict[int, int]:
    """Pixels per body-part class (the classes present)."""
    counts = np.bincount(labels.ravel(), minlength=NUM_SEG_CLASSES)
    return {int(c): int(n) for c, n in enumerate(counts) if n}


def frame_fields(result, source: str) -> dict:
    """Which frame of which source, when: its index, timestamp (s) and wall clock at capture."""
    frame = result.frame
    return {"source": source, "frame": frame.index, "pts": round(frame.pts_s, PTS_DIGITS),
            "wall": round(frame.wall_s, 3)}  # fmt: skip


def person_fields(p) -> dict:
    """Who and where: the track, the COCO xywh box (px) and the detection score."""
    return {"track_id": p.track_id, "box": rounded(p.box), "score": round(float(p.score), 4)}


def frame_extras(result) -> dict:
    """The part labels' pixel counts (when seg ran) and what users' stages added to the frame."""
    out: dict = {}
    if result.seg is not None:
        out["seg_pixels"] = seg_counts(result.seg)
    if getattr(result, "extra", None):
        out["extra"] = result.extra
    return out


def person_extras(p) -> dict:
    """What stages added about the person: the built-in stages' fields each under its name (the angles stage's
    `angles`), users' under `extra`."""
    out = {name: value for name, value in getattr(p, "fields", {}).items() if value is not None}
    return {**out, "extra": p.extra} if getattr(p, "extra", None) else out


def jsonl_record(result, source_id: str, model_ids: dict[str, str]) -> dict:
    """The JSONL line's object: everything, raw and smoothed keypoints at 0.01 px, 3-D in metres."""
    people = []
    for p in result.people:
        person = {**person_fields(p), "keypoints": rounded(p.keypoints),
                  "keypoint_scores": rounded(p.keypoint_scores, SCORE_DIGITS),
                  "keypoints_smoothed": rounded(p.smoothed)}  # fmt: skip
        if getattr(p, "keypoints_3d", None) is not None:
            person.update(
                keypoints_3d=rounded_points(p.keypoints_3d, METRE_DIGITS),
                keypoints_3d_frame="camera",
                keypoints_3d_confidence=rounded(p.keypoints_3d_confidence, SCORE_DIGITS),
            )
        people.append({**person, **person_extras(p)})
    head = frame_fields(result, source_id)
    return {**head, "models": model_ids, "flip": result.flip, "people": people, **frame_extras(result)}


COCO17 = list(pose_metadata().coco17)


def mqtt_message(result, source_name: str, keypoints: str) -> dict:
    """The MQTT frame message: compact, the keypoints a subscriber draws (smoothed where the smoother ran) as
    [x, y, score] at 0.001 px, `keypoints` of them: "all", "coco17" or "none"."""
    people = []
    for p in result.people:
        person = person_fields(p)
        kp = best_keypoints(p)
        if keypoints != "none" and kp is not None:
            index = COCO17 if keypoints == "coco17" else slice(None)
            xy, sc = np.asarray(kp)[index], np.asarray(p.keypoint_scores)[index]
            person["keypoints"] = np.round(np.column_stack([xy, sc]), 3).tolist()
        people.append({**person, **person_extras(p)})
    return {**frame_fields(result, source_name), "people": people, **frame_extras(result)}


# ------------------------------------------------------------------------------------------------- read back


def parse_lines(data: bytes) -> tuple[list[dict], int]:
    """The complete, valid JSON lines at the start of a JSONL's bytes, and where they end."""
    records, good_end, pos = [], 0, 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            break
        try:
            records.append(json.loads(data[pos:end]))
        except json.JSONDecodeError:
            break
        good_end = pos = end + 1
    return records, good_end


def read_records(path: Path) -> list[dict]:
    """A JSONL's whole lines (a run cut short may end in half a line)."""
    return parse_lines(path.read_bytes())[0]


def read_complete_lines(path: Path) -> list[dict]:
    """A JSONL's whole lines, the file cut back to its last complete, valid line (what `--resume` continues)."""
    data = path.read_bytes()
    records, good_end = parse_lines(data)
    if good_end != len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return records


def as_points(values: list | None, width: int) -> np.ndarray | None:
    """A recorded list of points as [N, width] float64, a null point as NaN; None stays None."""
    if values is None:
        return None
    return np.array([[np.nan] * width if v is None else v for v in values], np.float64).reshape(-1, width)


def as_values(values: list | None) -> np.ndarray | None:
    return None if values is None else np.asarray(values, np.float64)


@dataclass(frozen=True)
class RecordedPerson:
    """A person of a results.jsonl line, as `jsonl_record` wrote them: arrays as recorded (float64), None where
    the line has none; `fields`: what stages added (the angles stage's `angles`, users' `extra`, ...)."""

    track_id: int
    box: np.ndarray  # COCO xywh px
    score: float
    keypoints: np.ndarray | None  # [308, 2] px
    keypoint_scores: np.ndarray | None  # [308]
    smoothed: np.ndarray | None  # [308, 2] px, where the smoother ran
    keypoints_3d: np.ndarray | None = None  # [308, 3] m in the camera's frame, NaN where unknown (the 3-D stage)
    keypoints_3d_confidence: np.ndarray | None = None  # [308]
    fields: dict = field(default_factory=dict)

    @property
    def best(self) -> np.ndarray | None:
        """The smoothed keypoints where the smoother ran, else the raw ones (as `best_keypoints`)."""
        return self.smoothed if self.smoothed is not None else self.keypoints


@dataclass(frozen=True)
class RecordedFrame:
    """A results.jsonl line: which frame of which source, when, with which models, and its people. `line`: the
    line itself, for what hands it on unchanged."""

    source: str
    frame: int
    pts: float
    people: list[RecordedPerson]
    models: dict = field(default_factory=dict)
    flip: dict = field(default_factory=dict)
    line: dict = field(default_factory=dict, repr=False)


SHOWN_PERSON = {"track_id", "box", "score", "keypoints", "keypoint_scores", "keypoints_smoothed", "keypoints_3d",
                "keypoints_3d_frame", "keypoints_3d_confidence"}  # fmt: skip


def recorded_frame(line: dict) -> RecordedFrame:
    """One results.jsonl line (parsed) as its typed record."""
    people = [RecordedPerson(p["track_id"], np.asarray(p["box"], np.float64), float(p["score"]),
                             as_points(p.get("keypoints"), 2), as_values(p.get("keypoint_scores")),
                             as_points(p.get("keypoints_smoothed"), 2), as_points(p.get("keypoints_3d"), 3),
                             as_values(p.get("keypoints_3d_confidence")),
                             {k: v for k, v in p.items() if k not in SHOWN_PERSON})
              for p in line.get("people", [])]  # fmt: skip
    return RecordedFrame(line.get("source", ""), int(line["frame"]), float(line["pts"]), people,
                         line.get("models") or {}, line.get("flip") or {}, line)  # fmt: skip


@dataclass(frozen=True)
class RecordedMomentPerson:
    """A person of a camera group's moment (3d/keypoints_3d.jsonl), as the triangulate stage wrote them; `fields`:
    what the group stages added (`angles`, `kinematics`, `kinematics_why`)."""

    id: int
    keypoints_3d: np.ndarray  # [308, 3] m in the calibration's world (Z up), NaN where not triangulated
    confidence: np.ndarray  # [308]
    views: list = field(default_factory=list)
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedMoment:
    time: float
    views: list[str]
    people: list[RecordedMomentPerson]


SHOWN_MOMENT_PERSON = {"id", "keypoints_3d", "confidence", "views"}


def recorded_moment(line: dict) -> RecordedMoment:
    """One 3d/keypoints_3d.jsonl line (parsed) as its typed record."""
    people = [RecordedMomentPerson(p["id"], as_points(p["keypoints_3d"], 3), np.asarray(p["confidence"], np.float64),
                                   p.get("views") or [], {k: v for k, v in p.items() if k not in SHOWN_MOMENT_PERSON})
              for p in line.get("people", [])]  # fmt: skip
    return RecordedMoment(float(line["time"]), line.get("views") or [], people)


def read_frames(path: Path, cut: bool = False) -> list[RecordedFrame]:
    """A results.jsonl's whole lines (a run cut short may end in half a line), typed; a line that is not a frame's
    record is one clear error. `cut`: the file is also cut back to them (what `--resume` continues)."""
    what = "a run's results.jsonl (every line a frame with its frame, pts and people)"
    return typed(path, cut, recorded_frame, what)


def read_moments(path: Path, cut: bool = False) -> list[RecordedMoment]:
    """A camera group's 3d/keypoints_3d.jsonl's whole lines, typed (`cut`: as `read_frames`)."""
    what = "a camera group's keypoints_3d.jsonl (every line a moment with its time and people)"
    return typed(path, cut, recorded_moment, what)


def typed(path: Path, cut: bool, reader, what: str) -> list:
    out = []
    for number, line in enumerate(read_complete_lines(path) if cut else read_records(path), 1):
        try:
            out.append(reader(line))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise Sapiens2StreamError(f"{path}: line {number} is not {what}: {type(e).__name__} {e}") from None
    return out
