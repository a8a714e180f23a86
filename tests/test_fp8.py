"""`runtime.fp8`: the backbone's products in fp8 behind the parity gate. `torch._scaled_mm` runs on the CPU too, so
the conversion, the gate and the engine's wiring are proven here; the speed is the GPU's (benchmarks/gpu.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sapiens2_stream.deploy import parity
from sapiens2_stream.models.fp8 import Fp8Linear, fp8_refusal, to_fp8
from sapiens2_stream.models.loading import load_model
from sapiens2_stream.models.toy import toy_model

SIZE = (128, 96)  # the toy pose model's input


def toy_pose():
    return load_model(str(toy_model("pose")), device="cpu", dtype=torch.bfloat16)


def test_an_fp8_linear_is_the_linear_within_fp8s_rounding():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96)
    x = torch.randn(4, 10, 64)
    exact, fast = linear(x), Fp8Linear(linear)(x)
    assert fast.shape == exact.shape and fast.dtype == x.dtype
    assert ((fast - exact).abs().max() / exact.abs().max()).item() < 0.05  # e4m3 keeps 3 mantissa bits
    model = toy_pose()
    linears = sum(type(m) is nn.Linear for m in model.backbone.modules())
    assert to_fp8(model.backbone) == linears > 0 and not any(type(m) is nn.Linear for m in model.backbone.modules())


def test_the_gate_passes_a_faithful_fp8_model_and_stops_a_broken_one(monkeypatch):
    gate = parity.fp8_gate(toy_pose(), SIZE, torch.device("cpu"))
    assert gate["passed"], gate["failures"]
    assert gate["measured"]["keypoint_px_p99"] <= gate["bounds"]["keypoint_px_p99"]
    assert any(isinstance(m, Fp8Linear) for m in gate["model"].backbone.modules())
    from sapiens2_stream.models import fp8

    # every row's largest value mapped to 1/256, below e4m3's smallest normal (2**-6): the values fall to a few
    # subnormal steps or to zero, a model that says other things (p99 about 31 px against 0.5). A largest value
    # of 4 only loses some precision at the bottom (p99 0.50-0.53): under AVX2 that passed the gate.
    monkeypatch.setattr(fp8, "E4M3_MAX", 1 / 256)
    broken = parity.fp8_gate(toy_pose(), SIZE, torch.device("cpu"))
    assert not broken["passed"] and broken["model"] is None and broken["failures"]
    assert broken["measured"]["keypoint_px_p99"] > 10 * broken["bounds"]["keypoint_px_p99"]


def run(tmp_path, name, clip, fp8, dtype="bf16"):
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    results = []
    cfg = from_dict(PipelineConfig, {
        "source": {"uri": str(clip)}, "detector": {"type": "fixed", "boxes": [[60, 20, 90, 200]]},
        "models": {"pose": {"source": str(toy_model("pose"))}}, "runtime": {"fp8": fp8, "dtype": dtype},
        "outputs": {"dir": str(tmp_path / name), "video": {"enabled": False}},
    })  # fmt: skip
    summary = Pipeline(cfg, on_result=lambda result, pipeline: results.append(result)).run()
    return summary, np.array([p.keypoints for r in results for p in r.people])


def test_the_engine_takes_fp8_only_where_the_device_has_it_and_the_gate_passed(tmp_path, monkeypatch, caplog):
    """Here (a CPU) `runtime.fp8` is said to be off, why, in the summary and one line, and the run is the bf16 one;
    on a device with fp8 (stood in for by the CPU, whose _scaled_mm computes the same) the gated fp8 model runs, its
    keypoints within a pixel or two of bf16's."""
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.runtime import engine

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=6, size=(240, 320), people=1)
    plain, bf16 = run(tmp_path, "bf16", clip, False)
    with caplog.at_level("WARNING", logger="sapiens2_stream"):
        asked, same = run(tmp_path, "asked", clip, True)
    assert asked["fp8"]["pose"] == f"off: {fp8_refusal(torch.device('cpu'))}" and "fp8" not in plain
    assert "compute capability 8.9" in asked["fp8"]["pose"]
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("runtime.fp8: pose")]
    assert np.array_equal(same, bf16)
    monkeypatch.setattr(engine, "fp8_refusal", lambda device: None)
    taken, fast = run(tmp_path, "fp8", clip, True)
    assert taken["fp8"]["pose"].startswith("on (parity against bf16: keypoint_px_median")
    assert fast.shape == bf16.shape and np.median(np.abs(fast - bf16)) < 2.0
