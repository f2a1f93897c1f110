#!/usr/bin/env bash
# Installs every Debian package kiln needs to build, test and benchmark.
# Idempotent: installs only what is missing. Run as root (or with sudo available).
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --peers    also the PyTorch peer used to regenerate conformance cases
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  llvm-19-dev                      # LLVM 19: the CPU backend (shared libLLVM)
  llvm-19-tools                    # FileCheck, for the golden tests (tests/passes/golden)
  nlohmann-json3-dev               # IR JSON form, conformance case files
  libgtest-dev libgmock-dev        # unit and conformance tests
  libbenchmark-dev                 # micro benchmarks
  libopenblas-dev                  # matmul / mm / bmm for float32 and float64
  libopenblas-openmp-dev           # OpenBLAS's OpenMP build, which kiln links when present
                                   # (its threads are kiln's OpenMP team: runtime/src/linalg.cpp)
  libdnnl-dev                      # oneDNN: float32 products at the CPU's own vector width
  libfmt-dev                       # formatting (printing, error messages)
  libcli11-dev                     # command-line parsing for tools
  libgomp1                         # OpenMP runtime: parallel-for in the eager kernels
  libsleef-dev                     # vectorised transcendental functions for the eager kernels
)
if [[ "${1:-}" == "--peers" ]]; then
  packages+=(python3-torch python3-numpy libjemalloc2)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} )); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "[setup] installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[setup] all packages present"
fi
