"""What the 3-D stage writes, read back by the tools it is for: Blender's own BVH importer (the bpy wheel), Pose2Sim's
TRC reader, the c3d package's reader; and the stage inside a pipeline (JSONL, summary, world.json, tracks_3d/,
`export mocap`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import c3d
import numpy as np

from sapiens2_stream.cli import main
from sapiens2_stream.export.motion3d import HALPE_26_NAMES, joint_positions, markers, write_bvh, write_c3d, write_trc
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.threed_run import ROW, SPOOL, TrackSpool
from sapiens2_stream.threed.body import index
from tests import scenes3d as S
from tests.test_pipeline import config, read_jsonl

BLENDER_READ = """
import json, sys
import bpy  # first: it puts Blender's own modules (addon_utils) on the path
import addon_utils
bpy.ops.wm.read_factory_settings(use_empty=True)
addon_utils.enable("io_anim_bvh")
path, frames, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
bpy.ops.import_anim.bvh(filepath=path, global_scale=1.0, rotate_mode="NATIVE", axis_forward="-Z", axis_up="Y",
                        use_fps_scale=False, update_scene_fps=False, frame_start=1)
armature = next(o for o in bpy.data.objects if o.type == "ARMATURE")
heads = []
for frame in range(1, frames + 1):
    bpy.context.scene.frame_set(frame)
    heads.append({b.name: list(armature.matrix_world @ b.head) for b in armature.pose.bones})
json.dump(heads, open(out, "w"))
"""


def world_keypoints(frames: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """[T, 308, 3] world keypoints of a body walking, turning and crouching (tests/scenes3d.py), and its times."""
    ids = index()
    xyz = np.full((frames, 308, 3), np.nan)
    for t in range(frames):
        pose = S.walking(t / 10) if t < frames // 2 else S.crouching(t / 10 - 1)
        pose.yaw += 0.08 * t
        for name, point in S.skeleton(pose).items():
            if name in ids:
                xyz[t, ids[name]] = point
    return xyz, np.arange(frames) / 10


def test_blenders_bvh_importer_puts_every_joint_where_our_keypoints_are(tmp_path):
    """Our BVH through Blender 4.2's own importer (the io_anim_bvh add-on of the bpy wheel): every joint's head, in
    Blender's world, within 1 cm of the keypoints it came from, at every frame."""
    xyz, times = world_keypoints()
    write_bvh(tmp_path / "walk.bvh", times, xyz)
    script = tmp_path / "read.py"
    script.write_text(BLENDER_READ)
    subprocess.run([sys.executable, script, tmp_path / "walk.bvh", str(len(times)), tmp_path / "heads.json"],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    heads = json.loads((tmp_path / "heads.json").read_text())
    wanted = joint_positions(xyz)
    errors = [np.linalg.norm(np.array(heads[t][name]) - wanted[name][t]) for t in range(len(times)) for name in wanted]
    print(f"Blender's joints: worst {max(errors) * 1000:.2f} mm over {len(errors)}")
    assert len(heads[0]) == len(wanted) and max(errors) <= 0.01


def test_pose2sims_trc_reader_and_the_c3d_reader_read_ours(tmp_path):
    """The TRC (metres, Y up as OpenSim wants) through Pose2Sim's own reader, the C3D (mm, Z up) through the c3d
    package's: the markers' names and positions come back."""
    from Pose2Sim.common import read_trc

    xyz, times = world_keypoints(12)
    points = markers(xyz)
    points[3, 0] = np.nan  # a marker not seen in one frame
    write_trc(tmp_path / "t.trc", times, points, HALPE_26_NAMES)
    data, frames, time_col, names, _ = read_trc(tmp_path / "t.trc")
    assert names == list(HALPE_26_NAMES) and list(frames) == list(range(1, 13))
    assert np.allclose(time_col, times)
    back = data.to_numpy(np.float64).reshape(12, len(names), 3)[..., [2, 0, 1]]  # Y up back to Z up
    assert np.isnan(back[3, 0]).all()
    back[3, 0] = points[3, 0] = 0
    assert np.allclose(back, points, atol=1e-5, equal_nan=True)

    write_c3d(tmp_path / "t.c3d", times, points, HALPE_26_NAMES)
    with open(tmp_path / "t.c3d", "rb") as handle:
        reader = c3d.Reader(handle)
        assert [n.strip() for n in reader.point_labels] == list(HALPE_26_NAMES)
        assert abs(reader.point_rate - 10.0) < 1e-3
        got = np.array([frame[1][:, :3] for frame in reader.read_frames()])
    seen = np.isfinite(points)
    assert np.allclose((got / 1000.0)[seen], points[seen], atol=1e-4)


def test_the_threed_stage_in_a_pipeline(tmp_path, tiny_dir):
    """Pose and pointmap models: each person's keypoints_3d (camera frame, 308 points or null, confidence in [0, 1])
    in the JSONL, the camera in the summary, world.json and a TRC, C3D (and a BVH when a whole body was seen) per
    track; `export mocap` writes the same from the finished run's records."""
    from sapiens2_stream.io.synthetic import make_clip

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=12, size=(240, 320), people=2)
    cfg = config(tmp_path, tiny_dir, clip, tasks=("pose", "pointmap"), outputs={"video": {"enabled": False}})
    summary = Pipeline(cfg).run()
    out = tmp_path / "out"
    records = read_jsonl(out / "results.jsonl")
    people = [p for r in records for p in r["people"]]
    assert len(records) == 12 and len(people) == 24
    for p in people:
        assert p["keypoints_3d_frame"] == "camera" and len(p["keypoints_3d"]) == 308
        assert all(v is None or len(v) == 3 for v in p["keypoints_3d"])
        assert all(0 <= c <= 1 for c in p["keypoints_3d_confidence"])
    threed = summary["sources"]["pipeline"]["threed"]
    assert threed["intrinsics_from"] == "pointmap" and threed["tracks"] == 2
    assert json.loads((out / "world.json").read_text())["units"] == "m"
    files = sorted(p.name for p in (out / "tracks_3d").iterdir())
    assert {"track_0001.trc", "track_0001.c3d", "track_0002.trc", "track_0002.c3d"} <= set(files)

    assert not (out / SPOOL).exists()  # the rows waited on disk until the files were written, then went

    assert main(["export", "mocap", str(out), "--output", str(tmp_path / "again"), "--formats", "trc"]) == 0
    again = sorted(p.name for p in (tmp_path / "again" / "tracks_3d").iterdir())
    assert again == ["track_0001.trc", "track_0002.trc"]
    from Pose2Sim.common import read_trc

    for name in again:  # the live run's rows, back from its spool, are the records' rows
        ours, theirs = read_trc(out / "tracks_3d" / name)[0], read_trc(tmp_path / "again" / "tracks_3d" / name)[0]
        assert len(ours) == len(theirs) == 12


