"""`--resume` restores the tracker and the keypoint smoother from the JSONL records of the interrupted run:
continuing from the restored state gives what the uninterrupted run gives (ids, boxes, smoothed keypoints)."""

import numpy as np
import pytest

from sapiens2_stream.io.records import recorded_frame
from sapiens2_stream.runtime.resume import ResumeState
from sapiens2_stream.track.options import TrackerConfig
from sapiens2_stream.track.smoothing import OnlineSmoother
from sapiens2_stream.track.tracker import Tracker

EVERY = 3  # the detector runs on every third frame; the tracker carries boxes between


def scene(n_frames, rng):
    """Two people walking towards each other and one who leaves, seen at irregular times, noisy keypoints."""
    times = np.cumsum(rng.uniform(0.025, 0.05, n_frames))
    frames = []
    for i, t in enumerate(times):
        people = [[20 + 60 * t, 40, 50, 120, 0.9], [300 - 50 * t, 45, 55, 125, 0.8]]
        if i < 20:
            people.append([150, 200, 40, 90, 0.7])
        dets = np.array(people, np.float32) + np.r_[rng.normal(0, 0.5, 4), 0][None]
        limbs = np.linspace(0, 80, 17)[:, None]
        keypoints = {j: dets[j, :2] + limbs + rng.normal(0, 2.0, (17, 2)) for j in range(len(dets))}
        frames.append((t, dets, keypoints))
    return frames


def run(frames, tracker, smoother, start=0):
    """The pipeline's track and smooth stages over frames[start:], as JSONL-like records."""
    records = []
    for i, (t, dets, keypoints) in enumerate(frames[start:], start):
        tracked = tracker.update(dets, t) if i % EVERY == 0 else tracker.carry(t)
        for track_id in tracker.pop_ended():
            smoother.drop(track_id)
        people = []
        for track_id, box, score in tracked:
            j = int(np.argmin([np.abs(d[:2] - box[:2]).sum() for d in dets]))  # the person under the box
            kp, kps = keypoints[j], np.full(17, 0.9)
            smoothed = smoother(track_id, t, kp, kps)
            people.append({
                "track_id": track_id, "box": np.round(box, 2).tolist(), "score": round(float(score), 4),
                "keypoints": np.round(kp, 2).tolist(), "keypoint_scores": kps.tolist(),
                "keypoints_smoothed": smoothed.tolist(),
            })  # fmt: skip
        records.append({"frame": i, "pts": float(t), "people": people})
    return records


@pytest.mark.parametrize("cut", [10, 31, 44])
def test_restored_tracker_and_smoother_continue_like_the_uninterrupted_run(cut):
    frames = scene(60, np.random.default_rng(cut))
    make = lambda: (Tracker(TrackerConfig(max_lost_s=0.3)), OnlineSmoother("kalman"))  # noqa: E731
    full = run(frames, *make())

    before = full[:cut]  # what the interrupted run wrote
    state = ResumeState([recorded_frame(r) for r in before])
    tracker, smoother = make()
    state.restore(tracker, smoother, EVERY)
    after = run(frames, tracker, smoother, start=cut)

    assert len(after) == len(full) - cut
    for a, b in zip(after, full[cut:], strict=True):
        assert [p["track_id"] for p in a["people"]] == [p["track_id"] for p in b["people"]]
        for pa, pb in zip(a["people"], b["people"], strict=True):
            assert np.allclose(pa["box"], pb["box"], atol=0.05)  # the replay starts from 0.01 px rounded boxes
            assert np.allclose(pa["keypoints_smoothed"], pb["keypoints_smoothed"], atol=0.02)


def test_ended_tracks_stay_ended_and_new_people_get_new_ids():
    frames = scene(60, np.random.default_rng(1))
    tracker, smoother = Tracker(TrackerConfig(max_lost_s=0.3)), OnlineSmoother("kalman")
    records = run(frames[:45], tracker, smoother)
    leaver = {p["track_id"] for p in records[0]["people"]} - {p["track_id"] for p in records[-1]["people"]}
    assert len(leaver) == 1  # the third person left at frame 20 and their track ended

    restored_tracker, restored_smoother = Tracker(TrackerConfig(max_lost_s=0.3)), OnlineSmoother("kalman")
    ResumeState([recorded_frame(r) for r in records]).restore(restored_tracker, restored_smoother, EVERY)
    assert {tr.track_id for tr in restored_tracker.tracks} == {tr.track_id for tr in tracker.tracks}
    assert set(restored_smoother.state) == set(smoother.state)  # no state kept for the ended track
    assert restored_tracker.next_id == tracker.next_id
    new = restored_tracker.update(np.array([[400, 300, 40, 90, 0.9]], np.float32), records[-1]["pts"] + 0.03)
    assert [tid for tid, _, _ in new] == [tracker.next_id]
