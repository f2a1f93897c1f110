#!/usr/bin/env bash
# Installs dependencies, builds everything and runs the whole test suite with CTest.
#   scripts/test.sh              release build + tests, and the build without LLVM + its tests
#   KILN_TEST_SANITIZE=1 scripts/test.sh   also an ASan+UBSan build of the suite (build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The CUDA toolkit's NVRTC is part of this machine's set-up: the tests that compile every kernel
# for sm_90 fail without it instead of skipping (KILN_REQUIRE_NVRTC=0 lets them skip).
export KILN_REQUIRE_NVRTC=${KILN_REQUIRE_NVRTC:-1}
cmake -S . -B build -G Ninja -DKILN_BUILD_TESTS=ON
cmake --build build
ctest --test-dir build --output-on-failure -j2
# The build without LLVM (what a GPU machine without llvm-19-dev builds): compiled programs run on
# the reference executor and must still match eager (ccache makes this build cheap after the first).
cmake -S . -B build-nollvm -G Ninja -DKILN_BUILD_TESTS=ON -DKILN_WITH_LLVM=OFF -DKILN_BUILD_TOOLS=OFF
cmake --build build-nollvm
ctest --test-dir build-nollvm --output-on-failure -j2
if [[ "${KILN_TEST_SANITIZE:-0}" == "1" ]]; then
  # -O1 and line tables only (-g1: file and line in the reports): half the compile time of -O2 -g,
  # and this build is most of a cold run's compile time.
  cmake -S . -B build-asan -G Ninja -DKILN_BUILD_TESTS=ON -DKILN_SANITIZE=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DKILN_BUILD_TOOLS=OFF
  cmake --build build-asan
  # OpenMP's runtime keeps thread-local state that LeakSanitizer reports at exit; leaks are
  # not what this run is for.
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j2
fi