def test_the_3d_rows_wait_on_disk_not_in_memory(tmp_path):
    """A long live run's 3-D rows: 2,000 person-frames (9.9 MB of rows) add well under a megabyte to Python's
    memory; read back, one track at a time, they are the rows given."""
    import tracemalloc

    rng = np.random.default_rng(0)
    spool = TrackSpool(tmp_path / SPOOL)
    given = {1: [], 2: []}
    tracemalloc.start()
    for i in range(1000):
        for track_id in (1, 2):
            xyz, confidence = rng.random((308, 3), np.float32), rng.random(308, np.float32)
            spool.add(track_id, 1000.0 + i / 30, xyz, confidence)
            if i % 100 == 0:
                given[track_id].append((i, xyz, confidence))
        if i == 500:
            spool.end(1)  # the track left the picture and came back: its file is reopened
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000 and sum(p.stat().st_size for p in (tmp_path / SPOOL).iterdir()) == 2000 * ROW.itemsize
    assert sorted(spool) == [1, 2] and len(spool) == 2
    times, xyz, confidence = spool[2]
    assert times.dtype == np.float64 and np.allclose(np.diff(times), 1 / 30)  # seconds kept exact over a long run
    for i, xyz_i, confidence_i in given[2]:
        assert np.array_equal(xyz[i], xyz_i) and np.array_equal(confidence[i], confidence_i)
    spool.remove()
    assert not (tmp_path / SPOOL).exists()


