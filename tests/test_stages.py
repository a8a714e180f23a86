"""Stages as units: users' own stages named in a YAML or given from Python, in frame order per source with state of
their own, their `extra` fields in the JSONL and on MQTT; and a stage that fails stays where it failed: one line,
counted in summary.json, /metrics and the console, exit 3, every other source and output untouched."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

import sapiens2_stream as s2
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.synthetic import make_clip
from tests.test_integrations import MOSQUITTO, Subscriber, scrape, start_broker, wait_until
from tests.test_pipeline import free_port, read_jsonl

RECORDER = '''
import json
from pathlib import Path


class Recorder:
    """Keeps, per source, the frames it saw; adds what it knows to each result; says when it is closed."""

    def __init__(self, log, fail_at=None, fail_source=None):
        self.log, self.fail_at, self.fail_source = Path(log), fail_at, fail_source

    def open(self, source):
        return {"source": source.name, "frames": [], "live": source.live}

    def __call__(self, state, result):
        if result.frame.index == self.fail_at and state["source"] == self.fail_source:
            raise ValueError(f"no crowd estimate for frame {result.frame.index}")
        state["frames"].append(result.frame.index)
        result.extra["seen"] = len(state["frames"])
        result.extra["events"] = len(result.events)
        for p in result.people:
            p.extra["tag"] = f"{state['source']}-{p.track_id}"

    def close(self, state):
        with open(self.log, "a") as f:
            f.write(json.dumps({"closed": state["source"], "frames": state["frames"]}) + "\\n")
'''


def tiny_models(tiny_dir):
    return {"pose": {"source": str(tiny_dir["pose"]), "input_size": [64, 48], "max_batch": 4}}


def write_pipeline(tmp_path, tiny_dir, sources, stage_options, **sections):
    """A pipeline YAML whose only mention of the stage is its `stages:` entry (the class lives in tmp_path)."""
    (tmp_path / "my_stages.py").write_text(RECORDER)
    data = {
        "sources": sources,
        "detector": {"type": "fixed", "boxes": [[20, 20, 50, 100], [90, 20, 50, 100]]},
        "models": tiny_models(tiny_dir),
        "outputs": {"dir": str(tmp_path / "out")},
        "stages": [{"name": "recorder", "use": f"{tmp_path / 'my_stages.py'}:Recorder", "after": "events",
                    "options": stage_options}],
        **sections,
    }  # fmt: skip
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def ask(port, path="/metrics"):
    """(status, body), or (None, "") while the server is not listening yet."""
    try:
        return scrape(port, path)
    except OSError:
        return None, ""


def closes(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_stage_named_in_the_yaml_sees_every_result_of_each_source(tmp_path, tiny_dir):
    for name, frames in (("a", 12), ("b", 9)):
        make_clip(tmp_path / f"{name}.mp4", frames=frames, size=(120, 160), people=2)
    port = free_port() if MOSQUITTO else None
    broker = start_broker(tmp_path / "broker", port) if MOSQUITTO else None
    sub = Subscriber(port) if MOSQUITTO else None
    log = tmp_path / "closed.jsonl"
    sources = [{"name": n, "uri": str(tmp_path / f"{n}.mp4")} for n in ("a", "b")]
    extra = {"outputs": {"dir": str(tmp_path / "out"), "mqtt": {"host": "127.0.0.1", "port": port}}} if port else {}
    pipeline = write_pipeline(tmp_path, tiny_dir, sources, {"log": str(log)}, **extra)
    try:
        run = subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "run", str(pipeline), "--no-progress"],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert run.returncode == 0, run.stderr
        if sub is not None:
            wait_until(lambda: len(sub.on("sapiens2/a/frames")) == 12 and len(sub.on("sapiens2/b/frames")) == 9, 10,
                       "every frame message")  # fmt: skip
    finally:
        if sub is not None:
            sub.close()
            broker.kill()
    closed = closes(log)
    assert sorted(c["closed"] for c in closed) == ["a", "b"]  # once per source
    frames = {c["closed"]: c["frames"] for c in closed}
    assert frames == {"a": list(range(12)), "b": list(range(9))}  # every result, in frame order, state per source
    for name, count in (("a", 12), ("b", 9)):
        records = read_jsonl(tmp_path / "out" / name / "results.jsonl")
        assert [r["extra"]["seen"] for r in records] == list(range(1, count + 1))
        assert all(p["extra"]["tag"] == f"{name}-{p['track_id']}" for r in records for p in r["people"])
        if sub is not None:
            messages = [m for _, m in sub.on(f"sapiens2/{name}/frames")]
            assert [m["extra"]["seen"] for m in messages] == list(range(1, count + 1))
            assert all(p["extra"]["tag"] == f"{name}-{p['track_id']}" for m in messages for p in m["people"])
    if MOSQUITTO is None:
        pytest.skip("the files were checked; the MQTT half needs Debian's mosquitto (.ci/run installs it)")


def test_a_stage_failing_on_one_live_source_stays_there(tmp_path, tiny_dir):
    """Two live cameras; the stage raises at frame 10 of camera b. Camera a writes every frame with the stage's
    fields; b's video and JSONL are complete, the stage's fields missing from frame 10 on; summary.json, /metrics
    and the console name the stage and the source; one line says it; the process exits 3."""
    camera = "lavfi:testsrc2=size=160x120:rate=10,realtime"
    sources = [{"name": n, "uri": camera, "max_frames": 40} for n in ("a", "b")]
    metrics, console = free_port(), free_port()
    pipeline = write_pipeline(tmp_path, tiny_dir, sources, {"log": str(tmp_path / "closed.jsonl"), "fail_at": 10,
                                                            "fail_source": "b"},
                              runtime={"policy": "block", "metrics": {"port": metrics}})  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(pipeline), "--no-progress",
                             "--console", str(console)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:

        def failed_in_metrics():
            status, text = ask(metrics)
            return status == 200 and 'sapiens2_stage_errors_total{source="b",stage="recorder"} 1.0' in text

        wait_until(failed_in_metrics, 120, "the failure on /metrics")

        def sources_done():
            status, body = ask(console, "/api/v1/sources")
            listed = {s["name"]: s for s in json.loads(body)} if status == 200 else {}
            return listed if len(listed) == 2 and all(s["frames_out"] == 40 for s in listed.values()) else None

        wait_until(sources_done, 120, "both cameras' 40 frames")
        listed = sources_done()
        assert listed["a"]["errors"] == []
        assert [(e["stage"], e["frame"]) for e in listed["b"]["errors"]] == [("recorder", 10)]
        assert "no crowd estimate for frame 10" in listed["b"]["errors"][0]["error"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    said = [line for line in err.splitlines() if "stage recorder failed" in line]
    assert said == ["sapiens2-stream: source b: stage recorder failed at frame 10: ValueError: no crowd estimate for "
                    "frame 10 (the stage is off for this source; the rest goes on)"]  # fmt: skip
    assert "Traceback" not in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(e["source"], e["stage"], e["frame"]) for e in summary["errors"]] == [("b", "recorder", 10)]
    for name in ("a", "b"):
        records = read_jsonl(tmp_path / "out" / name / "results.jsonl")
        assert [r["frame"] for r in records] == list(range(40)), name  # every frame written, complete lines
        seen = [r.get("extra", {}).get("seen") for r in records]
        assert seen == (list(range(1, 41)) if name == "a" else [*range(1, 11), *[None] * 30])
        assert summary["sources"][name]["frames_out"] == 40
    from sapiens2_stream.io.video_writer import playable_frames

    assert playable_frames(tmp_path / "out" / "b" / "annotated.mp4") == 40
    assert sorted(c["closed"] for c in closes(tmp_path / "closed.jsonl")) == ["a", "b"]  # closed once each


class Counter:
    """A stage given from Python: counts people per source."""

    name, after = "counter", "smooth"

    def __init__(self):
        self.opened, self.closed = [], []

    def open(self, source):
        self.opened.append(source.name)
        return {"n": 0}

    def __call__(self, state, result):
        state["n"] += 1
        result.extra["n"] = state["n"]
        assert all(p.smoothed is not None for p in result.people)  # after the smoother, as it asked

    def close(self, state):
        self.closed.append(state["n"])


def test_a_stage_from_python(tmp_path, tiny_dir):
    make_clip(tmp_path / "walk.mp4", frames=6, size=(120, 160), people=1)
    counter = Counter()
    options = {"models": {"pose": str(tiny_dir["pose"])}, "detector": "full_frame",
               "set": {"models.pose.input_size": [64, 48]}}  # fmt: skip
    results = list(s2.stream(str(tmp_path / "walk.mp4"), stages=[counter], **options))
    assert [r.raw.extra["n"] for r in results] == [1, 2, 3, 4, 5, 6]
    assert [r.to_dict()["extra"]["n"] for r in results] == [1, 2, 3, 4, 5, 6]
    assert counter.opened == ["pipeline"] and counter.closed == [6]


def test_the_example_stage_writes_its_csv(tmp_path, tiny_dir):
    from examples.crowd_csv import CrowdCSV

    make_clip(tmp_path / "walk.mp4", frames=5, size=(120, 160), people=2)
    options = {"models": {"pose": str(tiny_dir["pose"])}, "detector": "full_frame",
               "set": {"models.pose.input_size": [64, 48]}}  # fmt: skip
    results = list(s2.stream(str(tmp_path / "walk.mp4"), stages=[CrowdCSV(path="crowd.csv")],
                             output=str(tmp_path / "out"), **options))  # fmt: skip
    rows = (tmp_path / "out" / "crowd.csv").read_text().splitlines()
    assert rows[0] == "frame,time_s,people,events" and len(rows) == 6
    assert [int(row.split(",")[2]) for row in rows[1:]] == [len(r.people) for r in results] == [1] * 5
    assert [r["extra"]["people"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")] == [1] * 5


@pytest.mark.parametrize("entry,message", [
    ({"name": "x", "use": "no_such_module_anywhere:Thing"}, "stages[0].use: cannot import no_such_module_anywhere"),
    ({"name": "x", "use": "json:NoSuchClass"}, "stages[0].use: json has no NoSuchClass"),
    ({"name": "x", "use": "nocolon"}, "must be module:Class or path/to/file.py:Class"),
    ({"name": "x", "use": "missing_file.py:Thing"}, "stages[0].use: no such file missing_file.py"),
    ({"name": "x", "use": "tests.test_stages:Counter", "after": "detect"}, "must run after infer"),
    ({"name": "x", "use": "tests.test_stages:Counter", "after": "nowhere"}, "'nowhere', which is no stage"),
    ({"name": "smooth", "use": "tests.test_stages:Counter"}, "the name 'smooth' is taken"),
    ({"name": "x", "use": "fractions:Fraction", "options": {"colour": 1}}, "stages[0].options: fractions:Fraction"),
    ({"name": "bad name", "use": "tests.test_stages:Counter"}, "stages[0].name must be a name of letters"),
    ({"name": "x", "use": "tests.test_stages:Counter", "option": {}}, "unknown key 'stages[0].option'"),
])  # fmt: skip
def test_bad_stage_entries_are_configuration_errors(tmp_path, tiny_dir, entry, message):
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import config_from

    data = {"source": {"uri": str(tmp_path / "x.mp4")}, "models": tiny_models(tiny_dir), "stages": [entry],
            "detector": {"type": "full_frame"}}  # fmt: skip
    with pytest.raises(Sapiens2StreamError, match=message.replace("[", r"\[").replace("(", r"\(")):
        Pipeline(config_from(data))


def test_stage_order_follows_after():
    from sapiens2_stream.registry import STAGES
    from sapiens2_stream.runtime.stages import in_order
    from sapiens2_stream.runtime.stages.user import UserStage

    def user(name, after):
        return UserStage(lambda state, result: None, name, after)

    builtins = [cls() for cls in reversed(list(STAGES.values()))]  # registered in any order
    order = [s.name for s in in_order([*builtins, user("u1", "events"), user("u2", "events"), user("u0", "infer"),
                                       user("u3", "u1")])]  # fmt: skip
    assert order == ["take", "detect", "track", "infer", "u0", "temporal", "smooth", "threed", "angles",
                     "kinematics", "events", "u1", "u3", "u2", "write", "triangulate", "group_angles",
                     "group_kinematics", "write_3d", "pose2sim"]  # fmt: skip


def test_building_a_pipeline_touches_nothing(tmp_path, tiny_dir):
    """Building a Pipeline opens no output: an earlier run's results stay as they were until `run`."""
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import config_from

    make_clip(tmp_path / "walk.mp4", frames=3, size=(120, 160), people=1)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text('{"earlier": true}\n')
    data = {"source": {"uri": str(tmp_path / "walk.mp4")}, "models": tiny_models(tiny_dir),
            "detector": {"type": "full_frame"}, "outputs": {"dir": str(out)}}  # fmt: skip
    pipeline = Pipeline(config_from(data))
    assert (out / "results.jsonl").read_text() == '{"earlier": true}\n' and sorted(os.listdir(out)) == ["results.jsonl"]
    pipeline.run()
    assert len(read_jsonl(out / "results.jsonl")) == 3
    assert np.isfinite([p["score"] for r in read_jsonl(out / "results.jsonl") for p in r["people"]]).all()
