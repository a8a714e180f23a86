"""`export-model`: ONNX and OpenVINO exports of a tiny and a mid-size model pass their parity gate, and the
runtimes' own APIs (not our wrapper) give the transformers reference's outputs within it; the pipeline runs them
with the same records as PyTorch; every artifact it must refuse is one line and exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import sapiens2_stream as s2
from sapiens2_stream.cli import main
from sapiens2_stream.deploy import parity
from sapiens2_stream.deploy.formats import openvino_core
from sapiens2_stream.deploy.graph import INPUT_NAME, output_names
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.humans.clips import fall, write_clip
from sapiens2_stream.models.toy import toy_model
from tests.reference import reference_model

MID = dict(hidden_size=192, num_hidden_layers=8, num_attention_heads=6, intermediate_size=384,  # a mid-size shape
           num_key_value_attention_heads=2, num_first_full_attention_layers=2,
           num_last_full_attention_layers=2)  # fmt: skip
MODELS = {"tiny": ("pose", (128, 96), {}), "mid": ("seg", (128, 160), MID)}


def cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([*map(str, args)])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """size -> (task, the transformers reference model, the folder it is saved in)."""
    out = {}
    for size, (task, image_size, shape) in MODELS.items():
        model = reference_model(task, seed=3, image_size=image_size, **shape)
        folder = tmp_path_factory.mktemp(f"{size}-{task}")
        model.save_pretrained(folder)
        out[size] = (task, model, folder)
    return out


@pytest.fixture(scope="module")
def exports(references, tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    folders = {}
    for size, (_, _, folder) in references.items():
        for fmt in ("onnx", "openvino"):
            code, said = cli("export-model", folder, "--format", fmt, "--output", root / f"{size}-{fmt}")
            assert code == 0, said
            assert said.count("\n") == 1 and "parity passed" in said, said
            folders[size, fmt] = root / f"{size}-{fmt}"
    return folders


def run_natively(fmt: str, folder, pixels: torch.Tensor, task: str) -> dict[str, np.ndarray]:
    """The artifact through its runtime's own API."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        return dict(zip(output_names(task), session.run(None, {INPUT_NAME: pixels.numpy()}), strict=True))
    compiled = openvino_core().compile_model(str(folder / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    out = compiled(pixels.numpy())
    return {name: out[compiled.output(name)] for name in output_names(task)}


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
@pytest.mark.parametrize("size", ["tiny", "mid"])
def test_export_passes_its_gate_and_its_runtime_gives_the_references_outputs(references, exports, size, fmt):
    task, reference, _ = references[size]
    folder = exports[size, fmt]
    report = json.loads((folder / "parity.json").read_text())
    assert report["passed"] and not report["failures"] and report["task"] == task
    assert report["inputs"].startswith("32 person crops" if task == "pose" else "16 frames")
    pixels, _ = parity.parity_inputs(task, tuple(reference.config.image_size), seed=7)  # not the gate's inputs
    with torch.no_grad():
        out = reference(pixel_values=pixels)
    expected = {name: getattr(out, name).numpy() for name in output_names(task)}
    got = run_natively(fmt, folder, pixels, task)
    measured = parity.differences(task, expected, got, tuple(reference.config.image_size))
    assert not parity.judge(measured, parity.tolerances(task, "fp32", None), parity.finite(got)), measured


def test_the_onnx_graph_has_a_dynamic_batch_its_weights_beside_it_and_rope_as_constants(exports):
    import onnx

    folder = exports["mid", "onnx"]
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    assert {o.domain: o.version for o in model.opset_import}[""] == 18
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # a symbol, not a number
    assert not {"Sin", "Cos"} & {n.op_type for n in model.graph.node}  # the tables are folded in
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and (folder / "model.onnx.data").stat().st_size > (folder / "model.onnx").stat().st_size
    manifest = json.loads((folder / "export.json").read_text())
    assert manifest["files"]["model.onnx.data"] == (folder / "model.onnx.data").stat().st_size
    assert manifest["input_size"] == [128, 160] and manifest["opset"] == 18


@pytest.fixture(scope="module")
def toy_exports(tmp_path_factory):
    """The toy pose and seg models (they see the people of the clip) exported to ONNX and OpenVINO."""
    root = tmp_path_factory.mktemp("toy-exports")
    folders = {}
    for task in ("pose", "seg"):
        for fmt in ("onnx", "openvino"):
            code, said = cli("export-model", toy_model(task), "--format", fmt, "--output", root / f"{task}-{fmt}")
            assert code == 0, said
            folders[task, fmt] = root / f"{task}-{fmt}"
    return folders


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("clip") / "fall.mp4", fall(), 8)


def stream(clip, tmp_path, models: dict, flip: str) -> tuple[list, list]:
    """(the JSONL records, the results) of a run on the clip, PyTorch in fp32 like the exports (on a CPU with bf16
    units it would run bf16)."""
    out = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    results = list(s2.stream(clip["path"].replace(".truth.json", ".mp4"), models=models, flip=flip, device="cpu",
                             detector={"type": "file", "path": clip["path"]}, output=str(out),
                             set={"runtime.dtype": "fp32"}))  # fmt: skip
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()], results


