"""A frame's result as the outputs show it, from one place: the fields every view shares (source, frame, times,
per person track, box and score, the frame's part-pixel counts and what users' stages added) and one function per
view built on them: `jsonl_record` (results.jsonl, the Python API's `Result.to_dict()`), `mqtt_message` (MQTT
TOPIC/frames: smoothed keypoints as [x, y, score], all 308, COCO-17 or none). A field added here reaches every view
that shows it.
"""

from __future__ import annotations

import numpy as np

from ..models.metadata import pose_metadata
from .sink import METRE_DIGITS, PTS_DIGITS, SCORE_DIGITS, best_keypoints, rounded, rounded_points, seg_counts


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
            person.update(keypoints_3d=rounded_points(p.keypoints_3d, METRE_DIGITS), keypoints_3d_frame="camera",
                          keypoints_3d_confidence=rounded(p.keypoints_3d_confidence, SCORE_DIGITS))
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
