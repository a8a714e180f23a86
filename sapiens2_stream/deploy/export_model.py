"""`sapiens2-stream export-model MODEL --format onnx|openvino|tensorrt --output DIR`: write the artifact, gate it,
and keep it where it can be used only if it passes.

Everything is written into `DIR.writing/` first. A passing export is then renamed to DIR (replacing an earlier
export there); a failing one to `DIR.failed/`, its report and artifact kept for a look, and the command exits 1.
"""

from __future__ import annotations

import json
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import Sapiens2StreamError
from ..models.loading import load_model
from .artifact import MANIFEST, REPORT, require_cuda, write_manifest
from .formats import (
    DEFAULT_OPSET,
    PRECISIONS,
    REQUIRES,
    cpu_has_bf16,
    load_runner,
    need,
    write_onnx,
    write_openvino,
    write_tensorrt,
)
from .graph import ExportGraph
from .parity import MULTIPLE, differences, finite, judge, parity_inputs, run_batches, run_torch, tolerances

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class ExportOptions:
    source: str
    format: str
    output: str
    precision: str = "fp32"
    input_size: tuple[int, int] | None = None  # default: the model's own
    flip: str = "none"  # "fused": flip TTA inside the graph
    opset: int = DEFAULT_OPSET


def check_options(opts: ExportOptions) -> None:
    if opts.format not in PRECISIONS:
        raise Sapiens2StreamError(f"--format must be one of {', '.join(PRECISIONS)}, not {opts.format!r}")
    allowed = PRECISIONS[opts.format]
    if opts.precision not in allowed:
        raise Sapiens2StreamError(f"--format {opts.format} exports {', '.join(allowed)}; not {opts.precision}")
    if opts.flip not in ("fused", "none"):
        raise Sapiens2StreamError(f"--flip must be fused or none, not {opts.flip!r}")
    if opts.format == "tensorrt":
        require_cuda("--format tensorrt")
    for module in REQUIRES[opts.format] + (("nncf",) if opts.precision == "int8" else ()):
        need(module)
    if opts.format == "openvino" and opts.precision == "bf16" and not cpu_has_bf16():
        raise Sapiens2StreamError("--precision bf16: this CPU has no bf16 units (OpenVINO would run it in fp32)")
    out = Path(opts.output)
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists():
        raise Sapiens2StreamError(f"--output {out}: exists and holds something other than an export; choose another")


def export_model(opts: ExportOptions) -> dict:
    """Export, gate, and put the folder in place; returns the parity report (its "passed" says where it went)."""
    check_options(opts)
    started = time.perf_counter()
    device = torch.device("cuda" if opts.format == "tensorrt" else "cpu")
    model = load_model(opts.source).eval()
    task = model.task
    size = tuple(opts.input_size or model.config.image_size)
    if any(v % model.config.backbone.patch_size for v in size):
        raise Sapiens2StreamError(f"--input-size {size[0]}x{size[1]}: both must be multiples of 16")
    graph = ExportGraph(model, opts.flip == "fused").eval()
    out = Path(opts.output)
    work = out.with_name(out.name + ".writing")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pixels, described = parity_inputs(task, size)
    calibration = parity_inputs(task, size, seed=1)[0] if opts.precision == "int8" else None
    example = pixels[:2]
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    manifest = {"task": task, "format": opts.format, "precision": opts.precision, "input_size": list(size),
                "flip": opts.flip, "source": str(opts.source)}  # fmt: skip
    if opts.format == "onnx":
        write_onnx(graph, example, work / "model.onnx", opts.opset)
        manifest["opset"] = opts.opset
    elif opts.format == "openvino":
        write_openvino(graph, example, work / "model.xml", opts.precision, calibration)
    else:
        dtype = DTYPES[opts.precision]
        write_onnx(graph.to(device, dtype), example.to(device, dtype), work / "model.onnx", opts.opset)
        manifest["built_on"] = write_tensorrt(work / "model.onnx", work / "model.engine")
        graph.to("cpu", torch.float32)
    versions.update(runtime_versions(opts.format))
    manifest["versions"] = versions
    write_manifest(work, manifest)
    report = gate(graph, pixels, described, work, opts, size, device)
    report["seconds"] = round(time.perf_counter() - started, 1)
    (work / REPORT).write_text(json.dumps(report, indent=1) + "\n")
    target = out if report["passed"] else out.with_name(out.name + ".failed")
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    report["folder"] = str(target)
    return report


def gate(graph, pixels, described: str, folder: Path, opts: ExportOptions, size, device) -> dict:
    """Our PyTorch graph at the export's precision against the artifact, loaded by its runtime's own API."""
    task = graph.model.task
    reference_dtype = DTYPES.get(opts.precision, torch.float32)  # int8: against fp32
    on = graph.to(device) if device.type == "cuda" else graph
    fp32 = run_torch(on, pixels.to(device), torch.float32)
    bf16_gap = None
    if opts.precision != "fp32":
        bf16_gap = differences(task, fp32, run_torch(on, pixels.to(device), torch.bfloat16), size)
    reference = fp32 if reference_dtype == torch.float32 else run_torch(on, pixels.to(device), reference_dtype)
    graph.to("cpu")
    runner = load_runner(opts.format, folder, task, opts.precision, device)
    exported = run_batches(lambda x: runner(x.to(device)), pixels)
    measured = differences(task, reference, exported, size)
    bounds = tolerances(task, opts.precision, bf16_gap)
    failures = judge(measured, bounds, finite(exported))
    return {
        "passed": not failures,
        "failures": failures,
        "task": task,
        "format": opts.format,
        "precision": opts.precision,
        "flip": opts.flip,
        "inputs": described,
        "reference": f"sapiens2_stream's PyTorch model in {reference_dtype} on {device.type}".replace("torch.", ""),
        "measured": measured,
        "tolerances": bounds,
        "pytorch_bf16_vs_fp32": bf16_gap,
        "multiple": MULTIPLE.get(opts.precision),
        "rule": "fp32: float rounding; bf16/fp16/int8: the stated multiple of PyTorch's own bf16-vs-fp32 "
        "difference on these inputs, never tighter than the fp32 bound",
    }


def runtime_versions(fmt: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    names = {"onnx": ("onnx", "onnxruntime"), "openvino": ("openvino", "nncf"), "tensorrt": ("tensorrt", "onnx")}[fmt]
    names = ("sapiens2-stream", *names)
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out
