"""The one table of tasks (models/tasks.py): every task of it loads, runs, flips and post-processes through the
table alone, and a task that exists only in a test's own entry reaches every layer (checkpoint files, loading, the
pipeline YAML's models: and temporal: sections, the engine with flip TTA, the temporal filter, the JSONL records,
the summary and `sapiens2-stream models`) without another file being touched."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from sapiens2_stream.io.sources import Frame
from sapiens2_stream.models import TASKS, load_model, pipeline_tasks
from sapiens2_stream.runtime.engine import InferenceEngine
from sapiens2_stream.runtime.options import ModelSection as PipelineModel
from sapiens2_stream.runtime.results import Person


def one_frame(seed: int = 0) -> Frame:
    rgb = np.random.default_rng(seed).integers(0, 255, (96, 128, 3), dtype=np.uint8)
    return Frame(0, 0.0, 0.0, rgb)


@pytest.mark.parametrize("task", [t.name for t in pipeline_tasks()])
def test_every_task_of_the_table_loads_runs_flips_and_post_processes(task, tiny_dir):
    spec = TASKS[task]
    model = load_model(tiny_dir[task])
    assert model.task == task and type(model(torch.zeros(1, 3, 64, 48))) is spec.output_type

    def run(flip: str):
        cfg = {task: PipelineModel(source=str(tiny_dir[task]), flip=flip, input_size=[64, 48])}
        engine = InferenceEngine(cfg, torch.device("cpu"), torch.float32, seg_width=32)
        people = [Person(1, np.array([20, 10, 60, 70], np.float32), 0.9)]
        (result,) = engine.run([one_frame()], [people])
        owner = result.people[0] if spec.per_person else result
        return result, {name: getattr(owner, name) for name in spec.results}

    flipped, with_flip = run("on")
    plain, without = run("off")
    assert flipped.flip == {task: True} and plain.flip == {task: False}
    for name, value in with_flip.items():
        assert value is not None and value.shape == without[name].shape, name
    first = spec.results[0]
    assert with_flip[first].shape[:2] in ((96, 128), (308, 2))  # a frame-size map, or the person's keypoints
    assert not np.array_equal(with_flip[first], without[first])  # the mirrored half was merged in


NEW_TASK = """
import json, sys
from pathlib import Path

import numpy as np

from sapiens2_stream.models.tasks import Flip, Temporal, TaskSpec, register_task
from sapiens2_stream.models.outputs import Sapiens2Output
from sapiens2_stream.models.shapes import HeadConfig
from sapiens2_stream.processing.dense import to_frames
from dataclasses import dataclass


@dataclass(kw_only=True)
class SilhouetteOutput(Sapiens2Output):
    masks: object


register_task(TaskSpec(
    name="silhouette", architecture="Sapiens2ForSilhouette", output_type=SilhouetteOutput,
    model_outputs=lambda out, features, model: {"masks": out.sigmoid()}, channels=1, fixed_channels=True,
    tiny_head=HeadConfig(kind="pixel_shuffle", upsample_channels=(16, 8, 8, 8), upsample_kernels=(3,) * 4,
                         conv_channels=(8,), conv_kernels=(3,), num_outputs=1),
    flips={"masks": Flip("channels")}, keep_aspect=False,
    frame_post=lambda out, frames, width: [{"silhouette": m[0]} for m in to_frames(out["masks"], frames)],
    results=("silhouette",), temporal=Temporal("silhouette", "alpha"), sizes=("1b",),
))

# registered before the rest of the package is imported, as a plugin would be
import torch
from sapiens2_stream.cli import main
from sapiens2_stream.runtime.pipeline_config import load_config
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.models import load_model, make_tiny_checkpoints
from sapiens2_stream.runtime.pipeline import Pipeline

out = Path(sys.argv[1])
folder = make_tiny_checkpoints(out / "models", ("silhouette",))["silhouette"]
report = {"loaded": load_model(folder).task, "bare": load_model(next(folder.glob("*.safetensors"))).task}
clip = out / "clip.mp4"
make_clip(clip, frames=6, size=(96, 128), people=1)
spec = out / "silhouette.yaml"
spec.write_text(json.dumps({
    "source": {"uri": str(clip)}, "detector": {"type": "full_frame"},
    "models": {"silhouette": {"source": str(folder), "input_size": [64, 48], "flip": "on"}},
    "temporal": {"silhouette": "on"}, "outputs": {"dir": str(out / "run"), "video": {"enabled": False}},
    "runtime": {"device": "cpu", "threads": 1},
}))
seen = []
summary = Pipeline(load_config(spec), on_result=lambda r, p: seen.append(r.silhouette)).run()
(source,) = summary["sources"].values()
report["maps"] = [list(m.shape) for m in seen]
report["in_range"] = all(0 <= float(m.min()) and float(m.max()) <= 1 for m in seen)
report["temporal"] = sorted(source["temporal"])
report["records"] = [json.loads(line) for line in (out / "run" / "results.jsonl").read_text().splitlines()]

# flip TTA through the table: the merged map is the mean of the frame's map and the mirrored frame's map mirrored
# back (the post-processing only crops and resizes, which commutes with a mirror)
from sapiens2_stream.runtime.options import ModelSection
from sapiens2_stream.io.sources import Frame
from sapiens2_stream.runtime.engine import InferenceEngine

rgb = np.random.default_rng(1).integers(0, 255, (96, 128, 3), dtype=np.uint8)
def run(image, flip):
    cfg = {"silhouette": ModelSection(source=str(folder), flip=flip, input_size=[64, 48])}
    engine = InferenceEngine(cfg, torch.device("cpu"), torch.float32)
    return engine.run([Frame(0, 0.0, 0.0, np.ascontiguousarray(image))], [[]])[0].silhouette
expected = (run(rgb, "off") + run(rgb[:, ::-1], "off")[:, ::-1]) / 2
report["flip_error"] = float(np.abs(run(rgb, "on") - expected).max())
print(json.dumps(report))
main(["models"])
"""


def test_a_task_entry_in_a_tests_own_table_reaches_every_layer(tmp_path):
    script = tmp_path / "new_task.py"
    script.write_text(textwrap.dedent(NEW_TASK))
    run = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report_line, *listing = run.stdout.splitlines()
    report = json.loads(report_line)
    assert report["loaded"] == report["bare"] == "silhouette"  # config.json, and the tensor names alone
    assert report["maps"] == [[96, 128]] * 6 and report["in_range"]  # the engine's post-processing, per frame
    assert report["temporal"] == ["flow_ms_per_frame", "silhouette"]  # the temporal filter steadied it
    assert [r["flip"] for r in report["records"]] == [{"silhouette": True}] * 6  # flip TTA ran, recorded
    assert all("silhouette" in r["models"] for r in report["records"])
    assert report["flip_error"] < 1e-4
    assert any("facebook/sapiens2-silhouette-1b" in line for line in listing)  # the CLI's list of releases