@pytest.mark.parametrize("flip", ["off", "on"])
def test_run_with_an_exported_runtime_gives_the_records_of_torch(toy_exports, clip, tmp_path, flip):
    torch_records, torch_results = stream(clip, tmp_path, {t: str(toy_model(t)) for t in ("pose", "seg")}, flip)
    keypoints = np.array([p["keypoints"] for r in torch_records for p in r["people"]])[..., :2]
    assert len(keypoints) > len(clip["frames"])
    for runtime, fmt in (("onnxruntime", "onnx"), ("openvino", "openvino")):
        models = {t: {"source": str(toy_exports[t, fmt]), "runtime": runtime} for t in ("pose", "seg")}
        records, results = stream(clip, tmp_path, models, flip)
        assert [r["frame"] for r in records] == [r["frame"] for r in torch_records]
        theirs = np.array([p["keypoints"] for r in records for p in r["people"]])[..., :2]
        distance = np.linalg.norm(theirs - keypoints, axis=-1)
        bounds = parity.FP32
        assert np.median(distance) <= bounds["keypoint_px_median"], (runtime, np.median(distance))
        assert np.percentile(distance, 99) <= bounds["keypoint_px_p99"], (runtime, np.percentile(distance, 99))
        agreement = np.mean([(a.seg == b.seg).mean() for a, b in zip(results, torch_results, strict=True)])
        assert agreement >= bounds["label_agreement"], (runtime, agreement)


def test_flip_fused_in_the_graph_is_the_pipelines_flip(toy_exports, clip, tmp_path):
    code, said = cli("export-model", toy_model("pose"), "--format", "onnx", "--flip", "fused", "--output",
                     tmp_path / "fused")  # fmt: skip
    assert code == 0, said
    torch_records, _ = stream(clip, tmp_path, {"pose": str(toy_model("pose"))}, "on")
    records, _ = stream(clip, tmp_path, {"pose": {"source": str(tmp_path / "fused"), "runtime": "onnxruntime"}}, "on")
    a = np.array([p["keypoints"] for r in torch_records for p in r["people"]])[..., :2]
    b = np.array([p["keypoints"] for r in records for p in r["people"]])[..., :2]
    assert np.median(np.linalg.norm(a - b, axis=-1)) <= parity.FP32["keypoint_px_median"]
    with pytest.raises(Sapiens2StreamError, match="flip TTA inside its graph"):
        stream(clip, tmp_path, {"pose": {"source": str(tmp_path / "fused"), "runtime": "onnxruntime"}}, "off")


SIGNAL_STACK = """
import ctypes, gc, signal, subprocess, sys
from pathlib import Path

import torch

from sapiens2_stream.deploy.formats import load_runner


class Stack(ctypes.Structure):
    _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]


def signal_stack_is_mapped() -> bool:
    stack = Stack()
    ctypes.CDLL(None).sigaltstack(None, ctypes.byref(stack))
    if not stack.sp or stack.flags & 2:  # none, or disabled: nothing to land in
        return True
    spans = (line.split()[0].split("-") for line in open("/proc/self/maps"))
    return any(int(a, 16) <= stack.sp < int(b, 16) for a, b in spans)


signal.signal(signal.SIGCHLD, lambda *_: None)  # as torch's DataLoader leaves it: each child's end is handled
first = load_runner("openvino", Path(sys.argv[1]), "pose", "fp32", torch.device("cpu"))
second = load_runner("openvino", Path(sys.argv[2]), "seg", "fp32", torch.device("cpu"))
del first  # the first made goes first
gc.collect()
del second
gc.collect()
print("mapped" if signal_stack_is_mapped() else "dangling", flush=True)
for _ in range(3):
    subprocess.run(["true"], check=True)  # a SIGCHLD handled on the thread's signal stack
print("survived")
"""


