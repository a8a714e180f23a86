"""Who is who across the cameras, and each camera's clock: what `calibrate people` solves from.

Each camera's run (its `results.jsonl`) gives its tracks over its own time; track ids are the camera's own. The
first camera is the reference: its people are the people and its clock the clock. For every other camera:

1. Its offset: the offset at which one of its tracks best obeys the epipolar geometry with the reference's measured
   person (the one whose height is given), searched as `export pose2sim --sync motion` searches
   (`threed.motion_sync`); the offset of that track is the camera's. Only a clear one is taken: a person walking
   steadily in a straight line looks the same one stride later, moved along the line, as a camera moved along it
   would see them, so no offset can be told from another; then the camera's clock is taken as it is (method
   `clock`, with the confidence that was found), as it always is with `--sync none`.
2. Its people: at that offset, each of the camera's tracks is the reference person with whom it shares one
   epipolar geometry with the measured person best (`joint_error`), when it agrees about as well as the measured
   person does (a tracker's broken track is matched piece by piece).
3. People the reference never saw: the tracks left over are matched among the other cameras the same way, two
   cameras at a time, on the reference clock, against the measured person as both those cameras saw them; each
   person found so is numbered -1, -2, ... and adds their keypoints to the calibration (the bones and the floor),
   never their height. A track no other camera shares is left out.

Matching runs on undistorted pixels (the intrinsics are known); the sightings handed on are the raw keypoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from ..io.records import read_frames
from ..threed.calibration import Camera
from ..threed.motion_sync import BODY, MIN_SCORE, Offset, Track2D, epipolar_distance, motion_offset, run_tracks

MIN_FRAMES = 20  # a track seen in fewer frames is too short to match or to time
SURE = 0.3  # an offset found with less confidence is not taken: the camera's clock is (see `Offset.confidence`)
SEARCH_MOMENTS = 200  # the reference frames the offset search compares (every offset is still tried)
MAX_OFFSET_S = 10.0  # the offsets searched, either way: cameras of one take started by hand
MATCH_SPREAD = 3.0  # a track is a reference person when its epipolar error is within this many times the
MATCH_PX = 3.0  # measured person's (or this many pixels, whichever is larger)

Key = tuple[int, int]  # (the reference camera's frame, the reference camera's person)


@dataclass
class Sightings:
    """The people each camera saw on the reference clock: camera -> (frame, person) -> (keypoints [308, 2],
    scores [308]); the measured person; each camera's offset and which of its tracks are which person."""

    seen: dict[str, dict[Key, tuple[np.ndarray, np.ndarray]]]
    measured: int
    offsets: dict[str, Offset]
    matches: dict[str, dict[int, int]]  # camera -> its track id -> the reference's person

    def report(self) -> dict:
        return {name: {**self.offsets[name].as_dict(), "tracks": {str(t): p for t, p in self.matches[name].items()}}
                for name in self.offsets}  # fmt: skip


def read_tracks(folder: Path) -> dict[int, Track2D]:
    """Every track of a run's results.jsonl over the run's frame times (scores 0 where the track is absent)."""
    path = folder / "results.jsonl" if folder.is_dir() else folder
    if not path.is_file():
        raise Sapiens2StreamError(f"{folder}: no results.jsonl here (give a run's output folder)")
    records = read_frames(path)
    if not records:
        raise Sapiens2StreamError(f"{path}: not a run's results.jsonl (no frame in it)")
    return run_tracks(records)


def seen_frames(track: Track2D) -> np.ndarray:
    return (track.scores >= MIN_SCORE).any(axis=1)


def reference_people(tracks: dict[int, Track2D], track: int | None, where: str) -> tuple[dict[int, Track2D], int]:
    """The reference camera's people and the measured one: `track`, or, without it, the one person it saw (the
    tracker's pieces of one person, never two at once, joined)."""
    if track is not None:
        if track not in tracks:
            raise Sapiens2StreamError(f"{where}: no person with track {track}")
        return tracks, track
    if not tracks:
        raise Sapiens2StreamError(f"{where}: no person")
    at_once = np.sum([seen_frames(t) for t in tracks.values()], axis=0)
    if (at_once > 1).any():
        raise Sapiens2StreamError(f"{where}: several people at once in {int((at_once > 1).sum())} frames; give "
                                  "--track ID (the person whose height is --height, as the first camera's run "
                                  "numbers them)")  # fmt: skip
    first = min(tracks)
    joined = tracks[first]
    for t in tracks.values():
        here = seen_frames(t)
        joined.points[here], joined.scores[here] = t.points[here], t.scores[here]
    return {first: joined}, first


