#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before the first `bash benchmarks/gpu.sh` of a session: the GPU machine has
# torch, OpenCV, PyYAML, pytest and most of what the package needs, but not PyAV, filterpy or paho-mqtt, and it
# cannot reach a package index. This puts those wheels (Python 3.12, x86-64) in .whl/, about 40 MB; name `.whl`
# in the device run's `carry` and gpu.sh installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms="$platforms --platform $p"
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
    -d .whl av==18.1.0 filterpy==2.0.0 paho-mqtt==2.2.0
ls -la .whl
