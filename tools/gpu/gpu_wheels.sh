#!/usr/bin/env bash
# Download, here (on the CPU machine, no device time), the wheels a lent GPU machine lacks to import the package:
#
#     bash tools/gpu/gpu_wheels.sh          # -> .whl/ (ignored by git; name it in the device tool's `carry`)
#
# The GPU image (the device tool's KINDS.md: Python 3.12, its own torch, transformers, huggingface-hub, jaxtyping,
# safetensors, matplotlib, ...) lacks transformer-lens and the modules it imports at import time that the image does
# not hold (datasets, dill, multiprocess, and what this machine's huggingface-hub imports). tools/gpu/gpu_queue.sh
# installs .whl/*.whl there with --no-deps and exits 3 naming the first module that still cannot be imported: add it
# here. Versions are the ones this package is tested with (pip show on the CPU machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=(
  transformer-lens==4.3.0
  datasets==5.2.0
  dill==0.4.1
  multiprocess==0.70.19
  httpx2==2.16.2
  httpcore2==2.16.2
  truststore==0.10.5
  trio==0.22.2
  outcome==1.3.0.post0
  sniffio==1.3.1
)
mkdir -p .whl
for w in "${WHEELS[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$w"
done
du -sh .whl && ls .whl
