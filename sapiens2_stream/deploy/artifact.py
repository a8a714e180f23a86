"""An export folder: the artifact, `export.json` (what it is: task, format, precision, input size, flip, the
files' sizes, the versions and, for TensorRT, the GPU it was built on) and `parity.json` (the gate's report).

`check_artifact` is what the pipeline asks before it runs one, and each refusal is one line naming what differs:
not an export, another format or task, another input size, a file truncated or replaced, no report, a failed
gate, a TensorRT engine built on another GPU or other versions.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import Sapiens2StreamError
from .formats import FILES, RUNTIMES, built_on

MANIFEST, REPORT = "export.json", "parity.json"


def write_manifest(folder: Path, manifest: dict) -> None:
    files = {name: (folder / name).stat().st_size for name in FILES[manifest["format"]]}
    (folder / MANIFEST).write_text(json.dumps({**manifest, "files": files}, indent=1) + "\n")


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Sapiens2StreamError(f"{path}: unreadable {what} ({e})") from None


def check_artifact(folder: str | Path, task: str, runtime: str, input_size: tuple[int, int] | None) -> dict:
    """The manifest of the export in `folder`, if `runtime` may run it for `task` (at `input_size`, when set)."""
    root = Path(folder)
    where = f"models.{task}.source {root}"
    if not (root / MANIFEST).exists():
        raise Sapiens2StreamError(f"{where}: not a folder written by export-model (no {MANIFEST}); runtime: {runtime} "
                                  "runs the folders `sapiens2-stream export-model` writes")  # fmt: skip
    manifest = read_json(root / MANIFEST, "export manifest")
    fmt = RUNTIMES[runtime]
    if manifest["format"] != fmt:
        raise Sapiens2StreamError(f"{where}: an export for {manifest['format']}; runtime: {runtime} runs {fmt} "
                                  "exports")  # fmt: skip
    if manifest["task"] != task:
        raise Sapiens2StreamError(f"{where}: exported for {manifest['task']}, not {task}")
    size = tuple(manifest["input_size"])
    if input_size is not None and tuple(input_size) != size:
        raise Sapiens2StreamError(
            f"{where}: exported at input size {size[0]}x{size[1]}, not the {input_size[0]}x{input_size[1]} asked "
            "for; export again with --input-size, or leave models.<task>.input_size unset"
        )
    for name, size_bytes in manifest["files"].items():
        path = root / name
        actual = path.stat().st_size if path.exists() else None
        if actual != size_bytes:
            state = "missing" if actual is None else f"{actual} bytes, not the {size_bytes} written"
            raise Sapiens2StreamError(f"{where}: {name} is {state} (truncated or replaced); export again")
    if not (root / REPORT).exists():
        raise Sapiens2StreamError(f"{where}: no {REPORT}: an export runs only with its passing parity report")
    report = read_json(root / REPORT, "parity report")
    if not report.get("passed"):
        raise Sapiens2StreamError(f"{where}: its parity gate failed ({'; '.join(report.get('failures', []))})")
    if fmt == "tensorrt":
        require_cuda(f"{where}: runtime: tensorrt")
        here, there = built_on(), manifest["built_on"]
        differ = [f"{k} {there.get(k)} there, {v} here" for k, v in here.items() if there.get(k) != v]
        if differ:
            raise Sapiens2StreamError(f"{where}: a TensorRT engine runs where it was built ({', '.join(differ)}); "
                                      "export it again on this machine")  # fmt: skip
    return manifest


def require_cuda(what: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise Sapiens2StreamError(f"{what} needs a CUDA GPU (TensorRT engines are built and run on one); none here")
