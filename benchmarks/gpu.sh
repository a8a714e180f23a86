#!/usr/bin/env bash
# The GPU check, for a session lent a GPU machine: one command that gets every GPU figure and every GPU defect.
#   here first:  bash benchmarks/gpu_wheels.sh    (wheels the GPU machine lacks, into .whl/)
#   there:       bash benchmarks/gpu.sh           (device run with carry [".whl"]; results in $OUT, else
#                                                  benchmarks/results/)
# In order, each in its own time box (at most about 8.5 minutes in all, inside the session's 9 device minutes): the
# CUDA tests (tests/test_cuda.py, skipped on machines without a GPU), NVDEC and NVENC against the CPU's decoder and
# x264 (benchmarks/hardware_video.py: the host CPU they save per 1080p frame), the model benchmark
# (benchmarks/gpu.py), the fleet row (cameras per GPU at 10 results/s; needs ray there), the TensorRT rows
# (benchmarks/runtimes.py; needs tensorrt there) and the device rows of issue 72 (benchmarks/standin_device.py on
# the real device: files 1-8 x 720p/1080p x pose/pose+seg, cameras per GPU, webcam matting; they replace the older
# live and multi-camera steps). Neither ray's nor tensorrt's wheel is small enough to carry. A step that fails or
# runs out of time is reported and the next one still runs; each starts with the time of day.
#   ONLY=gpu_rows,gpu_model   runs those steps alone;  DEVICE=cpu   runs the device rows on the CPU (a dry run,
#   tested by tests/test_standin_device.py on every CI run).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 YOLO_AUTOINSTALL=0 YOLO_CONFIG_DIR="$(mktemp -d)"
echo "$(date +%T) setting up"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:$PWD:${PYTHONPATH:-}"  # the package from this tree, in child processes too
missing=$(python3 -c '
import importlib.util as u
needs = ("av filterpy paho cv2 yaml pytest torchvision safetensors huggingface_hub pydantic PIL prometheus_client "
         "pyarrow scipy tqdm starlette uvicorn websockets pycocotools transformers")
print(" ".join(m for m in needs.split() if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
    echo "gpu.sh: missing here: $missing; run bash benchmarks/gpu_wheels.sh on the session's machine and carry .whl"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu_device.txt"
# What every figure of this call is from (issue 61, item 5): the device, its driver, torch and the commit. The tree
# travels without .git: give the commit, e.g. `COMMIT=$(git rev-parse HEAD)` in the device command.
python3 - "$out/run.json" <<'PY'
import json, os, shutil, subprocess, sys, time
import torch
smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
driver = subprocess.run(smi, capture_output=True, text=True).stdout.strip() if shutil.which(smi[0]) else "none"
json.dump({"commit": os.environ.get("COMMIT", "unknown"), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", "driver": driver,
           "torch": torch.__version__, "cuda": torch.version.cuda}, open(sys.argv[1], "w"), indent=1)
PY

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $out/NAME.log, report how it ended
    local name=$1 limit=$2
    shift 2
    if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then return 0; fi
    echo "=== $(date +%T) $name (limit ${limit}s)"
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc$([ "$rc" = 124 ] && echo ' (out of time)')"
}
step gpu_tests 140 python3 -m pytest -m cuda tests/test_cuda.py -p no:cacheprovider -n 0 -rs
step gpu_video 25 python3 -m benchmarks.hardware_video --frames 90 --json "$out/hardware_video.json"
step gpu_model 110 python3 -m benchmarks.gpu --batches 1,8 --json "$out/gpu.json"
if python3 -c "import ray" 2>/dev/null; then
    SAPIENS2_BENCH_DEVICE=cuda SAPIENS2_BENCH_LIVE_S=10 step gpu_fleet 25 python3 -m benchmarks.fleet
elif [ -z "${ONLY:-}" ]; then
    echo "=== gpu_fleet: skipped: ray is not on this machine (its wheel is too big to carry)"
fi
if python3 -c "import tensorrt" 2>/dev/null; then  # TensorRT engines (bf16, fp16) against eager and compiled bf16
    step gpu_runtimes 50 python3 -m benchmarks.runtimes --device cuda --repeats 3 --json "$out/runtimes_gpu.json"
elif [ -z "${ONLY:-}" ]; then
    echo "=== gpu_runtimes: skipped: tensorrt is not on this machine (its wheel is too big to carry)"
fi
# the stand-in's rows on the real device: one JSON line per row in the log, all of them in the JSON
step gpu_rows 150 python3 -m benchmarks.standin_device --device "${DEVICE:-cuda}" --quick \
    --json "$out/standin_device_${DEVICE:-cuda}.json"
