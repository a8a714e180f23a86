"""Each track's angles as frames come: 2-D from the image keypoints, 3-D where the person is in metres, each masked
where its keypoints are unsure (null, with the reason), unwrapped, filtered live, checked against the person's own
bone lengths, and fed to the gait detectors. The same code serves the live stage and `sapiens2-stream angles` over a
run's files, so both give the same values for the same frames."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..models.metadata import pose_metadata
from .anatomical import BONE_ENDS, BONE_NAMES, BONES_OF, NAMES_3D, anatomical_angles, cross, unit
from .filters import LiveFilter, design, unwrap_to
from .gait import FootEvents
from .options import AnglesConfig
from .planar import HALF_TURN, NAMES_2D, facing, planar_angles, weakest
from .points import named_points

BONE_SAMPLES = 15  # a track's bone lengths: the median of its first this many sure frames
BONES_USED = [BONES_OF[n] for n in NAMES_3D]  # per 3-D angle, the bones it uses
PERIOD_2D = np.array([180.0 if n in HALF_TURN else 360.0 for n in NAMES_2D])
_KP = {n: i for i, n in enumerate(pose_metadata().names)}
# the gait's keypoints, in this order: heel and big toe of each foot, the hips, then each leg's hip, knee, ankle
GAIT_IDS = [_KP[n] for n in ("right_heel", "right_big_toe", "left_heel", "left_big_toe", "left_hip", "right_hip",
                             *(f"{s}_{j}" for s in ("left", "right") for j in ("hip", "knee", "ankle")))]  # fmt: skip


@dataclass
class Seen:
    """One person in one frame, as the angles read them."""

    track_id: int
    keypoints: np.ndarray | None = None  # [308, 2] pixels (smoothed where the smoother ran)
    scores: np.ndarray | None = None  # [308]
    keypoints_3d: np.ndarray | None = None  # [308, 3] metres
    confidence_3d: np.ndarray | None = None  # [308]


@dataclass
class Track:
    """What one track keeps: its side, its angles' last values and filters, its bones, its gait and its rows."""

    side: str | None = None
    frames: int = 0  # frames with angles
    sides: dict = field(default_factory=dict)  # how often each side was seen
    last_2d: np.ndarray = field(default_factory=lambda: np.full(len(NAMES_2D), np.nan))
    last_3d: np.ndarray = field(default_factory=lambda: np.full(len(NAMES_3D), np.nan))
    filters: dict = field(default_factory=dict)
    bone_samples: list = field(default_factory=list)
    bones: np.ndarray | None = None  # [len(BONE_NAMES)] metres, once scaled
    gait: FootEvents = field(default_factory=FootEvents)
    pelvis: list = field(default_factory=list)  # (time, [3]) in metres, for the walking speed
    rows: list = field(default_factory=list)  # (time, frame, side, 2-D [A2] or None, 3-D [A3] or None, confidence)


