"""Model forward per crop on this machine's CPU in every runtime, as ratios to PyTorch eager fp32 in the same run:
`python -m benchmarks.runtimes [--json benchmarks/results/runtimes.json]`.

Two pose models: the toy one (the tiny architecture, 128x96 crops) and a mid-size one (width 384, 12 layers, the
released head's structure, 256x192 crops, random weights). Each export is made with `export-model`'s own code
and must pass its parity gate (the row says so); then each runtime runs batches of 8 crops of synthetic people:
PyTorch eager (fp32, and bf16 where the CPU has bf16 units), PyTorch compiled (fp32), ONNX Runtime (fp32),
OpenVINO (fp32, bf16 where the CPU has bf16 units, int8 through NNCF).

`--device cuda` (benchmarks/gpu.sh) gives the GPU rows instead: PyTorch eager and compiled in bf16 against
TensorRT engines (bf16 and fp16, strongly typed, built there by `export-model --format tensorrt`), each with its
gate, for the mid-size model and a 0.4b-shaped one at 1024x768; without the tensorrt package the TensorRT rows
say so. (fp8 engines are not built yet.)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from benchmarks.common import median_seconds
from sapiens2_stream.deploy.export_model import ExportOptions, export_model
from sapiens2_stream.deploy.formats import cpu_has_bf16, load_runner
from sapiens2_stream.deploy.parity import parity_inputs
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.models import load_model
from sapiens2_stream.models.config import ModelConfig, preset
from sapiens2_stream.models.shapes import BackboneConfig, HeadConfig, gqa_layout
from sapiens2_stream.models.tiny import random_model, save_released
from sapiens2_stream.models.toy import toy_model
from sapiens2_stream.runtime.device import compile_model

BATCH = 8
MID = ModelConfig(
    "pose",
    BackboneConfig(hidden_size=384, num_layers=12, num_heads=6, kv_heads=gqa_layout(12, 6, 3, 4, 4), mlp_dim=1536),
    HeadConfig(
        kind="deconv",
        upsample_channels=(256, 192),
        upsample_kernels=(4, 4),
        conv_channels=(128, 128, 64),
        conv_kernels=(1, 1, 1),
        num_outputs=308,
    ),  # fmt: skip
    image_size=(256, 192),
)


def models(work: Path, device: str) -> dict[str, Path]:
    mid = work / "mid"
    save_released(random_model(MID, seed=0), mid, "sapiens2_pose")
    if device == "cuda":
        big = work / "0.4b"
        save_released(random_model(preset("pose", "0.4b"), seed=0), big, "sapiens2_pose")
        return {"mid (width 384, 12 layers, 256x192)": mid, "0.4b shape (random weights, 1024x768)": big}
    return {"tiny (toy pose, 128x96)": toy_model("pose"), "mid (width 384, 12 layers, 256x192)": mid}


def plans(device: str) -> list[tuple[str, str]]:
    if device == "cuda":
        return [("tensorrt", "bf16"), ("tensorrt", "fp16")]
    out = [("onnx", "fp32"), ("openvino", "fp32"), ("openvino", "int8")]
    return out[:2] + [("openvino", "bf16")] + out[2:] if cpu_has_bf16() else out


def exports(source: Path, work: Path, device: str) -> list[tuple[str, Path | None, str, str, dict | None]]:
    """(name, folder, format, precision, parity report) of each export of `source` (folder None: not made)."""
    out = []
    for fmt, precision in plans(device):
        label = {"onnx": "ONNX Runtime", "openvino": "OpenVINO", "tensorrt": "TensorRT"}[fmt] + f" {precision}"
        folder = work / f"{source.name}-{fmt}-{precision}"
        try:
            report = export_model(ExportOptions(str(source), fmt, str(folder), precision))
        except Sapiens2StreamError as e:  # e.g. no tensorrt package on this GPU machine
            print(f"{label}: not measured: {e}")
            continue
        out.append((label, Path(report["folder"]), fmt, precision, report))
    return out


def rows_for(name: str, source: Path, work: Path, repeats: int, device: str) -> list[dict]:
    dev = torch.device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = load_model(source, device=dev, dtype=dtype).eval()
    pixels = parity_inputs("pose", tuple(model.config.image_size))[0][:BATCH].to(dev)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def timed_call(fn):
        return median_seconds(lambda: (fn(), sync()), repeats)

    precision = "bf16" if device == "cuda" else "fp32"
    timed: list[tuple[str, float, dict | None]] = []
    with torch.inference_mode():
        x = pixels.to(dtype)
        timed.append((f"PyTorch eager {precision}", timed_call(lambda: model(x)), None))
        if device == "cpu" and cpu_has_bf16():
            half, xb = load_model(source, dtype=torch.bfloat16).eval(), pixels.bfloat16()
            timed.append(("PyTorch eager bf16", timed_call(lambda: half(xb)), None))
        compiled = compile_model(model, dev)
        compiled(x)  # compiling is not timed
        timed.append((f"PyTorch compiled {precision}", timed_call(lambda: compiled(x)), None))
    for label, folder, fmt, prec, report in exports(source, work, device):
        runner = load_runner(fmt, folder, "pose", prec, dev)
        timed.append((label, timed_call(lambda r=runner: r(pixels)), report))
    eager = timed[0][1]
    gate = lambda r: {"parity": "passed" if r["passed"] else "FAILED", "measured": r["measured"]} if r else {}  # noqa: E731
    return [
        {
            "model": name,
            "runtime": label,
            "ms_per_crop": round(seconds / BATCH * 1e3, 3),
            f"vs_eager_{precision}": round(eager / seconds, 2),
            **gate(report),
        }
        for label, seconds, report in timed
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="benchmarks/results/runtimes.json")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [
            row
            for name, source in models(work, args.device).items()
            for row in rows_for(name, source, work, args.repeats, args.device)
        ]
    print(f"{'model':38s} {'runtime':24s} {'ms/crop':>9s} {'x eager':>8s}  parity")
    for r in rows:
        ratio = next(v for k, v in r.items() if k.startswith("vs_eager"))
        print(f"{r['model']:38s} {r['runtime']:24s} {r['ms_per_crop']:9.2f} {ratio:7.2f}x  {r.get('parity', '-')}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    summary = {"device": args.device, "threads": torch.get_num_threads(), "batch": BATCH, "rows": rows}
    Path(args.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
