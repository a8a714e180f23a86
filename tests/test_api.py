"""The Python API (`sapiens2_stream.stream`, `astream`, `run`, `predict`, `Sapiens2`, `Result`) with real runs of
the tiny models, against the command line's own records."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import sapiens2_stream as s2
import sapiens2_stream.api as api_module
from sapiens2_stream.cli import main
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.synthetic import make_clip
from tests.test_pipeline import assert_same_records, read_jsonl, source_summary

BOXES = [[40, 40, 60, 150], [180, 50, 60, 150]]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "walk.mp4"
    make_clip(path, frames=10, size=(240, 320), people=2)
    return path


def options(tiny_dir, **more) -> dict:
    return {"models": {"pose": str(tiny_dir["pose"])}, "detector": {"type": "fixed", "boxes": BOXES},
            "device": "cpu", "set": {"models.pose.input_size": [128, 96]}, **more}  # fmt: skip


def api_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("sapiens2", "stream-"))]


def test_stream_gives_the_command_lines_records(tmp_path, tiny_dir, clip):
    """The same file through `stream()` and through `sapiens2-stream run`: the same records, keypoint for keypoint
    (`Result.to_dict()` is the JSONL line); nothing written unless asked."""
    yaml = tmp_path / "p.yaml"
    yaml.write_text(json.dumps({"source": {"uri": str(clip)}, "detector": {"type": "fixed", "boxes": BOXES},
                                "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
                                "runtime": {"device": "cpu"}}))  # fmt: skip
    assert main(["run", str(yaml), "--output", str(tmp_path / "cli")]) == 0
    results = list(s2.stream(str(clip), **options(tiny_dir)))
    assert [r.frame_index for r in results] == list(range(10)) and all(r.source == str(clip) for r in results)
    cli = read_jsonl(tmp_path / "cli" / "results.jsonl")
    ours = [r.to_dict() for r in results]
    for a, b in zip(cli, ours, strict=True):
        a.pop("wall"), b.pop("wall")
    assert_same_records(cli, ours)
    assert results[0].people[0].keypoints.shape == (308, 2) and len(Result_names := results[0].keypoint_names) == 308
    assert Result_names[0] == "nose" and not api_threads()


def test_without_an_output_no_file_is_written_anywhere(tmp_path, tiny_dir, clip, monkeypatch):
    """output=None with every stage that writes files (people in metres, angles, events): each is off by its own
    declaration (`files_off`: the 3-D stage's world.json and tracks, the angles files, the events log), so the run's
    scratch folder stays empty, while the results still carry what those stages add."""
    scratch = tmp_path / "scratch"
    kept = SimpleNamespace(name=str(scratch), cleanup=lambda: None)
    monkeypatch.setattr(api_module.tempfile, "TemporaryDirectory", lambda prefix: kept)
    everywhere = {"zones": {"frame": {"polygon": [[0, 0], [1, 0], [1, 1], [0, 1]]}}}
    more = options(tiny_dir, angles=True, threed=True)
    more["models"]["pointmap"] = str(tiny_dir["pointmap"])
    more["set"].update({"events": everywhere, "models.pointmap.input_size": [64, 48]})
    results: list = []
    summary = s2.run(str(clip), results.append, **more)
    people = [p for r in results for p in r.people]
    assert len(results) == 10 and people and all(p.keypoints_3d is not None for p in people)
    assert source_summary(summary)["threed"]["tracks"] == len({p.track_id for p in people})  # counted, files or not
    assert any(r.events for r in results)  # the zone's "enter"
    assert not [p for p in scratch.rglob("*") if p.is_file()]


def test_several_sources_and_frames_from_the_callers_own_code(tiny_dir, clip):
    """A list of sources: each result says which; a generator of BGR pictures with timestamps as a source."""
    results = list(s2.stream([str(clip), str(clip)], **options(tiny_dir)))
    assert sorted({r.source for r in results}) == ["walk", "walk-2"] and len(results) == 20

    def camera():  # a robot's camera: BGR pictures, its own clock
        for i in range(6):
            picture = np.zeros((240, 320, 3), np.uint8)
            picture[..., 0] = 255  # pure blue in BGR
            yield picture, 0.25 * i

    frames = list(s2.stream(camera(), bgr=True, keep_frames=True, **options(tiny_dir)))
    assert [r.time_s for r in frames] == [0.25 * i for i in range(6)]
    assert frames[0].image[..., 2].min() == 255 and frames[0].image[..., 0].max() == 0  # blue, as RGB
    assert frames[0].plot().shape == (240, 320, 3)


def test_a_takes_pose2sim_project_from_the_api_is_the_command_lines(tmp_path, tiny_dir, clip):
    """`stream([two cameras], pipeline=take.yaml, output=...)` with `outputs.pose2sim` writes the project `run`
    writes from the same YAML, file for file (it used to fail: "needs the pose model and two or more sources");
    with no output nothing is written, the project neither."""
    take = tmp_path / "take.yaml"
    take.write_text(json.dumps({"detector": {"type": "fixed", "boxes": BOXES},
                                "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
                                "runtime": {"device": "cpu"}, "outputs": {"pose2sim": {"enabled": True}}}))  # fmt: skip
    cameras = [f"cam1={clip}", f"cam2={clip}"]
    assert main(["run", str(take), *(a for c in cameras for a in ("--source", c)), "--output", str(tmp_path / "cli"),
                 "--no-progress"]) == 0  # fmt: skip
    results = list(s2.stream(cameras, pipeline=str(take), output=str(tmp_path / "api")))
    assert sorted({r.source for r in results}) == ["cam1", "cam2"] and len(results) == 20

    def project(root):
        return {p.relative_to(root).as_posix(): p for p in sorted((root / "pose2sim").rglob("*")) if p.is_file()}

    cli, api = project(tmp_path / "cli"), project(tmp_path / "api")
    assert len(cli) > 20 and list(cli) == list(api)
    for name in cli:
        if name.endswith(".json"):
            assert json.loads(cli[name].read_text()) == json.loads(api[name].read_text()), name
    assert len(list(s2.stream(cameras, pipeline=str(take)))) == 20  # output=None: the project is off too


def test_a_camera_groups_moments_reach_on_moment_as_its_3d_jsonl_has_them(tmp_path, tiny_dir, clip, monkeypatch):
    """`stream([cam1, cam2], threed=..., angles=True, on_moment=...)`: each moment of the calibrated pair, once every
    group stage has added to it, on the group stages' thread: the lines of OUTPUT/3d/keypoints_3d.jsonl one for one
    (angles included); with no output the same moments still come, and no file is written anywhere; without a
    camera group, one clear line."""
    from sapiens2_stream.threed.calibration import write_calibration
    from tests import scenes3d as S

    rig = {camera.name: camera for camera in S.rig(2)}
    write_calibration(tmp_path / "Calib.toml", list(rig.values()))
    moments, threads = [], set()

    def told(moment):
        moments.append(moment)
        threads.add(threading.current_thread().name)

    scratch = tmp_path / "scratch"  # where the run without an output puts its folder (kept here to be looked at)
    kept = SimpleNamespace(name=str(scratch), cleanup=lambda: None)
    monkeypatch.setattr(api_module.tempfile, "TemporaryDirectory", lambda prefix: kept)
    cameras = [f"cam1={clip}", f"cam2={clip}"]
    group = options(
        tiny_dir,
        threed={"calibration": str(tmp_path / "Calib.toml")},
        angles=True,
        smoothing="none",
        stages=[S.Filmed(rig)],
    )
    results = list(s2.stream(cameras, output=str(tmp_path / "out"), on_moment=told, **group))
    lines = [json.loads(line) for line in (tmp_path / "out" / "3d" / "keypoints_3d.jsonl").read_text().splitlines()]
    assert len(results) == 20 and len(lines) == 10 and [m.to_dict() for m in moments] == lines
    people = [p for m in moments for p in m.people]
    assert people and all("angles" in p for p in people) and threads == {"group-stages"}
    again = []
    list(s2.stream(cameras, on_moment=again.append, **group))
    assert [m.to_dict() for m in again] == lines
    assert not [p for p in scratch.rglob("*") if p.is_file()]  # output=None: no file, not even in its scratch
    with pytest.raises(s2.errors.Sapiens2StreamError, match="on_moment: no camera group"):
        list(s2.stream(str(clip), on_moment=again.append, **options(tiny_dir)))


def test_leaving_the_loop_stops_the_run_and_leaves_complete_outputs(tmp_path, tiny_dir, clip):
    """`break` after 3 results with output=: no thread of the run left, the video plays and the JSONL has whole
    lines only."""
    from sapiens2_stream.io.video_writer import playable_frames

    results = s2.stream(str(clip), output=str(tmp_path / "out"), **options(tiny_dir))
    for i, _ in enumerate(results):
        if i == 2:
            break
    results.close()
    assert not api_threads()
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) >= 3 and all(json.loads(line) for line in lines)
    assert playable_frames(tmp_path / "out" / "annotated.mp4") >= 3


def test_errors_reach_the_caller_typed(tiny_dir, tmp_path):
    with pytest.raises(Sapiens2StreamError, match="no-such.mp4"):
        next(s2.stream(str(tmp_path / "no-such.mp4"), **options(tiny_dir)))
    with pytest.raises(Sapiens2StreamError, match="unknown option"):
        next(s2.stream("x.mp4", colour="red", **options(tiny_dir)))
    assert not api_threads()


def test_a_slow_consumer_of_a_live_source(tiny_dir):
    """A 10 frames/s camera read by a consumer taking 0.3 s a result: with buffer="latest" each result it gets is
    fresh (under a second old) and the ones it missed are counted (`skipped`); with "all" it gets every one, in
    order."""
    camera = "lavfi:testsrc2=size=320x240:rate=10,realtime"
    session = s2.Sapiens2(**options(tiny_dir))
    try:
        for buffer in ("latest", "all"):
            got, ages, skipped = [], [], 0
            results = session.stream(camera, buffer=buffer)
            for result in results:
                ages.append(time.time() - result.raw.frame.wall_s)
                got.append(result.frame_index)
                skipped += result.skipped
                time.sleep(0.3)
                if len(got) == 8:
                    break
            results.close()
            if buffer == "latest":
                assert max(ages[2:]) < 1.0 and got[-1] - got[0] > len(got) + 5, (got, ages)  # skipped ahead
                assert skipped >= got[-1] - got[0] - len(got) + 1 - 2  # counted (a frame or two dropped earlier)
            else:
                assert got == list(range(got[0], got[0] + 8)) and skipped == 0  # every result, none skipped
    finally:
        session.close()
    assert not api_threads()


def test_astream_and_run(tiny_dir, clip):
    async def collect():
        return [r.frame_index async for r in s2.astream(str(clip), **options(tiny_dir))]

    assert asyncio.run(collect()) == list(range(10))
    seen = []
    summary = s2.run(str(clip), on_result=lambda r: seen.append(r.frame_index), **options(tiny_dir))
    assert seen == list(range(10)) and summary["totals"]["frames_out"] == 10


def test_predict_equals_the_streams_per_frame_results(tiny_dir, clip):
    """Pictures one by one through `predict` (batched, nothing smoothed across them) give the keypoints the stream
    gives for the same frames."""
    with s2.Sapiens2(**options(tiny_dir)) as session:
        streamed = list(session.stream(str(clip), keep_frames=True))
        predicted = session.predict([r.image for r in streamed])
    assert len(predicted) == len(streamed)
    for a, b in zip(streamed, predicted, strict=True):
        for pa, pb in zip(a.people, b.people, strict=True):
            assert np.allclose(pa.keypoints, pb.keypoints, atol=0.05)


def test_supervision_draws_and_counts_our_results(tiny_dir, clip):
    """`to_supervision()`: supervision's own annotators draw our boxes (with tracker ids) and keypoints, and its
    LineZone counts a person whose box crosses a line (the boxes of a synthetic walk, through our Result)."""
    import supervision as sv

    from sapiens2_stream.api import Result
    from sapiens2_stream.runtime.results import Person

    result = next(iter(s2.stream(str(clip), keep_frames=True, **options(tiny_dir))))
    detections, keypoints = result.to_supervision()
    assert list(detections.tracker_id) == [p.track_id for p in result.people] and keypoints.xy.shape[1:] == (308, 2)
    picture = sv.BoxAnnotator().annotate(result.image.copy(), detections)
    picture = sv.VertexAnnotator(radius=2).annotate(picture, keypoints)
    assert (picture != result.image).any()

    line = sv.LineZone(start=sv.Point(160, 0), end=sv.Point(160, 240), minimum_crossing_threshold=1)
    for i in range(12):  # one person walking left to right across x = 160
        person = Person(7, np.array([40.0 + 20 * i, 60, 40, 120]), 0.9, np.zeros((308, 2)), np.ones(308))
        frame = Result("cam", i, i / 10, [person])
        line.trigger(frame.to_supervision()[0])
    assert line.in_count + line.out_count == 1


def test_the_quickstart_notebook_runs_in_a_real_kernel():
    """examples/quickstart.ipynb executed headless through a Jupyter kernel (nbclient + ipykernel): no cell fails, the
    figure is drawn and the printed figures are there."""
    from pathlib import Path

    import nbformat
    from nbclient import NotebookClient

    path = Path(__file__).parent.parent / "examples" / "quickstart.ipynb"
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
                   ).execute()  # fmt: skip
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "frames: 12, people in the first: 2" in text and "tracker ids: [1, 2]" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert not [o for o in outputs if o.output_type == "error"]