class TrackAngles:
    """The angles of one source's (or one camera group's) tracks, frame by frame."""

    def __init__(self, cfg: AnglesConfig, fps: float) -> None:
        self.cfg, self.fps = cfg, fps
        self.sos = design(cfg.order, cfg.cutoff_hz, fps) if cfg.filter == "butterworth" else None
        self.tracks: dict[int, Track] = {}
        self.ended: dict[int, Track] = {}
        self.steps_found = 0  # gait events so far (their ids: gait-1, gait-2, ...)

    def track(self, track_id: int) -> Track:
        t = self.tracks.get(track_id)
        if t is None:
            t = self.tracks[track_id] = Track()
        return t

    def end(self, track_id: int) -> None:
        """A track that ended: its rows wait for the files."""
        if track_id in self.tracks:
            self.ended[track_id] = self.tracks.pop(track_id)

    def all_tracks(self) -> dict[int, Track]:
        return {**self.ended, **self.tracks}

    def frame(self, time_s: float, frame: int, people: list[Seen], up: np.ndarray | None) -> tuple[list, list]:
        """The angles of one frame's people ({"2d", "3d", "confidence", "why", "side"}, and "up" with 3-D: the
        floor's up they stood on; None for a person without keypoints) and the gait events found (dicts). `up`: the
        floor's up in the frame of the people's 3-D keypoints, None where no floor is known."""
        records: list = [None] * len(people)
        events: list = []
        flat = [i for i, p in enumerate(people) if p.keypoints is not None]
        if flat:
            kp = np.stack([people[i].keypoints for i in flat])
            sc = np.stack([people[i].scores for i in flat])
            sides = [self.side_of(people[i].track_id, kp[j], sc[j]) for j, i in enumerate(flat)]
            values, conf = planar_angles(kp, sc, sides)
            _, named_scores = named_points(kp, sc)
            for j, i in enumerate(flat):
                records[i] = self.planar(people[i].track_id, values[j], conf[j], named_scores[j], sides[j])
        deep = [i for i, p in enumerate(people) if p.keypoints_3d is not None]
        if deep:
            kp3 = np.stack([np.nan_to_num(people[i].keypoints_3d, nan=0.0) for i in deep])
            c3 = np.stack([np.where(np.isfinite(people[i].keypoints_3d).all(1), people[i].confidence_3d, 0.0)
                           for i in deep])  # fmt: skip
            values, conf, why = anatomical_angles(kp3, c3, up)
            for j, i in enumerate(deep):
                record = records[i] or {"2d": {}, "3d": {}, "confidence": {}, "why": {}, "side": None}
                record["up"] = None if up is None else [float(v) for v in up]  # the floor's up they stood on
                records[i] = self.anatomical(people[i].track_id, kp3[j], c3[j], values[j], conf[j], why[j], record)
        for i, p in enumerate(people):
            if records[i] is None:
                continue
            t = self.track(p.track_id)
            r = records[i]
            t.frames += 1
            t.sides[r["side"]] = t.sides.get(r["side"], 0) + 1
            t.rows.append((time_s, frame, r["side"], r.pop("_2d", None), r.pop("_3d", None), dict(r["confidence"])))
            if self.cfg.gait:
                events += self.steps(t, p, time_s, frame, up, records[i]["side"])
        return records, events

    # ------------------------------------------------------------------------------------------- 2-D

    def side_of(self, track_id: int, keypoints: np.ndarray, scores: np.ndarray) -> str:
        if self.cfg.side != "auto":
            return self.cfg.side
        t = self.track(track_id)
        t.side = facing(keypoints, scores, self.cfg.min_score, t.side)
        return t.side

    def planar(self, track_id: int, values: np.ndarray, conf: np.ndarray, named: np.ndarray, side: str) -> dict:
        t = self.track(track_id)
        unsure = conf < self.cfg.min_score
        why = {NAMES_2D[j]: "unsure keypoint: {} {:.2f}".format(*weakest(named, NAMES_2D[j]))
               for j in np.flatnonzero(unsure)}  # fmt: skip
        out = np.where(unsure, np.nan, unwrap_to(t.last_2d, values, PERIOD_2D))
        t.last_2d = np.where(unsure, t.last_2d, out)
        shown = self.filtered(t, "2d", NAMES_2D, out)
        return {"2d": shown, "3d": {}, "confidence": dict(zip(NAMES_2D, np.round(conf, 3).tolist(), strict=True)),
                "why": why, "side": side, "_2d": out}  # fmt: skip

    # ------------------------------------------------------------------------------------------- 3-D

    def anatomical(self, track_id: int, kp: np.ndarray, c: np.ndarray, values: np.ndarray, conf: np.ndarray,
                   why: dict, record: dict) -> dict:  # fmt: skip
        t = self.track(track_id)
        unsure = conf < self.cfg.min_score
        why.update({NAMES_3D[j]: "unsure keypoint" for j in np.flatnonzero(unsure)})
        for j, b in self.stretched(t, kp, c).items():
            if not unsure[j]:
                why[NAMES_3D[j]] = b
                unsure[j] = True
        out = np.where(unsure, np.nan, unwrap_to(t.last_3d, values))
        t.last_3d = np.where(np.isnan(out), t.last_3d, out)
        record["3d"] = self.filtered(t, "3d", NAMES_3D, out)
        record["confidence"].update(zip(NAMES_3D, np.round(conf, 3).tolist(), strict=True))
        record["why"].update(why)
        record["_3d"] = out
        return record

    def stretched(self, t: Track, kp: np.ndarray, c: np.ndarray) -> dict[int, str]:
        """The angles (index in NAMES_3D) that use a bone of this frame longer or shorter than the track's own by
        more than the tolerance, with the reason. The track's lengths are the median of its first sure frames."""
        lengths = np.linalg.norm(kp[BONE_ENDS[:, 0]] - kp[BONE_ENDS[:, 1]], axis=1)
        sure = (c[BONE_ENDS] >= self.cfg.min_score).all(1)
        if t.bones is None:
            t.bone_samples.append(np.where(sure, lengths, np.nan))
            if len(t.bone_samples) >= BONE_SAMPLES:
                samples = np.array(t.bone_samples)
                t.bones = np.array([np.median(c[~np.isnan(c)]) if (~np.isnan(c)).any() else np.nan for c in samples.T])
            return {}
        with np.errstate(all="ignore"):
            error = lengths / t.bones - 1
        off = np.flatnonzero(sure & (np.abs(error) > self.cfg.bone_tolerance))
        if not len(off):
            return {}
        reasons = {int(b): f"{BONE_NAMES[b]} {error[b]:+.0%} off this person's length" for b in off}
        return {j: reasons[b] for j, bones in enumerate(BONES_USED) for b in bones if b in reasons}

    # ------------------------------------------------------------------------------------------- both

    def filtered(self, t: Track, kind: str, names: tuple, values: np.ndarray) -> dict:
        """The values shown live: through the track's live filters (or as they are), rounded, None for NaN."""
        if self.sos is not None:
            if kind not in t.filters:
                t.filters[kind] = LiveFilter(self.sos, len(names))
            values = t.filters[kind](values)
        rounded = np.round(values, 2).tolist()
        return {n: None if v != v else v for n, v in zip(names, rounded, strict=True)}

    def steps(self, t: Track, p: Seen, time_s: float, frame: int, up, side: str | None) -> list[dict]:
        """Gait events of one frame: in metres where the person is (and the floor known), else along the image.
        Each foot's heel and toes ahead of the pelvis (the mid-hip) along the way the person faces; the leg's length
        (hip-knee-ankle, the mean of both) is the scale an extreme must stand out by."""
        ahead, lead, scale = None, None, None
        if p.keypoints_3d is not None and up is not None:
            kp, c = p.keypoints_3d[GAIT_IDS], p.confidence_3d[GAIT_IDS]
            if (c >= self.cfg.min_score).all() and np.isfinite(kp).all():
                upward = unit(np.asarray(up, np.float64))
                hip = kp[4:6].mean(0)
                forward = unit(cross(upward, kp[5] - kp[4]))
                along = (kp[:4] - hip) @ forward  # right heel, right toe, left heel, left toe
                ahead = {"right": (float(along[0]), float(along[1])), "left": (float(along[2]), float(along[3]))}
                lead = {"right": float(along[0] - along[2]), "left": float(along[2] - along[0])}
                t.pelvis.append((time_s, hip - (hip @ upward) * upward))
        elif p.keypoints is not None and side in ("right", "left"):
            kp, c = p.keypoints[GAIT_IDS], p.scores[GAIT_IDS]
            if (c >= self.cfg.min_score).all():
                along = (kp[:4, 0] - kp[4:6, 0].mean()) * (1.0 if side == "right" else -1.0)
                ahead = {"right": (float(along[0]), float(along[1])), "left": (float(along[2]), float(along[3]))}
        if ahead is not None:
            legs = kp[6:].reshape(2, 3, -1)
            scale = float(np.sqrt((np.diff(legs, axis=1) ** 2).sum(-1)).sum(1).mean())
        if ahead is None:
            return []
        found = []
        for kind, s, at, at_frame, step in t.gait(time_s, frame, ahead, scale, lead):
            self.steps_found += 1
            found.append({"id": f"gait-{self.steps_found}", "kind": kind, "track_id": p.track_id,
                          "time_s": round(at, 6), "side": s, "at_frame": at_frame,
                          **({"step_length_m": round(step, 3)} if step is not None else {})})  # fmt: skip
        return found

    def summary(self) -> dict:
        """Per track: frames with angles, the side seen most, the bone lengths it was scaled to, its gait."""
        out = {}
        for track_id, t in sorted(self.all_tracks().items()):
            entry: dict = {"frames": t.frames}
            sides = {side: n for side, n in t.sides.items() if side}
            if sides:
                entry["side"] = max(sides, key=sides.get)
            if t.bones is not None:
                entry["bones_m"] = {n: (None if np.isnan(v) else round(float(v), 3))
                                    for n, v in zip(BONE_NAMES, t.bones, strict=True)}  # fmt: skip
            if self.cfg.gait and t.gait.found:
                entry["gait"] = t.gait.summary(walking_speed(t.pelvis, t.gait.found))
            out[str(track_id)] = entry
        return out


def walking_speed(pelvis: list, found: list) -> float | None:
    """The pelvis's mean speed over the floor between the first and the last heel strike (m/s)."""
    strikes = sorted(t for kind, _, t, _, _ in found if kind == "heel_strike")
    if len(strikes) < 2 or not pelvis:
        return None
    times = np.array([t for t, _ in pelvis])
    points = np.array([p for _, p in pelvis])
    a, b = np.abs(times - strikes[0]).argmin(), np.abs(times - strikes[-1]).argmin()
    if times[b] <= times[a]:
        return None
    return float(np.linalg.norm(points[b] - points[a]) / (times[b] - times[a]))
