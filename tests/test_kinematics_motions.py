"""Our OpenSim IK against Pose2Sim's own on every motion of `benchmarks.kinematics_anchor`, exact and with 1 cm of
noise, and the wrong basin of issue 71: arms raised overhead with straight elbows, where a solve that only ever
starts from the last frame's pose turns the upper arms about themselves unseen and is then stuck with the elbows at
their limit. The truth is synthetic bodies posed by known coordinates (`humans.kinematics`); a model's zero is not
the geometric one, so a coordinate is compared after its constant offset."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from benchmarks.kinematics_anchor import MOTIONS, arms_overhead, cli, compare, off_truth, write_run
from benchmarks.real_mocap import read_mot
from sapiens2_stream.kinematics.opensim_files import setup_dir


@pytest.mark.parametrize("noise_m", [0.0, 0.01])
@pytest.mark.parametrize("name", list(MOTIONS))
def test_each_moving_coordinate_is_as_near_the_truth_as_pose2sims_own(tmp_path, name, noise_m, monkeypatch):
    """Every coordinate the motion moves is no further from the truth than Pose2Sim's own scaling and IK on the
    same markers, + 0.5 degree with exact keypoints and + 1 degree with 1 cm of noise (issue 71's bound: from one
    draw of the noise to the next the two differ by a few hundredths either way, `benchmarks.kinematics_anchor`),
    and near the truth itself (exact: within 8 degrees RMS, the limbs' within 5; with noise within 10), so that
    both failing alike fails too. Every frame is solved."""
    monkeypatch.chdir(tmp_path)  # where the user is: OpenSim's own log is not left there
    found = compare(tmp_path, MOTIONS[name], noise_m)
    report = found.report
    out = tmp_path / "run" / "kinematics"
    summary = json.loads((out / "summary.json").read_text())["people"]["person 1"]
    assert summary["solved"] == summary["frames"] == 120 and summary["marker_rms_m"] < 0.05 + 2 * noise_m
    print(name, noise_m, {k: (round(a, 2), round(b, 2)) for k, (a, b) in report.items()}, found.fresh_kept)
    slack = 0.5 if noise_m == 0 else 1.0
    assert report and all(a <= b + slack for a, b in report.values()), report
    if noise_m == 0:
        assert all(a <= 8.0 for a, _ in report.values()), report  # the squat's lumbar: 7.5, as Pose2Sim's
        assert all(a <= 5.0 for n, (a, _) in report.items() if not n.startswith("L5_S1")), report
    else:
        assert all(a <= 10.0 for a, _ in report.values()), report
    assert (out / "person_0001_scaled.osim").stat().st_size > 10_000 and (out / "person_0001_markers.trc").exists()
    assert not (tmp_path / "opensim.log").exists()


def solved_arms(run, truth) -> dict[str, float]:
    mot = read_mot(run / "kinematics" / "person_0001_ik.mot")[1]
    return {n: off_truth(mot[n], np.array([q[n] for q in truth])) for n in ("arm_flex_l", "elbow_flex_l",
                                                                           "arm_flex_r", "elbow_flex_r")}  # fmt: skip


def test_arms_overhead_from_the_last_pose_alone_stay_in_a_wrong_basin_and_fresh_starts_leave_it(tmp_path,
                                                                                              monkeypatch):  # fmt: skip
    """The cause, shown: with no fresh starts (each frame only from the last one's pose, as before issue 71) the
    arms raised overhead end with the elbows pinned at 0 while the truth bends them to 110 degrees (tens of degrees
    off). With them (`kinematics.starts`), both arms follow; the marker-error file marks the frames that were
    doubted and says which start each kept, and the summary counts them."""
    from sapiens2_stream.kinematics import starts

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    truth = write_run(run, arms_overhead)
    assert cli("kinematics", run, "--mass", "72")[0] == 0
    fixed = solved_arms(run, truth)
    rows = list(csv.DictReader((run / "kinematics" / "person_0001_marker_errors.csv").open()))
    summary = json.loads((run / "kinematics" / "summary.json").read_text())["people"]["person 1"]
    with monkeypatch.context() as m:
        m.setattr(starts.Starts, "fresh", lambda self, *args, **kwargs: iter(()))
        assert cli("kinematics", run, "--mass", "72", "--output", tmp_path / "last_only")[0] == 0
    stuck = {n: off_truth(read_mot(tmp_path / "last_only" / "person_0001_ik.mot")[1][n],
                          np.array([q[n] for q in truth])) for n in fixed}  # fmt: skip
    print("fresh starts", fixed, "last pose only", stuck)
    assert stuck["elbow_flex_l"] > 30 and stuck["elbow_flex_r"] > 30 and stuck["arm_flex_l"] > 15
    assert all(v < 5.0 for v in fixed.values()), fixed
    kept = [r["start"] for r in rows if r["start"] != "last"]
    assert kept and set(kept) <= {"default", "arm_r_turned", "arm_l_turned", "arms_turned"}
    assert all(r["doubtful"] == "1" for r in rows if r["start"] != "last")  # a fresh start only where doubted
    assert summary["doubtful_frames"] == sum(r["doubtful"] == "1" for r in rows) < len(rows) / 3  # paid for rarely
    assert sum(summary["fresh_start_kept"].values()) == len(kept)


def test_live_kinematics_keeps_the_same_starts_as_the_command(tmp_path, monkeypatch):
    """The live stage's solver (`LiveKinematics`, frame by frame as moments come, scaled after its first 30
    standing frames) on the arms raised overhead gives the command's values and marks the same frames doubtful,
    with the same start kept."""
    from sapiens2_stream.kinematics.live import LiveKinematics
    from sapiens2_stream.kinematics.options import KinematicsConfig
    from sapiens2_stream.kinematics.run import group_tracks

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    write_run(run, arms_overhead)
    assert cli("kinematics", run, "--mass", "70")[0] == 0
    mot = read_mot(run / "kinematics" / "person_0001_ik.mot")[1]
    rows = list(csv.DictReader((run / "kinematics" / "person_0001_marker_errors.csv").open()))
    (track,) = group_tracks(run / "3d" / "keypoints_3d.jsonl")
    live = LiveKinematics(KinematicsConfig(enabled=True))
    said = [live(1, t, k, c) for t, k, c in zip(track.times, track.keypoints, track.confidence, strict=True)]
    live.close()
    solved = [i for i, (values, _, _) in enumerate(said) if values is not None]
    assert solved == list(range(29, 120))  # scaled at its 30th standing frame (the first 29 solved unseen)
    for name in ("arm_flex_l", "elbow_flex_l", "arm_rot_r", "pelvis_tilt"):
        assert np.allclose([said[i][0][name] for i in solved], mot[name][solved], atol=0.01), name
    assert [said[i][2] for i in solved] == [r["start"] if r["doubtful"] == "1" else None for r in rows[29:]]


def test_a_shoulder_has_two_readings_of_one_pose_and_is_read_the_one_way(tmp_path):
    """The model's shoulder (flexion, adduction, turn) puts the arm's markers in the same places at (a, b, c) and
    (a + 180, 180 - b, c + 180), and a whole turn on; `Starts.reading` reads every pose as the smaller angles."""
    from sapiens2_stream.kinematics.fit import TrackIK
    from sapiens2_stream.kinematics.opensim_files import MODELS, need_opensim
    from sapiens2_stream.kinematics.starts import wrapped

    ik = TrackIK(need_opensim(), setup_dir(), setup_dir() / MODELS["simple"])
    ix = {n: i for i, n in enumerate(ik.names)}

    def markers(q):
        ik.set_q(q)
        ik.model.realizePosition(ik.state)
        return np.array([m.getLocationInGround(ik.state).to_numpy() for m in ik.model.getMarkerSet()])

    base = ik.q()
    rng = np.random.default_rng(5)
    for side in "rl":
        flex, add, rot = (ix[f"{c}_{side}"] for c in ("arm_flex", "arm_add", "arm_rot"))
        for a, b, c in np.radians(rng.uniform([-60, -150, -80], [200, 60, 80], (20, 3))):
            q, other = base.copy(), base.copy()
            q[[flex, add, rot]] = a, b, c
            other[[flex, add, rot]] = a + np.pi, np.pi - b, c + np.pi - 2 * np.pi
            assert np.abs(markers(q) - markers(other)).max() < 1e-9
            for given in (q, other):
                read = ik.starts.reading(given)
                assert np.abs(markers(read) - markers(q)).max() < 1e-9  # the same body
                size = [np.abs(wrapped(np.array(r))).sum() for r in ([a, b, c], [a + np.pi, np.pi - b, c + np.pi])]
                assert np.abs(wrapped(read[[flex, add, rot]])).sum() == pytest.approx(min(size), abs=1e-9)
                assert -135 <= np.degrees(read[flex]) <= 225
