"""The kata of issue 46: extending the tool is one new file plus at most one line in the order list.

- a built-in stage registered after `smooth` (a joint-angles-like one) lands before `threed`, whatever order its
  file registers in, and its fields reach the JSONL; its options class is its section of the YAML;
- a one-file CSV output (`examples/people_csv_sink.py`) gets the segments, --resume's appending and a fleet
  worker's fence as the built-in files do;
- every component kind can be listed (`sapiens2-stream list ...`).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pydantic
import pytest
from pydantic import Field

from sapiens2_stream import config as kit
from sapiens2_stream.cli import main
from sapiens2_stream.config import from_dict, section
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.sink import Fenced
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.registry import STAGES
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig, assembled_config
from sapiens2_stream.runtime.stages import base, register_stage
from sapiens2_stream.schema import field_comments
from tests.conftest import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
CSV_SINK = {"name": "people_csv", "use": f"{ROOT / 'examples' / 'people_csv_sink.py'}:PeopleCSV"}


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "walk.mp4"
    make_clip(path, frames=20, size=(120, 160), fps=10, people=1)
    return path


def config(tiny_dir, clip: Path, out: Path, **sections) -> PipelineConfig:
    return from_dict(PipelineConfig, pipeline_data(tiny_dir, clip, out, **sections))


def pipeline_data(tiny_dir, clip: Path, out: Path, **sections) -> dict:
    data = {
        "source": {"uri": str(clip)},
        "detector": {"type": "fixed", "boxes": [[40, 10, 60, 100]]},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [64, 48]}},
        "runtime": {"max_frames_per_batch": 2},
        "outputs": {"dir": str(out), "video": {"enabled": False}},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return data


class Lean(base.Stage):
    """Joint-angles-like: a number per person from its smoothed keypoints (the trunk's lean, degrees)."""

    def __call__(self, state, result) -> None:
        for person in result.people:
            shoulders, hips = person.smoothed[5:7].mean(0), person.smoothed[9:11].mean(0)
            dx, dy = shoulders - hips
            person.extra["lean"] = round(float(np.degrees(np.arctan2(dx, -dy))), 3)


@pytest.fixture
def lean_stage(monkeypatch):
    """`Lean` as a built-in stage: its name in the order list after smooth, registered last (as a file whose name
    sorts after every other would be)."""
    i = base.ORDER.index("smooth")
    monkeypatch.setattr(base, "ORDER", (*base.ORDER[: i + 1], "joint_angles", *base.ORDER[i + 1 :]))
    with STAGES.kept():
        register_stage("joint_angles")(Lean)
        yield Lean


def test_a_built_in_stage_after_smooth_lands_before_threed_and_reaches_the_jsonl(tmp_path, tiny_dir, clip,
                                                                                 lean_stage):  # fmt: skip
    assert list(STAGES)[-1] == "joint_angles"  # registered after write
    pipeline = Pipeline(config(tiny_dir, clip, tmp_path / "out"))
    names = [s.name for s in pipeline.source_stages]
    assert names == ["temporal", "smooth", "joint_angles", "threed", "angles", "kinematics", "events", "write"]
    pipeline.run()
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert len(records) == 20 and all("lean" in p["extra"] for r in records for p in r["people"])


def test_validate_prints_the_stage_in_its_place(tmp_path, tiny_dir, clip, lean_stage, capsys):
    import yaml

    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"source": {"uri": str(clip)}, "detector": {"type": "full_frame"},
                                    "models": {"pose": {"source": str(tiny_dir["pose"])}}}))  # fmt: skip
    assert main(["validate", str(spec)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == ("stages: take -> detect -> track -> infer -> smooth -> "
                                                        "joint_angles -> write")  # fmt: skip


@section
class LeanOptions:
    """The trunk's lean (`joint_angles:`)."""

    digits: Annotated[int, Field(ge=0, le=6)] = 3  # decimals of the lean, in degrees


class LeanWithOptions(Lean):
    """`Lean` with keys of its own: it names its section, whose options class its package declares
    (`@section(key="joint_angles")`, in the package's light `options` module); it is given only its section and
    the source's small context."""

    section = "joint_angles"

    def open(self, options: LeanOptions, ctx) -> LeanOptions:
        assert not hasattr(ctx, "cfg") and ctx.label == "pipeline"  # no side door to the whole configuration
        return options

    def __call__(self, state: LeanOptions, result) -> None:
        super().__call__(state, result)
        for person in result.people:
            person.extra["lean"] = round(person.extra["lean"], state.digits)


def test_a_built_in_stage_with_options_gets_its_section_in_the_yaml(tmp_path, tiny_dir, clip, monkeypatch):
    """A declared section is a section of the YAML: the configuration assembled from the declarations takes it
    (validated, with the did-you-mean of every section), the JSON Schema describes it from the class's comments,
    and the stage reads it."""
    monkeypatch.setattr(kit, "SECTIONS", dict(kit.SECTIONS))  # as `@section(key="joint_angles")` would, for now
    kit.declare("joint_angles", LeanOptions)
    config_class = assembled_config()
    assert config_class().joint_angles == LeanOptions()
    with pytest.raises(Sapiens2StreamError, match=r"unknown key 'joint_angles.digit' \(did you mean 'digits'\?\)"):
        from_dict(config_class, {"joint_angles": {"digit": 1}})
    with pytest.raises(Sapiens2StreamError, match=r"joint_angles.digits must be at most 6, got 9"):
        from_dict(config_class, {"joint_angles": {"digits": 9}})
    schema = pydantic.TypeAdapter(config_class).json_schema()["$defs"]["LeanOptions"]
    assert field_comments(LeanOptions) == {"digits": "decimals of the lean, in degrees"}
    assert schema["properties"]["digits"]["maximum"] == 6
    i = base.ORDER.index("smooth")
    monkeypatch.setattr(base, "ORDER", (*base.ORDER[: i + 1], "joint_angles", *base.ORDER[i + 1 :]))
    with STAGES.kept():
        register_stage("joint_angles")(LeanWithOptions)
        cfg = from_dict(config_class, pipeline_data(tiny_dir, clip, tmp_path / "out", joint_angles={"digits": 0}))
        Pipeline(cfg).run()
    leans = [p["extra"]["lean"] for r in read_jsonl(tmp_path / "out" / "results.jsonl") for p in r["people"]]
    assert len(leans) == 20 and all(float(v).is_integer() for v in leans)


@section
class LeanFileOptions:
    """The trunk's lean, also as a CSV (`joint_angles:`)."""

    csv: bool = True  # write OUTPUT/lean.csv


class LeanToFile(Lean):
    """`Lean` that writes a file: it declares the setting under which it writes none (`files_off`), and that is all
    it takes for the Python API's `output=None` to keep it from writing."""

    section, files_off = "joint_angles", {"csv": False}

    def open(self, options: LeanFileOptions, ctx):
        if not options.csv:
            return None
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        return open(ctx.out_dir / "lean.csv", "w")

    def __call__(self, state, result) -> None:
        super().__call__(state, result)
        if state is not None:
            state.write("".join(f"{result.frame.index},{p.extra['lean']}\n" for p in result.people))

    def close(self, state) -> None:
        if state is not None:
            state.close()


def test_a_stage_that_writes_a_file_is_off_for_the_api_without_output_by_its_own_declaration(
    tmp_path, tiny_dir, clip, monkeypatch
):
    """The API's `output=None` writes nothing: a stage that writes files says under which setting it writes none,
    and nothing else (no list in api.py) needs to know."""
    import sapiens2_stream as s2
    from sapiens2_stream.runtime import pipeline_config

    monkeypatch.setattr(kit, "SECTIONS", dict(kit.SECTIONS))
    kit.declare("joint_angles", LeanFileOptions)
    monkeypatch.setattr(pipeline_config, "PipelineConfig", assembled_config())
    i = base.ORDER.index("smooth")
    monkeypatch.setattr(base, "ORDER", (*base.ORDER[: i + 1], "joint_angles", *base.ORDER[i + 1 :]))
    with STAGES.kept():
        register_stage("joint_angles")(LeanToFile)
        opened = []
        monkeypatch.setattr(LeanToFile, "open", lambda self, options, ctx, o=LeanToFile.open: opened.append(options.csv)
                            or o(self, options, ctx))  # fmt: skip
        options = {"models": {"pose": str(tiny_dir["pose"])}, "device": "cpu",
                   "detector": {"type": "fixed", "boxes": [[40, 10, 60, 100]]},
                   "set": {"models.pose.input_size": [64, 48]}}  # fmt: skip
        without = list(s2.stream(str(clip), **options))
        with_output = list(s2.stream(str(clip), output=str(tmp_path / "out"), **options))
    assert opened == [False, True]  # off without an output, as declared; on with one
    assert all("lean" in p.extra for r in without for p in r.people) and len(without) == 20
    written = (tmp_path / "out" / "lean.csv").read_text().splitlines()
    assert len(written) == sum(len(r.people) for r in with_output) > 0


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_a_one_file_csv_sink_rolls_with_the_segments(tmp_path, tiny_dir, clip):
    out = tmp_path / "out"
    Pipeline(config(tiny_dir, clip, out, outputs={"segment_s": 1, "sinks": [CSV_SINK]})).run()
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(folders) == 2  # 20 frames at 10 fps, a segment a second
    for folder in folders:  # each segment's CSV holds what its JSONL holds
        frames = [r[0] for r in rows(folder / "people.csv")[1:]]
        assert rows(folder / "people.csv")[0] == ["frame", "time_s", "people"]
        assert frames == [str(r["frame"]) for r in read_jsonl(folder / "results.jsonl")] and len(frames) == 10


def stopped_after(pipeline: Pipeline, frames: int) -> None:
    """Run `pipeline` on a thread and stop it (as Ctrl-C does) once it wrote `frames` frames."""
    import threading

    thread = threading.Thread(target=pipeline.run)
    thread.start()
    deadline = time.time() + 60
    while time.time() < deadline and pipeline.streams[0].numbers.written < frames:
        time.sleep(0.01)
    pipeline.request_stop()
    thread.join(60)


def test_a_one_file_csv_sink_is_continued_by_resume(tmp_path, tiny_dir, clip):

    out = tmp_path / "out"
    cfg = config(tiny_dir, clip, out, outputs={"sinks": [CSV_SINK]}, runtime={"queue_size": 2})
    stopped_after(Pipeline(cfg), 4)
    first = len(rows(out / "people.csv")) - 1
    assert 4 <= first < 20
    Pipeline(cfg, resume=True).run()
    table = rows(out / "people.csv")
    assert table[0] == ["frame", "time_s", "people"] and [int(r[0]) for r in table[1:]] == list(range(20))


def test_a_one_file_csv_sink_stops_at_the_fence(tmp_path, tiny_dir, clip):
    """A fleet worker's fence is asked before every folder the files go into: once the camera moved away (here:
    from the second segment on), the CSV is written no more, as the JSONL is not."""
    out = tmp_path / "out"
    pipeline = Pipeline(config(tiny_dir, clip, out, outputs={"segment_s": 1, "sinks": [CSV_SINK]}))
    asked: list[Path] = []

    def fence(folder: Path) -> None:
        asked.append(folder)
        if len(asked) > 1:
            raise Fenced(f"{folder}: the camera moved to another worker")

    pipeline.streams[0].folder_checks.append(fence)
    pipeline.run()
    written = sorted(p.parent for p in out.rglob("people.csv"))
    assert written == asked[:1] and len(asked) == 2 and not asked[1].exists()
    assert len(rows(written[0] / "people.csv")) == 11


def test_a_stages_files_go_through_the_outputs_segments_fence_and_resume(tmp_path, tiny_dir, clip):
    """The angles stage's per-track files are written by the outputs (`stage_files`), not by the stage: they land
    in the segment folder being written, are not written once the fence refuses a folder, and a run stopped and
    resumed writes the files an unbroken run writes."""

    angles = {"angles": {"enabled": True, "plots": False}}
    Pipeline(config(tiny_dir, clip, tmp_path / "whole", **angles)).run()
    (mot,) = (tmp_path / "whole" / "angles").glob("*_2d.mot")
    segmented = tmp_path / "segments"
    Pipeline(config(tiny_dir, clip, segmented, outputs={"segment_s": 1}, **angles)).run()
    assert not (segmented / "angles").exists()
    (rolled,) = segmented.glob(f"*/angles/{mot.name}")  # in the segment being written when the track ended
    assert rolled.parent.parent == sorted(p for p in segmented.iterdir() if p.is_dir())[-1]
    assert rolled.read_text() == mot.read_text()

    fenced = tmp_path / "fenced"
    pipeline = Pipeline(config(tiny_dir, clip, fenced, outputs={"segment_s": 1}, **angles))

    def fence(folder: Path) -> None:
        if folder.name != sorted(p.name for p in fenced.iterdir() if p.is_dir())[0]:
            raise Fenced(f"{folder}: the camera moved to another worker")

    pipeline.streams[0].folder_checks.append(fence)
    pipeline.run()
    assert not list(fenced.rglob("*.mot"))  # the track ended after the fence: its files are nobody's to write

    out = tmp_path / "resumed"
    cfg = config(tiny_dir, clip, out, runtime={"queue_size": 2}, **angles)
    stopped_after(Pipeline(cfg), 6)
    assert 6 <= len(read_jsonl(out / "results.jsonl")) < 20
    Pipeline(cfg, resume=True).run()
    assert (out / "angles" / mot.name).read_text() == mot.read_text()


class Velocity(base.Stage):
    """The kata of issue 59: a person field, a file per track and a status line, declared by the stage alone. Each
    person's speed (px/s) from its smoothed hips reaches the JSONL under its own name (`person.fields`); each
    track's speeds go to velocity/track_NNNN.csv through the outputs when the track ends; how many people move is
    its status."""

    reports = "velocity"

    def open(self, options, ctx) -> dict:
        return {"files": ctx.sinks.files, "last": {}, "rows": {}, "moving": 0}

    def __call__(self, state, result) -> None:
        moving = 0
        for p in result.people:
            hips, now = p.smoothed[9:11].mean(0), result.frame.pts_s
            before = state["last"].get(p.track_id)
            speed = 0.0 if before is None else float(np.linalg.norm(hips - before[1]) / max(now - before[0], 1e-6))
            state["last"][p.track_id] = (now, hips)
            state["rows"].setdefault(p.track_id, []).append((result.frame.index, round(speed, 3)))
            p.fields["velocity"] = round(speed, 3)
            moving += speed > 1.0
        state["moving"] = moving
        for track_id in result.ended_tracks:
            self.end(state, track_id)

    def end(self, state, track_id: int) -> None:
        rows = state["rows"].pop(track_id, [])

        def write(folder: Path) -> None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"track_{track_id:04d}.csv").write_text("".join(f"{f},{v}\n" for f, v in rows))

        state["files"].put("velocity", write)

    def close(self, state) -> None:
        for track_id in list(state["rows"]):
            self.end(state, track_id)

    def report(self, state) -> dict:
        return {"moving": state["moving"], "tracks": len(state["last"])}


def test_a_velocity_stage_declares_its_field_file_and_status_and_the_runners_wire_them(tmp_path, tiny_dir, clip,
                                                                                      monkeypatch):  # fmt: skip
    """One file (the class above) plus its name in `ORDER`: its field reaches the JSONL, its per-track CSV is
    written by the outputs (segments, fence, resume as the built-in files), its status reaches the console's source
    status and /metrics; no context, records, API or console module knows of it."""
    from sapiens2_stream.console.status import describe
    from sapiens2_stream.runtime.prometheus import RunCollector

    i = base.ORDER.index("smooth")
    monkeypatch.setattr(base, "ORDER", (*base.ORDER[: i + 1], "velocity", *base.ORDER[i + 1 :]))
    with STAGES.kept():
        register_stage("velocity")(Velocity)
        pipeline = Pipeline(config(tiny_dir, clip, tmp_path / "out", outputs={"segment_s": 1}))
        pipeline.run()
        status = describe(pipeline.streams[0])
        metrics = {tuple(s.labels.values()): s.value for f in RunCollector(pipeline).collect()
                   if f.name == "sapiens2_stage_status" for s in f.samples}  # fmt: skip
    records = [r for folder in sorted((tmp_path / "out").iterdir()) if folder.is_dir()
               for r in read_jsonl(folder / "results.jsonl")]  # fmt: skip
    speeds = [p["velocity"] for r in records for p in r["people"]]
    assert len(records) == 20 and len(speeds) == 20 and speeds[0] == 0.0 and max(speeds) > 1.0
    (csv_file,) = (tmp_path / "out").glob("*/velocity/track_*.csv")  # in the segment the track ended in
    assert [float(line.split(",")[1]) for line in csv_file.read_text().splitlines()] == speeds
    assert status["velocity"] == {"moving": int(speeds[-1] > 1.0), "tracks": 1}
    assert metrics[("pipeline", "velocity", "tracks")] == 1.0


class Alarm(base.Stage):
    """Emits an event when a person first shows up: declaring `emits` is all it takes for the source to keep an
    event log."""

    def emits(self, options) -> bool:
        return True

    def open(self, options, ctx) -> set:
        return set()

    def __call__(self, state: set, result) -> None:
        for p in result.people:
            if p.track_id not in state:
                state.add(p.track_id)
                result.events.append({"kind": "arrived", "track_id": p.track_id, "frame": result.frame.index})


def test_a_stage_that_emits_events_gets_the_event_log_by_its_declaration(tmp_path, tiny_dir, clip, monkeypatch):
    i = base.ORDER.index("smooth")
    monkeypatch.setattr(base, "ORDER", (*base.ORDER[: i + 1], "alarm", *base.ORDER[i + 1 :]))
    with STAGES.kept():
        register_stage("alarm")(Alarm)
        Pipeline(config(tiny_dir, clip, tmp_path / "out")).run()
    logged = read_jsonl(tmp_path / "out" / "events.jsonl")
    assert [(e["kind"], e["frame"]) for e in logged] == [("arrived", 0)]


@pytest.mark.parametrize("kind,names", [
    ("stages", ["take", "detect", "track", "infer", "temporal", "smooth", "threed", "angles", "events", "write"]),
    ("sinks", ["jsonl", "events", "video", "matting", "geometry", "tracks", "stage_files", "live_view", "display",
               "virtual_camera", "stream", "mqtt", "webhooks"]),
    ("detectors", ["yolo", "fixed", "full_frame", "file"]),
    ("sources", ["frames", "stream", "webcam", "lavfi", "images", "file"]),
    ("tasks", ["pose", "seg", "normal", "pointmap", "matting"]),
])  # fmt: skip
def test_every_registry_can_be_listed(capsys, kind, names):
    assert main(["list", kind]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.strip().splitlines()[1:]]
    assert [n for n in listed if n in names] == [n for n in names if n in listed] and set(names) <= set(listed)


def test_a_stage_between_triangulate_and_write_3d_adds_to_every_moment_written(tmp_path, monkeypatch):
    """The cross-source stages have places in the same order: a stage after triangulate sees each moment (the
    people in metres) before write_3d writes it, so what it adds is in OUTPUT/3d/keypoints_3d.jsonl; the status it
    declares (`reports`) is the group's to read, as triangulate's is for the console and /metrics."""
    from tests import scenes3d as S
    from tests.test_triangulate import FPS, crossing, mocap

    class Heights(base.GroupStage):
        reports = "heights"

        def open(self, options, ctx, emit) -> dict:
            return {"tallest_m": 0.0}

        def __call__(self, state, moment) -> None:
            for person, record in zip(moment.people, moment.record["people"], strict=True):
                record["extra"] = {"top_m": round(float(np.nanmax(person.xyz[:, 2])), 3)}
                state["tallest_m"] = max(state["tallest_m"], record["extra"]["top_m"])

        def report(self, state) -> dict:
            return dict(state)

    i = base.ORDER.index("triangulate")
    monkeypatch.setattr(base, "ORDER", (*base.ORDER[: i + 1], "heights", *base.ORDER[i + 1 :]))
    with STAGES.kept():
        register_stage("heights")(Heights)
        rig, live, stages = mocap(tmp_path, 2, expect=["triangulate", "heights", "write_3d"])
    rng = np.random.default_rng(1)
    for k in range(5):
        for camera in rig:
            live.add(camera.name, k / FPS, *S.seen_by(camera, crossing(k / FPS), rng), arrived=float(k))
    stages.ended()
    records = read_jsonl(tmp_path / "out" / "3d" / "keypoints_3d.jsonl")
    assert len(records) == 5 and all(r["people"] for r in records)
    assert all(1.0 < p["extra"]["top_m"] < 2.2 for r in records for p in r["people"])  # people's heads, metres
    reports = stages.reports()
    assert reports["heights"] == {"tallest_m": max(p["extra"]["top_m"] for r in records for p in r["people"])}
    assert reports["3d"]["latest"]["time"] == records[-1]["time"] and reports["3d"]["summary"]["moments"] == 5


def test_the_pose2sim_project_is_made_wherever_the_pipeline_runs(tmp_path, tiny_dir, clip):
    """Not only the command line: a Pipeline run (as `stream()`, the API's `run` and fleet workers make) writes
    the take's Pose2Sim project and reports it in the summary."""
    out = tmp_path / "out"
    data = pipeline_data(tiny_dir, clip, out, outputs={"pose2sim": {"enabled": True, "sync": "none"}})
    del data["source"]
    data["sources"] = [{"name": "cam1", "uri": str(clip)}, {"name": "cam2", "uri": str(clip)}]
    summary = Pipeline(from_dict(PipelineConfig, data)).run()
    assert summary["pose2sim"]["frames"] == 20 and summary["pose2sim"]["folder"] == str(out / "pose2sim")
    assert sorted(p.name for p in (out / "pose2sim" / "pose").iterdir()) == ["cam1_json", "cam2_json"]
    assert len(list((out / "pose2sim" / "pose" / "cam1_json").iterdir())) == 20


NEW_TASK = """
import dataclasses, json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)  # one core: the suite's other process keeps the other (its live tests time themselves)
from sapiens2_stream.models.tasks import register_task, task_spec
# the one thing a new task of a known kind needs: its entry in the table (here: a person's mask, matting's kind)
register_task(dataclasses.replace(task_spec("matting"), name="silhouette", architecture="Sapiens2ForSilhouette",
                                  doc="a person's mask", temporal=None))
from sapiens2_stream.config import from_dict
from sapiens2_stream.runtime.pipeline_config import PipelineConfig
from sapiens2_stream.deploy.export_model import ExportOptions, export_model
from sapiens2_stream.humans.datasets import write_dataset
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.train.finetune import FinetuneOptions, finetune
work, clip = Path(sys.argv[1]), sys.argv[2]
data = write_dataset(work / "synth", 12, seed=1, progress=False)
scores = finetune(FinetuneOptions(task="silhouette", data=str(data), output=str(work / "ft"), steps=4, batch_size=2,
                                  input_size=(64, 48), val_every=2, progress=False))
report = export_model(ExportOptions(source=str(work / "ft" / "best"), format="onnx", output=str(work / "onnx")))
cfg = from_dict(PipelineConfig, {"source": {"uri": clip}, "detector": {"type": "full_frame"},
                                 "models": {"silhouette": {"source": str(work / "ft" / "best")}},
                                 "outputs": {"dir": str(work / "run"), "video": {"enabled": False}}})
summary = Pipeline(cfg).run()
print(json.dumps({"scores": sorted(scores), "passed": report["passed"], "frames": summary["totals"]["frames_out"],
                  "validate": [s.name for s in __import__("sapiens2_stream.runtime.pipeline",
                                                          fromlist=["check_run"]).check_run(cfg)]}))
"""


def test_a_new_task_entry_runs_trains_and_exports(tmp_path, clip):
    """A task of a known kind of truth, registered as one entry before the schema is built (a process of its own):
    finetune trains it (matting's data, loss and scores, by its `truth`), export-model gates it (the alpha
    measure), and a pipeline with `models.silhouette` runs it."""
    import json
    import os
    import subprocess
    import sys

    one_core = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", NEW_TASK, str(tmp_path), str(clip)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env={**os.environ, **one_core})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["scores"] == ["iou", "mse", "sad"] and said["passed"] and said["frames"] == 20
    assert said["validate"] == ["take", "detect", "track", "infer", "smooth", "write"]
    assert (tmp_path / "onnx" / "parity.json").is_file() and (tmp_path / "run" / "results.jsonl").is_file()


class Breaks:
    """An output of one's own with a bug: it raises at frame 3."""

    def open(self, folder, append):
        return None

    def write(self, state, result) -> None:
        if result.frame.index == 3:
            raise ValueError("no such column")


def test_an_output_of_yours_that_raises_is_said_once_and_the_others_go_on(tmp_path, tiny_dir, clip, caplog):
    out = tmp_path / "out"
    cfg = config(tiny_dir, clip, out, outputs={"sinks": [{"name": "bad", "use": "tests.test_extending:Breaks"}]})
    summary = Pipeline(cfg).run()
    assert len(read_jsonl(out / "results.jsonl")) == 20  # the built-in outputs are complete
    said = [r.getMessage() for r in caplog.records if "outputs.sinks" in r.getMessage()]
    assert len(said) == 1 and "'bad' failed at frame 3: ValueError: no such column" in said[0]
    assert summary["sources"]["pipeline"]["outputs"]["bad"] == {
        "failed_at_frame": 3,
        "error": "ValueError: no such column",
    }


def test_an_output_of_yours_that_raises_in_a_segment_is_in_the_summary_under_it(tmp_path, tiny_dir, clip):
    """With outputs.segment_s the failure is the segment's: the summary names the segment folder it happened in,
    and the next segment opens the output afresh (frame 3 only comes once, so the second segment has no failure)."""
    out = tmp_path / "out"
    cfg = config(
        tiny_dir, clip, out, outputs={"segment_s": 1, "sinks": [{"name": "bad", "use": "tests.test_extending:Breaks"}]}
    )
    summary = Pipeline(cfg).run()
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(folders) == 2
    assert summary["sources"]["pipeline"]["outputs"]["segments"] == {
        folders[0]: {"bad": {"failed_at_frame": 3, "error": "ValueError: no such column"}}
    }


def test_every_component_names_the_section_its_package_declares():
    """The YAML is assembled from the packages' declarations (`@section(key=...)` in their `options` modules); each
    stage and each kind of output names its section and class in its own file, and the two agree. Every declared
    section is some component's but `fleet` (read by `run --ray`, around the pipeline)."""
    from sapiens2_stream import config as kit
    from sapiens2_stream.io.outputs import SINKS

    stages = [STAGES[name] for name in base.ORDER]
    named = {(s.section, s.Options) for s in stages if s.section} | {(k.section, k.options) for k in SINKS.values()
                                                                       if k.options is not None}  # fmt: skip
    assert all(kit.SECTIONS[key].type is options for key, options in named)
    assert set(kit.SECTIONS) - {key for key, _ in named} == {"fleet"}


def test_a_detector_is_one_registry_entry_named_once(tmp_path, tiny_dir, clip):
    """One `DETECTORS.add` and nothing else: `list detectors` shows it, the YAML's `detector.type` takes it (the
    JSON Schema lists it), the pipeline runs it, and a name nobody registered is one line naming the choices."""
    from sapiens2_stream.detect import FixedBoxes
    from sapiens2_stream.detect.kinds import DetectorKind
    from sapiens2_stream.listing import rows
    from sapiens2_stream.registry import DETECTORS
    from sapiens2_stream.schema import json_schema

    centre = DetectorKind("centre", "one box in the middle of the frame (a test's)",
                          lambda cfg, device: FixedBoxes(np.array([[40, 10, 60, 100]], np.float32)))  # fmt: skip
    with DETECTORS.kept():
        DETECTORS.add(centre)
        assert rows("detectors")[-1] == ("centre", "batch", "detect stage", "detector", centre.doc)
        enum = json_schema()["$defs"]["DetectorConfig"]["properties"]["type"]["enum"]
        assert enum[-1] == "centre" and enum[0] == "yolo"
        Pipeline(config(tiny_dir, clip, tmp_path / "out", detector={"type": "centre"})).run()
        with pytest.raises(Sapiens2StreamError) as err:
            config(tiny_dir, clip, tmp_path / "out", detector={"type": "rcnn"})
    assert "detector.type must be one of 'yolo', 'fixed', 'full_frame', 'file', 'centre', got 'rcnn'" in str(err.value)
    assert "centre" not in DETECTORS  # the test's entry is gone with the block
    people = [len(r["people"]) for r in read_jsonl(tmp_path / "out" / "results.jsonl")]
    assert len(people) == 20 and set(people) == {1}


def test_a_stage_file_job_that_fails_leaves_the_others_written(tmp_path):
    """Two stages hand files to a source's outbox; the first job raises: the second is still written, then the
    failure is raised once (the outputs say it, for the stage_files sink)."""
    from sapiens2_stream.io.stage_files import FileOutbox, StageFilesSink

    def broken(folder):
        raise OSError("disk full")

    outbox = FileOutbox()
    outbox.put("angles", broken)
    outbox.put("kinematics", lambda folder: folder.mkdir(parents=True) or (folder / "p.mot").write_text("x"))
    with pytest.raises(OSError, match="disk full"):
        StageFilesSink(tmp_path, outbox).close()
    assert (tmp_path / "kinematics" / "p.mot").read_text() == "x" and not outbox.jobs