def test_export_mocap_of_a_run_without_3d_says_so(tmp_path, tiny_dir, capsys):
    from sapiens2_stream.io.synthetic import make_clip

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=4, size=(240, 320), people=1)
    Pipeline(config(tmp_path, tiny_dir, clip, outputs={"video": {"enabled": False}})).run()
    assert main(["export", "mocap", str(tmp_path / "out")]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "keypoints_3d" in error[0]
    assert main(["export", "mocap", str(Path(tmp_path / "nowhere"))]) != 0


def test_the_3d_views_show_a_person_where_they_stand():
    """outputs.video.view_3d: from above, a person standing at the world's origin is drawn around the middle of the
    left panel; from the side, feet on the panel's floor line and head well above it; nothing outside the two
    panels changes."""
    from types import SimpleNamespace

    from sapiens2_stream.io.draw import draw_views_3d

    xyz, _ = world_keypoints(1)
    standing = xyz[0] - [np.nanmean(xyz[0, :, 0]), np.nanmean(xyz[0, :, 1]), 0]  # at the origin, on the floor
    person = SimpleNamespace(keypoints_3d=standing, keypoints_3d_confidence=np.ones(308))
    frame = np.zeros((480, 640, 3), np.uint8)
    draw_views_3d(frame, [person], np.eye(4))
    size = 480 // 4
    top = frame[480 - size - 4 : 480 - 4, 640 - 2 * (size + 4) : 640 - 2 * (size + 4) + size]
    side = frame[480 - size - 4 : 480 - 4, 640 - (size + 4) : 640 - 4]
    lit_top, lit_side = np.argwhere(top[1:-1, 1:-1].max(2) > 60), np.argwhere(side[1:-1, 1:-1].max(2) > 60)
    assert len(lit_top) and len(lit_side)
    assert abs(lit_top[:, 1].mean() - size / 2) < size / 6  # around x = 0
    assert lit_side[:, 0].max() > size * 0.9  # the feet on the floor line at the bottom
    assert lit_side[:, 0].min() < size * 0.75  # the head 1.7 m up (of a 5 m wide view)
    frame[480 - size - 4 :, 640 - 2 * (size + 4) :] = 0
    assert not frame.any()


def test_a_calibration_gives_the_intrinsics_and_the_world_frame(tmp_path):
    """threed.calibration: the camera's own intrinsics and its world frame (Pose2Sim's Calib.toml, world -> camera):
    the TRC's markers land on the synthetic body's true world positions (the visible side, 2 cm on average), and
    world.json says whose frame it is."""
    from types import SimpleNamespace

    import cv2
    from Pose2Sim.common import read_trc

    from sapiens2_stream.config import from_dict
    from sapiens2_stream.io.stage_files import FileOutbox, StageFilesSink
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.runtime.results import FrameResult, Person
    from sapiens2_stream.runtime.threed_run import ThreeDRun
    from sapiens2_stream.threed.calibration import Camera, write_calibration

    cam = S.camera()
    rotation = cv2.Rodrigues(cam.rotation)[0].ravel()
    write_calibration(tmp_path / "Calib.toml", [Camera("cam1", (S.WIDTH, S.HEIGHT), cam.intrinsics, np.zeros(4),
                                                       rotation, -cam.rotation @ cam.centre)])  # fmt: skip
    threed = {"calibration": str(tmp_path / "Calib.toml"), "formats": ["trc"]}
    cfg = from_dict(PipelineConfig, {"source": {"uri": "x.mp4"}, "outputs": {"dir": str(tmp_path / "out")},
                                     "threed": threed})  # fmt: skip
    outbox = FileOutbox()
    run = ThreeDRun(cfg.threed, cfg.outputs.dir, "cam1", outbox)
    truth = []
    for i in range(20):
        pose = S.walking(i / 10)
        view = S.render(cam, [pose])
        frame = SimpleNamespace(index=i, pts_s=i / 10, wall_s=0.0, rgb=None)
        person = Person(1, np.array([0.0, 0, 1, 1]), 1.0, view.keypoints[0], view.scores[0])
        run(FrameResult(frame, [person], pointmap=view.pointmap))
        truth.append(S.skeleton(pose))
    run.close()
    assert not (tmp_path / "out" / "world.json").exists()  # handed to the outputs, which write it
    StageFilesSink(tmp_path / "out", outbox).close()
    assert json.loads((tmp_path / "out" / "world.json").read_text())["frame"] == "calibration"
    data, *_ = read_trc(tmp_path / "out" / "tracks_3d" / "track_0001.trc")
    got = data.to_numpy(np.float64).reshape(20, 26, 3)[..., [2, 0, 1]]
    for name in ("RShoulder", "RElbow", "RWrist", "RHip", "RKnee", "RAnkle"):  # the side the camera sees
        marker = HALPE_26_NAMES.index(name)
        joint = {"R": "right_"}[name[0]] + {"Shoulder": "shoulder", "Elbow": "elbow", "Wrist": "wrist", "Hip": "hip",
                                            "Knee": "knee", "Ankle": "ankle"}[name[1:]]  # fmt: skip
        errors = [np.linalg.norm(got[t, marker] - truth[t][joint]) for t in range(20)]
        assert np.mean(errors) < 0.02 and max(errors) < 0.05, (name, errors)
