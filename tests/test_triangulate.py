"""Live triangulation (`threed.Triangulator`) on a synthetic rig of calibrated, distorting 1080p cameras round a
capture area (tests/scenes3d.py), people of known 3-D skeletons projected with 1 px of noise; and against Pose2Sim's
own triangulation of the same data."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from sapiens2_stream.threed import Triangulator
from tests import scenes3d as S

FPS, FRAMES = 10, 50


def crossing(t: float) -> list[S.Pose]:
    """Three people: two walking past each other through the middle, one turning on the spot behind them."""
    return [S.walking(t, y=0.0, start_x=-1.5), S.walking(t, y=0.35, start_x=1.5, speed=-0.6, yaw=np.pi / 2),
            S.Pose(x=0.2 * np.sin(t), y=-1.0, yaw=0.5 * t)]  # fmt: skip


def errors_of(people, truth: np.ndarray) -> dict[int, float]:
    """Each output person's mean joint error (m) against the true person it is nearest to, by id, and that person."""
    out = {}
    for p in people:
        distances = [np.nanmean(np.linalg.norm(p.xyz - truth[q], axis=1)) for q in range(len(truth))]
        q = int(np.argmin(distances))
        out[p.id] = (q, distances[q])
    return out


def run(scene, cameras: int = 4, spoil=None) -> list[tuple[list, np.ndarray]]:
    """(people, truth) per frame; `spoil(i, views, poses)` may change the views before they go in."""
    rig = S.rig(cameras)
    tri = Triangulator({c.name: c for c in rig})
    rng = np.random.default_rng(11)
    out = []
    for i in range(FRAMES):
        poses = scene(i / FPS)
        views = {c.name: S.seen_by(c, poses, rng) for c in rig}
        if spoil is not None:
            spoil(i, views, poses)
        out.append((tri.update(i / FPS, views), S.world_truth(poses)))
    return out


def test_one_person_four_cameras_within_millimetres():
    """4 cameras, 1 person walking, 1 px noise: RMS error over every joint and frame at most 5 mm."""
    squares = []
    for people, truth in run(lambda t: [S.walking(t)]):
        assert len(people) == 1 and len(people[0].views) == 4
        d = np.linalg.norm(people[0].xyz - truth[0], axis=1)
        squares += list(d[np.isfinite(d)] ** 2)
    rms = np.sqrt(np.mean(squares))
    print(f"RMS {rms * 1000:.2f} mm")
    assert rms <= 0.005


def test_three_people_crossing_keep_their_ids():
    """Three people, two of them crossing: all three at every frame, each id on the same true person throughout."""
    owners: dict[int, set] = {}
    for people, truth in run(crossing):
        assert len(people) == 3
        for track_id, (person, error) in errors_of(people, truth).items():
            owners.setdefault(track_id, set()).add(person)
            assert error < 0.02
    assert len(owners) == 3 and all(len(o) == 1 for o in owners.values()), owners


