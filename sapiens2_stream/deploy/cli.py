"""The command line's `export-model` verb (its parser here; the export imports torch's exporter only when run)."""

from __future__ import annotations

import argparse
import sys

from ..arguments import size_arg


def add_parser(sub) -> None:
    ex = sub.add_parser(
        "export-model", help="export a model to ONNX, OpenVINO or TensorRT, behind a parity gate (parity.json)"
    )
    ex.add_argument("model", metavar="MODEL", help="a hub id, folder or .safetensors file (as models.<task>.source)")
    ex.add_argument("--format", required=True, choices=("onnx", "openvino", "tensorrt"))
    ex.add_argument("--output", required=True, metavar="DIR", help="the export folder (DIR.failed if the gate fails)")
    ex.add_argument(
        "--precision",
        default=None,
        choices=("fp32", "bf16", "fp16", "int8"),
        help="onnx: fp32; openvino: fp32, bf16 (CPUs with bf16 units), int8 (NNCF); tensorrt: bf16 (default), "
        "fp16, fp32 (default for the others: fp32)",
    )
    ex.add_argument("--input-size", type=size_arg, metavar="HxW", help="default: the model's own")
    ex.add_argument(
        "--flip",
        choices=("fused", "none"),
        default="none",
        help="fused: flip TTA inside the graph (a run must then keep flip on); none: the pipeline flips (default)",
    )
    ex.add_argument("--opset", type=int, default=18, help="ONNX opset (default %(default)s: attention decomposed)")
    ex.set_defaults(func=cmd_export_model)


def cmd_export_model(args: argparse.Namespace) -> int:
    from .export_model import ExportOptions, export_model

    precision = args.precision or ("bf16" if args.format == "tensorrt" else "fp32")
    opts = ExportOptions(args.model, args.format, args.output, precision, args.input_size, args.flip, args.opset)
    report = export_model(opts)
    measured = ", ".join(f"{k} {v:.4g}" for k, v in report["measured"].items())
    if not report["passed"]:
        print(f"sapiens2-stream: export-model: the parity gate failed ({'; '.join(report['failures'])}); the "
              f"artifact and its report are in {report['folder']}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"{report['folder']}: {args.format} {precision}, parity passed ({measured}; {report['inputs']})",
          file=sys.stderr)  # fmt: skip
    return 0