def undistorted(track: Track2D, cam: Camera) -> Track2D:
    """The track's body keypoints (what timing and matching compare) in an ideal pinhole camera's pixels."""
    points = track.points[:, BODY]
    return Track2D(track.times, cam.undistort(points.reshape(-1, 2)).reshape(points.shape), track.scores[:, BODY])


def correspondences(ref: Track2D, cam: Track2D, offset_s: float) -> tuple[np.ndarray, np.ndarray, int]:
    """The keypoints both saw at the same moments (reference time t, camera time t - offset): [N, 2] each, and
    in how many moments."""
    points, scores = cam.at(ref.times - offset_s)
    both = (scores >= MIN_SCORE) & (ref.scores >= MIN_SCORE)
    return ref.points[both], points[both], int(both.any(axis=1).sum())


def match_camera(people: dict[int, Track2D], measured: int, tracks: dict[int, Track2D], sync: bool,
                 name: str, ref_name: str) -> tuple[Offset, dict[int, int]]:  # fmt: skip
    """One camera's offset and which of its tracks (undistorted body keypoints) are which reference person."""
    candidates = {t: track for t, track in tracks.items() if seen_frames(track).sum() >= MIN_FRAMES}
    timed = {}
    for t, track in candidates.items():
        found = motion_offset(people[measured], track, None, SEARCH_MOMENTS, MAX_OFFSET_S) if sync else None
        if found is not None and found.confidence >= SURE:
            timed[t] = found
        else:  # the clocks as they are: asked for, or no offset stands out (a steady walk fits a stride later too)
            pa, pb, moments = correspondences(people[measured], track, 0.0)
            error = epipolar_distance(pa, pb, None) if moments >= MIN_FRAMES else np.inf
            timed[t] = Offset(0.0, 0, found.confidence if found else 1.0, "clock" if found else "none", error)
    timed = {t: o for t, o in timed.items() if o.error is not None and np.isfinite(o.error)}
    if not timed and any(correspondences(people[measured], c, 0.0)[2] >= MIN_FRAMES for c in candidates.values()):
        raise Sapiens2StreamError(f"calibrate people: cameras {ref_name} and {name} share keypoints but no relative "
                                  "pose fits them (the person standing still, or seen from one place)")  # fmt: skip
    if not timed:
        raise Sapiens2StreamError(f"calibrate people: no two cameras saw the person at the same moments (camera "
                                  f"{name} never saw the person camera {ref_name} saw, at any offset)")  # fmt: skip
    best = min(timed, key=lambda t: timed[t].error)
    offset = timed[best]
    known_a, known_b, _ = correspondences(people[measured], candidates[best], offset.offset_s)
    bar = max(MATCH_PX, MATCH_SPREAD * float(offset.error))
    matches = {best: measured}
    for t, track in candidates.items():
        if t == best:
            continue
        errors = {}
        for p, person in people.items():
            pa, pb, moments = correspondences(person, track, offset.offset_s)
            if moments >= MIN_FRAMES:
                errors[p] = joint_error(known_a, known_b, pa, pb)
        if errors and min(errors.values()) <= bar:
            matches[t] = min(errors, key=errors.get)
    return offset, matches


def on_clock(track: Track2D, times: np.ndarray, offset_s: float) -> Track2D:
    """The track at the reference camera's frame times (its own clock `offset_s` behind)."""
    return Track2D(times, *track.at(times - offset_s))