def test_a_wrong_view_is_left_out():
    """For a second, one camera's keypoints of one person are another person's (its legs, then all of it), and
    another camera's are shifted by 30 px: every person still within 2 cm."""

    def spoil(i, views, poses):
        if 20 <= i < 30:
            keypoints, scores = views["cam2"]
            legs = [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
            if i < 25:  # person 0's legs in cam2 are person 1's
                keypoints[0, legs] = keypoints[1, legs]
            else:  # all of person 0 in cam2 is person 2 (seen twice)
                keypoints[0] = keypoints[2]
            views["cam3"][0][1] += 30.0

    worst = max(error for people, truth in run(crossing, spoil=spoil) for _, error in errors_of(people, truth).values())
    print(f"worst mean joint error {worst * 100:.2f} cm")
    assert worst <= 0.02


def test_a_camera_that_stops_leaves_the_others_and_rejoins():
    def spoil(i, views, poses):
        if 15 <= i < 35:
            del views["cam1"]

    frames = run(crossing, spoil=spoil)
    for i, (people, truth) in enumerate(frames):
        assert len(people) == 3
        assert all(("cam1" in p.views) == (not 15 <= i < 35) for p in people), i
        assert max(e for _, e in errors_of(people, truth).values()) < 0.02


def test_a_person_one_camera_sees_is_lifted_by_its_pointmap_and_flagged():
    """Two cameras see a walker for a second, then only cam1 does; cam1's single-camera 3-D stage gives its
    keypoints in cam1's frame (2 cm of noise). The person goes on with the same id, flagged `lifted`, made from cam1
    alone, within 5 cm of the truth on average; without the lifted keypoints the person is not made once cam2 loses
    them."""
    import cv2

    rig = S.rig(2)
    lifting, bare = Triangulator({c.name: c for c in rig}), Triangulator({c.name: c for c in rig})
    rotation = cv2.Rodrigues(rig[0].rotation)[0]
    rng = np.random.default_rng(8)
    seen = []
    for i in range(20):
        pose = S.walking(i / FPS)
        truth = S.world_truth([pose])
        in_cam1 = truth @ rotation.T + rig[0].translation + rng.normal(0, 0.02, truth.shape)
        views = {"cam1": S.seen_by(rig[0], [pose], rng)}
        if i < 10:
            views["cam2"] = S.seen_by(rig[1], [pose], rng)
        seen.append((lifting.update(i / FPS, {**views, "cam1": (*views["cam1"], in_cam1)}), truth[0]))
        assert len(bare.update(i / FPS, views)) == (1 if i < 10 else 0)
    assert all(len(people) == 1 for people, _ in seen)
    ids = {people[0].id for people, _ in seen}
    alone = [(people[0], truth) for people, truth in seen[10:]]
    assert ids == {1} and all(p.lifted and p.views == ["cam1"] for p, _ in alone)
    assert not any(people[0].lifted for people, _ in seen[:10])
    errors = [np.nanmedian(np.linalg.norm(p.xyz - truth, axis=1)) for p, truth in alone]
    assert np.mean(errors) < 0.05 and max(errors) < 0.08, errors  # the lifted joints' own noise: 3.5 cm


def test_a_results_people_become_one_view_with_their_lifted_keypoints():
    """What a camera's result gives live motion capture: its people's smoothed keypoints and scores, and their lifted
    3-D keypoints where the single-camera stage ran (NaN where it had no confidence), else None."""
    from types import SimpleNamespace

    from sapiens2_stream.runtime.live_mocap import result_view

    person = lambda lifted: SimpleNamespace(  # noqa: E731
        keypoints=np.ones((308, 2)), smoothed=np.full((308, 2), 2.0), keypoint_scores=np.full(308, 0.9),
        keypoints_3d=lifted, keypoints_3d_confidence=np.r_[np.zeros(8), np.ones(300)])  # fmt: skip
    keypoints, scores, lifted = result_view(SimpleNamespace(people=[person(np.ones((308, 3)))]))
    assert keypoints.shape == (1, 308, 2) and (keypoints == 2).all() and scores.shape == (1, 308)
    assert np.isnan(lifted[0, :8]).all() and (lifted[0, 8:] == 1).all()
    assert result_view(SimpleNamespace(people=[person(None)]))[2] is None
    empty = result_view(SimpleNamespace(people=[]))
    assert empty[0].shape == (0, 308, 2) and empty[1].shape == (0, 308) and empty[2] is None


def test_at_least_as_accurate_as_pose2sims_own_triangulation():
    """The same undistorted keypoints of one walking person through Pose2Sim's triangulation_from_best_cameras (what
    its triangulation step runs per keypoint): our triangulation (before the 3-D filter) is at least as accurate."""
    from Pose2Sim.triangulation import triangulation_from_best_cameras

    rig = S.rig(4)
    tri = Triangulator({c.name: c for c in rig})
    rng = np.random.default_rng(5)
    projections = [tri.projections[c.name] for c in rig]
    ours, theirs = [], []
    for i in range(20):
        poses = [S.walking(i / FPS)]
        views = tri._undistorted({c.name: S.seen_by(c, poses, rng) for c in rig})
        truth = S.world_truth(poses)[0]
        xyz, _, _ = tri.triangulate({name: people[0] for name, people in views.items()})
        for k in np.flatnonzero(np.isfinite(truth).all(1)):
            points = np.array([views[c.name][0][0][k] for c in rig])
            coords = (points[:, 0], points[:, 1], np.full(len(rig), 0.9))
            q = triangulation_from_best_cameras({}, coords, coords, projections, None)[0]
            theirs.append(np.linalg.norm(np.asarray(q)[:3] - truth[k]))
            ours.append(np.linalg.norm(xyz[k] - truth[k]))
    ours_rms, theirs_rms = np.sqrt(np.mean(np.square(ours))), np.sqrt(np.mean(np.square(theirs)))
    print(f"RMS: ours {ours_rms * 1000:.2f} mm, Pose2Sim {theirs_rms * 1000:.2f} mm")
    assert ours_rms <= theirs_rms * 1.001


def mocap(tmp_path, cameras: int, expect=("triangulate", "write_3d"), **threed):
    """The run's group stages (triangulate, write_3d) for `cameras` calibrated sources of the synthetic rig,
    writing into tmp_path/out/3d, without the run: (the rig, triangulate's LiveMocap, the stages)."""
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.runtime.live_mocap import triangulation_group
    from sapiens2_stream.runtime.pipeline import check_group_stages, group_plan
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.runtime.stages import builtin_stages, in_order
    from sapiens2_stream.runtime.stages.group import GroupStages
    from sapiens2_stream.threed.calibration import write_calibration

    rig = S.rig(cameras)
    write_calibration(tmp_path / "Calib.toml", rig)
    cfg = from_dict(PipelineConfig, {
        "sources": [{"name": c.name, "uri": f"rtsp://127.0.0.1/{c.name}"} for c in rig]  # live cameras
        + [{"name": "lobby", "uri": "x.mp4"}],
        "outputs": {"dir": str(tmp_path / "out")},
        "threed": {"calibration": str(tmp_path / "Calib.toml"), "formats": ["trc", "bvh"], **threed},
    })  # fmt: skip
    group = triangulation_group(cfg.threed, cfg.sources)
    assert group == [c.name for c in rig]  # the lobby camera is not in the calibration
    enabled = check_group_stages(cfg, in_order(builtin_stages()))
    assert [s.name for s in enabled] == list(expect)
    stages = GroupStages(group_plan(cfg, enabled, rates={c.name: 10.0 for c in rig}))
    return rig, stages.state("triangulate"), stages


def test_live_mocap_gathers_moments_and_never_waits_for_a_dead_camera(tmp_path):
    """Four live cameras' results arriving out of step (up to 20 ms apart in capture time, in any order): one
    moment per frame from all four; then cam4 dies: after `max_skew_s` of silence the moments go on without it;
    keypoints_3d.jsonl and a TRC and BVH per person come out."""
    rig, live, stages = mocap(tmp_path, 4)
    assert abs(live.max_skew_s - 0.05) < 1e-9  # half a frame at 10 frames/s
    rng = np.random.default_rng(3)
    clock = 100.0
    for i in range(30):
        poses = crossing(i / FPS)
        order = rng.permutation(len(rig))
        for c in order if i < 20 else [o for o in order if rig[o].name != "cam4"]:
            keypoints, scores = S.seen_by(rig[c], poses, rng)
            clock += 0.002
            live.add(rig[c].name, i / FPS + rng.uniform(0, 0.02), keypoints, scores, arrived=clock)
        clock += 0.06  # the next frame's results come a frame later: a silent camera's wait runs out meanwhile
        live.poll(clock)
    live.flush()
    stages.ended()
    records = [json.loads(line) for line in (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]
    assert len(records) == 30 and live.moments == 30
    assert [r["views"] for r in records] == [["cam1", "cam2", "cam3", "cam4"]] * 20 + [["cam1", "cam2", "cam3"]] * 10
    assert all(len(r["people"]) == 3 for r in records) and live.missing["cam4"] == 10
    assert live.summary()["people"] == 3
    files = sorted(p.name for p in (tmp_path / "out" / "3d" / "tracks_3d").iterdir())
    assert files == [f"person_000{i}.{ext}" for i in (1, 2, 3) for ext in ("bvh", "trc")]


def test_a_result_that_comes_after_its_moment_is_counted_late_not_made_a_moment(tmp_path):
    """cam2's result of a frame comes 80 ms after cam1's (more than `max_skew_s`, 50 ms): the moment went out with
    cam1 alone, and cam2's result does not make a one-view moment of its own; the next frame has both again."""
    rig, live, stages = mocap(tmp_path, 2)
    rng = np.random.default_rng(6)
    seen = {c.name: [S.seen_by(c, [S.walking(i / FPS)], rng) for i in range(2)] for c in rig}
    live.add("cam1", 0.0, *seen["cam1"][0], arrived=1.0)
    live.poll(1.06)  # cam2 silent for 60 ms: the moment is made without it
    live.add("cam2", 0.0, *seen["cam2"][0], arrived=1.08)
    live.add("cam1", 0.1, *seen["cam1"][1], arrived=1.1)
    live.add("cam2", 0.1, *seen["cam2"][1], arrived=1.11)
    live.flush()
    stages.ended()
    records = [json.loads(line) for line in (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]
    assert [r["views"] for r in records] == [["cam1"], ["cam1", "cam2"]]
    assert live.summary()["late_results"] == {"cam1": 0, "cam2": 1} and live.missing == {"cam1": 0, "cam2": 1}


def test_a_file_camera_that_lags_is_waited_for(tmp_path):
    """Files are never stalled, only behind: a camera whose results all come after the others' still joins every
    moment."""
    rig, live, stages = mocap(tmp_path, 2)
    live.live = {c.name: False for c in rig}  # as file sources are
    rng = np.random.default_rng(4)
    for c in rig:  # all of cam1, then all of cam2
        for i in range(10):
            keypoints, scores = S.seen_by(c, [S.walking(i / FPS)], rng)
            live.add(c.name, i / FPS, keypoints, scores, arrived=float(i))
    live.flush()
    stages.ended()
    records = [json.loads(line) for line in (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]
    assert [r["views"] for r in records] == [["cam1", "cam2"]] * 10


def two_camera_run(tmp_path, tiny_dir, **sections):
    """Two file sources named like a two-camera rig's calibration (a walk of 6 frames), full-frame boxes, the
    tiny pose model, no video: a run whose camera group is triangulated live."""
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.threed.calibration import write_calibration

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=6, size=(240, 320), people=1)
    write_calibration(tmp_path / "Calib.toml", S.rig(2))
    return from_dict(PipelineConfig, {
        "sources": [{"name": "cam1", "uri": str(clip)}, {"name": "cam2", "uri": str(clip)}],
        "detector": {"type": "full_frame"},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
        "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False}},
        "threed": {"calibration": str(tmp_path / "Calib.toml")}, **sections,
    })  # fmt: skip


def test_a_run_with_calibrated_sources_writes_its_moments(tmp_path, tiny_dir):
    """Two file sources named like the calibration's cameras: the run attaches live motion capture, writes one
    moment per frame pair to OUTPUT/3d/keypoints_3d.jsonl and reports it in the summary (random weights: the
    keypoints agree across views by chance only, so who is found is not the point here)."""
    from sapiens2_stream.runtime.pipeline import Pipeline

    pipeline = Pipeline(two_camera_run(tmp_path, tiny_dir))
    pipeline.open()  # the live motion-capture group is made when the run opens its cameras
    published = []
    client = type("Client", (), {"publish": lambda self, topic, message: published.append(topic)})()
    pipeline.cross.state("write_3d").mqtt = client
    summary = pipeline.run()
    lines = (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["views"] == ["cam1", "cam2"] for line in lines)
    assert summary["live_mocap"]["moments"] == 6 and summary["live_mocap"]["cameras"] == ["cam1", "cam2"]
    assert published == ["sapiens2/3d"] * 6  # with outputs.mqtt, each moment on TOPIC/3d

    from sapiens2_stream.runtime.prometheus import mocap_metrics

    report = pipeline.cross.reports()["3d"]  # the triangulate stage's, as the console and /metrics read it
    assert report["latest"]["views"] == ["cam1", "cam2"] and report["last"]["people"] == len(report["latest"]["people"])
    families = {f.name: f for f in mocap_metrics(report["last"], report["summary"])}
    assert {"sapiens2_3d_people", "sapiens2_3d_latency_ms", "sapiens2_3d_moments_missing"} <= set(families)


def test_a_group_stage_runs_on_its_own_thread_and_one_that_fails_is_left_out(tmp_path, tiny_dir, monkeypatch, caplog):
    """The group stages never run inside a camera's write or on the event loop, and one that raises (group_angles
    at its third moment) is said once and left out: write_3d after it still writes every moment, each camera's
    own outputs go on to their end and are charged nothing, and the summary's errors (exit 3) name the stage."""
    import threading

    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.stages.group_angles import GroupAngles
    from sapiens2_stream.runtime.stages.write_3d import Write3D

    threads, calls = set(), []

    def breaks(self, state, moment):
        threads.add(threading.current_thread().name)
        calls.append(moment.time_s)
        if len(calls) == 3:
            raise ValueError("no such joint")

    def writes(self, state, moment, write=Write3D.__call__):
        threads.add(threading.current_thread().name)
        write(self, state, moment)

    monkeypatch.setattr(GroupAngles, "__call__", breaks)
    monkeypatch.setattr(Write3D, "__call__", writes)
    with caplog.at_level("ERROR", logger="sapiens2_stream"):
        summary = Pipeline(two_camera_run(tmp_path, tiny_dir, angles={"enabled": True})).run()
    assert threads == {"group-stages"}
    assert len(calls) == 3  # off after its failure
    lines = (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()
    assert len(lines) == 6
    for camera in ("cam1", "cam2"):
        assert len((tmp_path / "out" / camera / "results.jsonl").read_text().splitlines()) == 6
        assert summary["sources"][camera]["errors"] == []
    assert [(e["stage"], e["error"], e["moment"]) for e in summary["errors"]] == [
        ("group_angles", "ValueError: no such joint", 3)
    ]
    said = [r.getMessage() for r in caplog.records if "group_angles" in r.getMessage()]
    assert len(said) == 1 and "no such joint" in said[0]


def test_file_cameras_are_put_in_step_by_their_soundtracks(tmp_path, tiny_dir):
    """Two files of one take; the second camera started 0.4 s late, so its clap comes 0.4 s earlier in its file.
    `threed.sync: auto` finds the offset from the soundtracks and pairs each of its frames with the first camera's
    frame 0.4 s later: both views only where both filmed. `threed.offsets_s` overrides; a camera outside the group
    is refused."""
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.errors import Sapiens2StreamError
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.runtime.live_mocap import file_offsets
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.threed.calibration import write_calibration

    for name, clap in (("cam1", 1.0), ("cam2", 0.6)):
        make_clip(tmp_path / f"{name}.mp4", frames=36, size=(240, 320), audio=True, clap_s=clap)
    write_calibration(tmp_path / "Calib.toml", S.rig(2))
    data = {
        "sources": [{"name": n, "uri": str(tmp_path / f"{n}.mp4")} for n in ("cam1", "cam2")],
        "detector": {"type": "full_frame"},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96], "flip": "off"}},
        "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False}},
        "threed": {"calibration": str(tmp_path / "Calib.toml")},
    }
    summary = Pipeline(from_dict(PipelineConfig, data)).run()["live_mocap"]
    assert summary["sync"] == "audio" and abs(summary["offsets_s"]["cam2"] - 0.4) < 0.01, summary
    records = [json.loads(line) for line in (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]
    both = [r["time"] for r in records if r["views"] == ["cam1", "cam2"]]
    assert len(both) == 24 and abs(both[0] - 0.4) < 0.02 and abs(both[-1] - 35 / 30) < 0.02  # 0.4 s to the end
    assert {tuple(r["views"]) for r in records} == {("cam1",), ("cam1", "cam2"), ("cam2",)}
    given = from_dict(PipelineConfig, {**data, "threed": {**data["threed"], "offsets_s": {"cam2": 0.25}}})
    assert file_offsets(given.threed, given.sources, ["cam1", "cam2"]) == ({"cam1": 0.0, "cam2": 0.25}, "given")
    wrong = from_dict(PipelineConfig, {**data, "threed": {**data["threed"], "offsets_s": {"cam9": 0.25}}})
    with pytest.raises(Sapiens2StreamError, match="threed.offsets_s: cam9 not a camera of the group"):
        Pipeline(wrong)  # refused as the pipeline is built (validate says it too)


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (.ci/run installs it)")
def test_the_console_shows_the_people_in_3d(tmp_path):
    """The console of a run with live motion capture: GET /api/v1/3d gives the latest moment (a walker seen by two
    cameras, triangulated in the calibration's world frame) and the front page, in Chromium, draws the skeleton
    from above and from the front. Without a group the route says so (404) and the page shows no 3-D section."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from playwright.sync_api import sync_playwright

    from sapiens2_stream.config import from_dict
    from sapiens2_stream.console.events import RecentEvents
    from sapiens2_stream.console.live import LiveViews
    from sapiens2_stream.console.pipeline_backend import PipelineBackend
    from sapiens2_stream.console.server import Console
    from sapiens2_stream.runtime.options import ConsoleConfig
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from tests.test_console import call
    from tests.test_integrations import wait_until
    from tests.test_pipeline import free_port

    rig, live, stages = mocap(tmp_path, 2)
    rng = np.random.default_rng(5)
    for i in range(10):
        for camera in rig:
            live.add(camera.name, i / FPS, *S.seen_by(camera, [S.walking(i / FPS)], rng), arrived=float(i))
    live.latest["people"][0]["kinematics"] = {"knee_angle_r": 41.6, "hip_flexion_l": -12.3}  # as kinematics: adds
    consoles, cfg = {}, from_dict(PipelineConfig, {"outputs": {"dir": str(tmp_path)}})
    for name, group in (("with", stages), ("without", None)):
        run = SimpleNamespace(cfg=cfg, streams=[], cross=group)  # a pipeline's console reads these
        console = Console(PipelineBackend(run, LiveViews(), RecentEvents()), ConsoleConfig(port=free_port()))
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_until_complete, args=(console.serve(),), daemon=True)
        thread.start()
        consoles[name] = (console, loop, thread)
    try:
        port, other = consoles["with"][0].port, consoles["without"][0].port
        wait_until(lambda: call(port, "/api/v1/3d")[0] == 200 and call(other, "/api/v1/3d")[0] == 404, 30, "consoles")
        moment = json.loads(call(port, "/api/v1/3d")[2])
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function("window.linksDrawn > 0", timeout=15000)
                lit = page.evaluate("""() => { const c = document.getElementById('above');
                    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    let n = 0; for (let i = 0; i < d.length; i += 4) n += d[i] + d[i + 1] + d[i + 2] > 60;
                    return n; }""")
                info = page.evaluate("document.getElementById('threed-info').textContent")
                coordinates = page.evaluate("[...document.querySelectorAll('#kinematics tr')].map(r => r.innerText)")
                page.goto(f"http://127.0.0.1:{other}/")
                page.wait_for_timeout(1000)
                hidden = page.evaluate("document.getElementById('threed').hidden")
            finally:
                browser.close()
    finally:
        for console, loop, thread in consoles.values():
            loop.call_soon_threadsafe(console.close)
            thread.join(10)
    assert not any(thread.is_alive() for *_, thread in consoles.values()), "a console's server did not end"
    assert abs(moment["time"] - 0.9) < 1e-6 and moment["views"] == ["cam1", "cam2"]
    header, row = (line.split("\t") for line in coordinates)  # each person's OpenSim coordinates, rounded
    assert dict(zip(header, row, strict=True))["knee_angle_r"] == "42" and "-12" in row and "-" in row
    (person,) = moment["people"]
    truth = S.world_truth([S.walking(0.9)])[0]
    made = [k for k in range(308) if person["keypoints_3d"][k] is not None and np.isfinite(truth[k]).all()]
    assert len(made) >= 15
    assert np.median([np.linalg.norm(np.array(person["keypoints_3d"][k]) - truth[k]) for k in made]) < 0.05
    assert len(moment["links"]) == 19 and lit > 100 and info.startswith("1 people at 0.90 s") and hidden


def test_resume_continues_a_groups_moments_and_its_files_hold_the_whole_take(tmp_path, tiny_dir):
    """A run of a calibrated pair (a walking body filmed by both, angles on) stopped after 8 frames, then
    `--resume`: OUTPUT/3d/keypoints_3d.jsonl keeps the interrupted run's moments as they were and goes on (it used
    to start again from the cut, losing them), the walker keeps id 1, and the per-person files made at the end
    (TRC, angles) hold every moment of the take, as an uninterrupted run's do."""
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.threed.calibration import write_calibration
    from tests.test_extending import stopped_after

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=40, size=(240, 320), people=1)
    rig = {camera.name: camera for camera in S.rig(2)}
    write_calibration(tmp_path / "Calib.toml", list(rig.values()))

    def config(out):
        return from_dict(PipelineConfig, {
            "sources": [{"name": "cam1", "uri": str(clip)}, {"name": "cam2", "uri": str(clip)}],
            "detector": {"type": "full_frame"},
            "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
            "outputs": {"dir": str(out), "video": {"enabled": False}}, "runtime": {"queue_size": 2},
            "smoothing": {"method": "none"}, "angles": {"enabled": True},
            "threed": {"calibration": str(tmp_path / "Calib.toml")},
        })  # fmt: skip

    def moments(out):
        return [json.loads(line) for line in (out / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]

    def rows(path):
        return [line for line in path.read_text().splitlines()[6:] if line.strip()]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    Pipeline(config(whole), stages=[S.Filmed(rig)]).run()
    stopped_after(Pipeline(config(cut), stages=[S.Filmed(rig)]), 8)
    before = moments(cut)
    assert 8 <= len(before) < 40
    Pipeline(config(cut), resume=True, stages=[S.Filmed(rig)]).run()
    after = moments(cut)
    assert after[: len(before)] == before and len(after) == len(moments(whole)) == 40
    assert [m["time"] for m in after] == [m["time"] for m in moments(whole)]
    assert {p["id"] for m in after for p in m["people"]} == {1}
    for name in ("tracks_3d/person_0001.trc", "angles/person_0001_angles_3d.mot"):
        assert len(rows(cut / "3d" / name)) == len(rows(whole / "3d" / name)) >= 39, name


def test_group_files_are_written_once_all_closed_and_one_that_fails_spares_the_others(tmp_path, monkeypatch):
    """write_3d's and group_angles' per-person files are jobs handed to the group's files, written into the output
    folder after every group stage closed; one that raises (the TRC writer here) is said and counted, and the
    angles' files are still written."""
    from sapiens2_stream.runtime.stages import write_3d

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(write_3d, "write_track", broken)
    rig, stages, enabled = S.camera_group(tmp_path, 2, angles={"enabled": True})
    assert enabled == ["triangulate", "group_angles", "write_3d"]
    from sapiens2_stream.models.metadata import keypoint_index

    named = keypoint_index()
    bodies = [{n: p for n, p in S.skeleton(S.walking(i / 10)).items() if n in named} for i in range(20)]
    S.film(stages, rig, bodies, np.random.default_rng(2))
    assert not list((tmp_path / "out" / "3d").glob("tracks_3d/*"))
    assert list((tmp_path / "out" / "3d").glob("angles/person_0001_angles_3d.mot"))
    assert [(e["stage"], e["error"]) for e in stages.errors] == [("files 3d/tracks_3d", "OSError: disk full")]
