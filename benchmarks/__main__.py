"""All CPU benchmarks in one run: `python -m benchmarks [--json PATH]`.

Prints one table of ratios against named baselines measured in the same run and saves them as JSON
(default benchmarks/results/cpu.json). The GPU check is separate: benchmarks/gpu.sh.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from benchmarks import (
    api,
    calibrate,
    console,
    fleet,
    live,
    live_mocap,
    model_forward,
    multi_source,
    pipeline,
    processing,
    smoothing,
    temporal,
    threed,
    triangulate,
)
from benchmarks.common import print_table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="benchmarks/results/cpu.json")
    args = parser.parse_args()
    rows = []
    for module in (
        model_forward,
        processing,
        smoothing,
        temporal,
        threed,
        triangulate,
        live_mocap,
        pipeline,
        live,
        multi_source,
        fleet,
        console,
        api,
        calibrate,
    ):
        rows += module.run()
    rows += model_forward.run_compiled()
    print_table(rows)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(), "torch": torch.__version__}  # fmt: skip
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