def match_unseen(theirs: dict[str, dict[int, Track2D]], offsets: dict[str, Offset], matches: dict[str, dict[int, int]],
                 measured: int, times: np.ndarray) -> None:  # fmt: skip
    """Step 3 of the module: the tracks of the cameras after the first that no reference person matched, matched
    among those cameras (into `matches`, as people -1, -2, ...)."""
    names = list(theirs)
    timed = {n: {t: on_clock(tr, times, offsets[n].offset_s) for t, tr in theirs[n].items()
                 if seen_frames(tr).sum() >= MIN_FRAMES} for n in names}  # fmt: skip
    known = {}  # the measured person as each camera saw them (its longest piece)
    for n in names:
        pieces = [t for t, p in matches[n].items() if p == measured and t in timed[n]]
        if pieces:
            known[n] = timed[n][max(pieces, key=lambda t: int(seen_frames(timed[n][t]).sum()))]
    pairs = {}  # (a, b): the measured person's correspondences in both cameras, and the bar a match must clear
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if a in known and b in known:
                known_a, known_b, moments = correspondences(known[a], known[b], 0.0)
                if moments >= MIN_FRAMES:
                    bar = max(MATCH_PX, MATCH_SPREAD * float(epipolar_distance(known_a, known_b, None)))
                    pairs[a, b] = known_a, known_b, bar
    unseen = 0
    for (a, b), (known_a, known_b, bar) in pairs.items():
        for t, track in timed[a].items():
            if t in matches[a] and matches[a][t] >= 0:  # a person the first camera saw
                continue
            errors = {}
            for u, other in timed[b].items():
                pa, pb, shared = correspondences(track, other, 0.0)
                if u not in matches[b] and shared >= MIN_FRAMES:
                    errors[u] = joint_error(known_a, known_b, pa, pb)
            if errors and min(errors.values()) <= bar:
                if t not in matches[a]:
                    unseen -= 1
                    matches[a][t] = unseen
                matches[b][min(errors, key=errors.get)] = matches[a][t]


def joint_error(known_a: np.ndarray, known_b: np.ndarray, pa: np.ndarray, pb: np.ndarray) -> float:
    """How well a candidate pairing (pa, pb) shares one epipolar geometry with the measured person's (known_a,
    known_b): the candidate's median distance (px) under the fundamental matrix fitted to both. One person's
    keypoints fill a narrow part of the room, so a matrix fitted to them alone is off by tens of pixels a metre
    away; fitted to both, the right person agrees to the keypoints' noise and a wrong one cannot."""
    f, _ = cv2.findFundamentalMat(np.vstack([known_a, pa]), np.vstack([known_b, pb]), cv2.FM_8POINT)
    return epipolar_distance(pa, pb, f) if f is not None and f.shape == (3, 3) else np.inf


def sightings(cams: dict[str, Camera], runs: dict[str, Path], track: int | None, sync: bool) -> Sightings:
    """Read every camera's run, time the cameras against the first and match their people (see the module)."""
    names = list(runs)
    tracks = {name: read_tracks(runs[name]) for name in names}
    ref = names[0]
    people, measured = reference_people(tracks[ref], track, f"camera {ref}: {runs[ref]}")
    flat = {p: undistorted(t, cams[ref]) for p, t in people.items()}
    offsets, matches = {ref: Offset(0.0, 0, 1.0, "reference")}, {ref: {p: p for p in people}}
    theirs = {}
    for name in names[1:]:
        if not tracks[name]:
            raise Sapiens2StreamError(f"camera {name}: no person in {runs[name]}")
        theirs[name] = {t: undistorted(tr, cams[name]) for t, tr in tracks[name].items()}
        offsets[name], matches[name] = match_camera(flat, measured, theirs[name], sync, name, ref)
    times = people[measured].times
    match_unseen(theirs, offsets, matches, measured, times)
    seen: dict[str, dict[Key, tuple[np.ndarray, np.ndarray]]] = {}
    for name in names:
        seen[name] = {}
        for t, p in matches[name].items():
            source = people[p] if name == ref else tracks[name][t]
            points, scores = source.at(times - offsets[name].offset_s)
            for i in np.flatnonzero((scores >= MIN_SCORE).any(axis=1)):
                seen[name].setdefault((int(i), p), (points[i], scores[i]))
    return Sightings(seen, measured, offsets, matches)
