#!/usr/bin/env bash
# kiln on a GPU machine that has CUDA, CMake and ninja but neither LLVM 19's development files
# nor a package registry. Two steps:
#
#   scripts/gpu.sh gather       on a Debian 12 machine with a registry (as root): installs kiln's
#                               packages (scripts/setup.sh) and packs what the GPU machine lacks
#                               (SLEEF, OpenBLAS, fmt, nlohmann/json, GoogleTest, CLI11: headers,
#                               libraries and CMake configs) into .gpu-deps/deps.tar.xz (ignored by
#                               git; about 10 MB). Take .gpu-deps along to the GPU machine.
#   scripts/gpu.sh run OUTDIR   on the GPU machine: unpacks .gpu-deps, builds kiln with
#                               -DKILN_WITH_LLVM=OFF (CPU kernels on the reference executor), runs the
#                               CUDA tests and then the whole suite, and writes every log, the
#                               device's description and the rendered CUDA of the workloads to OUTDIR.
#
# The libraries are Debian 12's (glibc 2.36): they load on any x86-64 Linux with that glibc or newer.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libsleef-dev libsleef3 libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
          libfmt-dev libfmt9 nlohmann-json3-dev libgtest-dev libgmock-dev libcli11-dev)

gather() {
  bash scripts/setup.sh
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  local p f target
  for p in "${packages[@]}"; do
    while read -r f; do
      [[ -f "$f" || -L "$f" ]] || continue
      case "$f" in
        /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /usr/src/*) continue ;;
        # the static BLAS and LAPACK (hundreds of MB) and the reference BLAS are not needed
        */openblas-pthread/*.a | */openblas-pthread/libblas* | */openblas-pthread/liblapack*) continue ;;
      esac
      mkdir -p "$stage$(dirname "$f")"
      target=$(readlink "$f" || true)
      if [[ -L "$f" && "$target" == /* ]]; then
        cp -L "$f" "$stage$f"  # an absolute link (Debian's alternatives) would dangle there
      else
        cp -a "$f" "$stage$f"
      fi
    done < <(dpkg -L "$p")
  done
  mkdir -p .gpu-deps
  tar -C "$stage" -cJf .gpu-deps/deps.tar.xz usr
  echo "[gpu] packed $(du -h .gpu-deps/deps.tar.xz | cut -f1) into .gpu-deps/deps.tar.xz"
}

run() {
  local out=${1:?usage: scripts/gpu.sh run OUTDIR}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  [[ -f .gpu-deps/deps.tar.xz ]] || { echo "[gpu] .gpu-deps/deps.tar.xz is missing: run scripts/gpu.sh gather first" >&2; exit 2; }
  local prefix=/tmp/kiln-deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  tar -C "$prefix" -xJf .gpu-deps/deps.tar.xz
  local usr=$prefix/usr lib=$prefix/usr/lib/x86_64-linux-gnu
  # pkg-config files (where pkg-config exists) name /usr: point them at the unpacked tree
  find "$usr" -name '*.pc' -exec sed -i "s|/usr|$usr|g" {} +
  export PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$usr/share/pkgconfig
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}
  {
    nvidia-smi || true
    nvcc --version || true
    cmake --version | head -1
    c++ --version | head -1
  } >"$out/machine.txt" 2>&1
  local build=build-gpu
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_LLVM=OFF -DKILN_BUILD_TESTS=ON \
        -DCMAKE_PREFIX_PATH="$usr" -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu 2>&1 | tee "$out/configure.log"
  cmake --build $build 2>&1 | tee "$out/build.log"
  local status=0
  # the CUDA suite on the real GPU first (its log is what a short call must bring back), then
  # everything (the emulated CUDA tests included)
  # (fresh device memory poisoned: an element no kernel writes reads as NaN / -1)
  KILN_TEST_REAL_CUDA=1 KILN_CUDA_POISON=1 ctest --test-dir $build -j4 -R 'Cuda|cuda' \
    -E 'CudaEmulation|CudaSource|CudaNvrtc|CudaCubin' --output-on-failure 2>&1 | tee "$out/ctest-cuda.log" || status=1
  # compute-sanitizer's memcheck over the GPU suite, where the toolkit has it
  if command -v compute-sanitizer >/dev/null; then
    KILN_TEST_REAL_CUDA=1 timeout 900 compute-sanitizer --tool memcheck --error-exitcode 1 \
      $build/tests/codegen/cuda_backend_tests 2>&1 | tail -200 >"$out/memcheck.log" || status=1
  fi
  ctest --test-dir $build -j16 --output-on-failure 2>&1 | tee "$out/ctest-all.log" || status=1
  # the benchmark: kiln eager, compiled and compiled with CUDA graphs against PyTorch eager,
  # torch.compile and its reduce-overhead mode, workload by workload; then the per-call
  # overhead at the small tier (tiny tensors: launch-bound)
  if [[ -x $build/tools/kiln-bench ]]; then
    python3 tools/bench/compare.py --kiln-bench $build/tools/kiln-bench --python python3 --device cuda \
      --tier gpu --out "$out/bench-gpu" 2>&1 | tee "$out/bench-gpu.log" || status=1
    $build/tools/kiln-bench --device cuda --tier small --json "$out/bench-small.json" \
      2>&1 | tee "$out/bench-small.log" || status=1
  fi
  if [[ -x $build/tools/dump-ir/dump-ir ]]; then
    for w in add_sin_cos softmax layernorm sum_f64 transpose_add; do
      $build/tools/dump-ir/dump-ir "$w" --size gpu --emit=cuda >"$out/$w.cu" 2>&1 || status=1
    done
  fi
  echo "[gpu] results in $out (status $status)"
  return $status
}

case "${1:-}" in
  gather) gather ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: scripts/gpu.sh gather | run OUTDIR" >&2
    exit 2
    ;;
esac
