#!/usr/bin/env bash
# The GPU check, for a session lent a GPU machine; finishes in under 10 minutes on an H100/H200.
#   run: bash benchmarks/gpu.sh            (results in $OUT/gpu.json when OUT is set, else benchmarks/results/)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
python3 -m pip install -q --no-deps -e . 2>/dev/null || true
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
timeout 540 python3 -m benchmarks.gpu --json "$out/gpu.json" 2>&1 | tee "$out/gpu.log"
