#!/usr/bin/env bash
# The main job: install dependencies, build, run the demo (seed workloads, eager).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DKILN_BUILD_TESTS=OFF
cmake --build build --target kiln-demo
./build/tools/kiln-demo