def test_openvino_runners_dropped_in_any_order_leave_a_signal_stack_that_works(toy_exports, tmp_path):
    """Two exports loaded and dropped first-in first-out (the pipeline's models at the end of a run), then child
    processes ending with a SIGCHLD handler installed: the process lives. With a Core per export, OpenVINO's CPU
    plugin left the thread's signal stack in freed memory and the first SIGCHLD was a SIGSEGV."""
    script = tmp_path / "signal_stack.py"
    script.write_text(SIGNAL_STACK)
    folders = [str(toy_exports[task, "openvino"]) for task in ("pose", "seg")]
    run = subprocess.run([sys.executable, str(script), *folders], capture_output=True, text=True, timeout=300)
    said = (run.returncode, run.stdout, run.stderr[-2000:])
    assert run.returncode == 0 and run.stdout.split() == ["mapped", "survived"], said


def refused(clip, tmp_path, folder, task="pose", runtime="onnxruntime", **more) -> str:
    with pytest.raises(Sapiens2StreamError) as e:
        stream(clip, tmp_path, {task: {"source": str(folder), "runtime": runtime, **more}}, "off")
    assert "\n" not in str(e.value)
    return str(e.value)


def test_artifacts_the_pipeline_must_refuse_are_one_line_each(toy_exports, clip, tmp_path):
    good = toy_exports["pose", "onnx"]
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    data = bad / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:1000])
    assert "model.onnx.data is 1000 bytes" in refused(clip, tmp_path, bad)
    assert "exported for pose, not seg" in refused(clip, tmp_path, good, task="seg")
    said = refused(clip, tmp_path, good, runtime="openvino")
    assert "an export for onnx; runtime: openvino runs openvino exports" in said
    assert "exported at input size 128x96, not the 256x192" in refused(clip, tmp_path, good, input_size=[256, 192])
    shutil.rmtree(bad)
    shutil.copytree(good, bad)
    (bad / "parity.json").unlink()
    assert "no parity.json" in refused(clip, tmp_path, bad)
    assert "not a folder written by export-model" in refused(clip, tmp_path, toy_model("pose"))


def test_a_failing_gate_keeps_its_report_under_a_name_that_says_so_and_exits_1(tmp_path, monkeypatch, clip):
    monkeypatch.setitem(parity.FP32, "argmax_agreement", 1.5)  # no export can agree this well
    code, said = cli("export-model", toy_model("pose"), "--format", "onnx", "--output", tmp_path / "out")
    assert code == 1 and "the parity gate failed (argmax_agreement 1 < 1.5)" in said, said
    assert not (tmp_path / "out").exists()
    report = json.loads((tmp_path / "out.failed" / "parity.json").read_text())
    assert report["passed"] is False and (tmp_path / "out.failed" / "model.onnx").exists()
    assert "its parity gate failed (argmax_agreement 1 < 1.5)" in refused(clip, tmp_path, tmp_path / "out.failed")


def test_what_cannot_be_exported_here_is_one_line_and_exit_2(tmp_path, monkeypatch):
    code, said = cli("export-model", toy_model("pose"), "--format", "tensorrt", "--output", tmp_path / "trt")
    assert code == 2 and said.count("\n") == 1 and "needs a CUDA GPU" in said, said
    code, said = cli("export-model", toy_model("pose"), "--format", "onnx", "--precision", "int8", "--output",
                     tmp_path / "o")  # fmt: skip
    assert code == 2 and "--format onnx exports fp32; not int8" in said, said
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    code, said = cli("export-model", toy_model("pose"), "--format", "onnx", "--output", tmp_path / "o2")
    assert code == 2 and "onnxruntime is not installed: pip install 'sapiens2-stream[onnx]'" in said, said


def test_converting_reports_nothing_to_intel():
    """OpenVINO's converter reports its use to Google Analytics from a forked child unless told not to (a child that,
    without a network, waits on DNS for good and keeps the test runner's pipes open): after `need`, it is told not
    to, whatever the user's home says."""
    pytest.importorskip("openvino_telemetry")
    from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker

    from sapiens2_stream.deploy.formats import need

    need("openvino")
    assert OptInChecker().check(enable_opt_in_dialog=False, disable_in_ci=False) == ConsentCheckResult.DECLINED
