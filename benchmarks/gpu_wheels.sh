#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before the first `bash benchmarks/gpu.sh` of a session: the GPU machine has
# torch, OpenCV, PyYAML, pytest and most of what the package needs, but not PyAV, filterpy, paho-mqtt, pydantic or
# the console's web stack, its transformers (5.17) is older than the reference the parity rows name, and it cannot
# reach a package index. This puts those wheels (Python 3.12, x86-64) in .whl/, about 52 MB: with the tracked tree
# that is just under the device call's 64 MiB. Name `.whl` in the device run's `carry`; gpu.sh installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms="$platforms --platform $p"
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
    -d .whl av==18.1.0 filterpy==2.0.0 paho-mqtt==2.2.0 transformers==5.23.0 \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 starlette==1.10.0 \
    uvicorn==0.55.0 websockets==17.4 typing-extensions==4.16.0 pycocotools==2.0.11
ls -la .whl
