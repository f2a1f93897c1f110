#!/usr/bin/env bash
# The main job: install dependencies, build, run the demo (seed workloads, eager, and a compiled
# function), then kiln-bench on the small tier: every workload compiled by the CPU backend,
# checked against eager, timed against it, with cold and warm first-call times.
# (`kiln-bench --tier bench` measures at the sizes docs/perf.md reports.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DKILN_BUILD_TESTS=OFF
cmake --build build --target kiln-demo kiln-bench
./build/tools/kiln-demo
./build/tools/kiln-bench --tier small --reps 10 --min-time 0.05
