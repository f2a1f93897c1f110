#!/usr/bin/env bash
# kiln on a GPU machine that has CUDA, CMake and ninja but neither LLVM 19's development files
# nor a package registry. Two steps:
#
#   scripts/gpu.sh gather       on a Debian 12 machine with a registry (as root): installs kiln's
#                               packages (scripts/setup.sh) and packs what the GPU machine lacks
#                               (SLEEF, OpenBLAS, fmt, nlohmann/json, GoogleTest, CLI11: headers,
#                               libraries and CMake configs) into .gpu-deps/deps.tar.xz (ignored by
#                               git; about 10 MB). Take .gpu-deps along to the GPU machine.
#   scripts/gpu.sh ship         optional, here after gather: configures and builds build-carry against the
#                               gathered folder (unpacked at /tmp/kiln-deps, as the GPU machine will have
#                               it) and copies it without its object files into .gpu-ship (ignored; about
#                               25 MB), with the absolute paths ctest's files name. Take .gpu-ship along
#                               too: `run` then uses that build and builds nothing, which saves minutes of
#                               a lent machine (recreating those paths there as links to the repo).
#   scripts/gpu.sh run OUTDIR [PHASE ...]
#                               on the GPU machine: unpacks .gpu-deps, builds kiln with
#                               -DKILN_WITH_LLVM=OFF (CPU kernels on the reference executor) and
#                               runs the phases (default: all of them but sweep, in this order):
#                               test (the CUDA suite on the GPU), memcheck, all (the whole suite),
#                               small[=W,...] (per-call overhead; NVRTC compile vs disk-cache load),
#                               bench[=W,...] (the gpu tier against PyTorch eager and torch.compile,
#                               and each compiled kernel alone: kiln-bench --profile),
#                               dump (the rendered CUDA); sweep[=N] (kiln compiled under settings of
#                               the backend's tuning variables) and kernels[=W,...] (each kernel
#                               alone, under Nsight Compute) only by name. Each phase fits one
#                               ten-minute call of a lent machine. `run $OUT lease` alone is the plan
#                               for one call of a 15-minute lease: test, small=W, bench, then kernels
#                               and sweep=1 if time is left, under a 540 s deadline (KILN_GPU_DEADLINE). Logs and results go
#                               to OUTDIR, a summary last.
#
# The libraries are Debian 12's (glibc 2.36): they load on any x86-64 Linux with that glibc or newer.
set -euo pipefail
cd "$(dirname "$0")/.."

# OpenBLAS's OpenMP build, as scripts/setup.sh installs it (CMakeLists.txt prefers it), with the
# OpenMP runtime of the machine's own compiler (a GCC 12 libgomp first on the path could lack what a newer GCC emits)
packages=(libsleef-dev libsleef3 libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libquadmath0
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
        */openblas-openmp/*.a | */openblas-openmp/libblas* | */openblas-openmp/liblapack*) continue ;;
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

# Unpacks .gpu-deps at /tmp/kiln-deps (once) and points pkg-config and the loader at it; sets `usr`.
unpack_deps() {
  [[ -f .gpu-deps/deps.tar.xz ]] || { echo "[gpu] .gpu-deps/deps.tar.xz is missing: run scripts/gpu.sh gather first" >&2; exit 2; }
  local prefix=/tmp/kiln-deps
  if [[ ! -f $prefix/.unpacked ]]; then
    rm -rf "$prefix" && mkdir -p "$prefix"
    tar -C "$prefix" -xJf .gpu-deps/deps.tar.xz
    find "$prefix/usr" -name '*.pc' -exec sed -i "s|/usr|$prefix/usr|g" {} +
    touch "$prefix/.unpacked"
  fi
  usr=$prefix/usr
  local lib=$prefix/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-openmp/pkgconfig:$usr/share/pkgconfig
  export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp:${LD_LIBRARY_PATH:-}
}

configure() {  # configure DIR LOG: kiln without LLVM against the gathered folder
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_LLVM=OFF -DKILN_WITH_ONEDNN=OFF -DKILN_BUILD_TESTS=ON \
        -DCMAKE_PREFIX_PATH="$usr" -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu >"$2" 2>&1 ||
    { tail -30 "$2"; exit 1; }
}

ship() {
  unpack_deps
  local b=build-carry
  configure $b /tmp/kiln-ship-configure.log  # (again on an existing folder: its cache takes today's options)
  cmake --build $b
  rm -rf .gpu-ship && mkdir -p .gpu-ship
  # (the object files are not needed to run; the rest is executables, libraries and ctest's files)
  tar -C "$b" --exclude='*.o' --exclude='.ninja_*' -cf - . | (mkdir -p .gpu-ship/build && tar -C .gpu-ship/build -xf -)
  { echo "$(cd . && pwd)"; echo "$(cd "$b" && pwd)"; } >.gpu-ship/paths
  echo "[gpu] shipped $b ($(du -sh .gpu-ship | cut -f1)) into .gpu-ship: configured at $(head -1 .gpu-ship/paths)"
}

# A build from `ship`, where one was taken along: the absolute paths it was configured at are
# made to lead here (links, where they do not exist already). Sets `build`.
shipped_build() {
  [[ -f .gpu-ship/paths ]] || return 1
  local src dir
  { read -r src; read -r dir; } <.gpu-ship/paths
  if [[ ! -e $src ]]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
  if [[ ! -e $dir/CTestTestfile.cmake ]]; then rm -f "$dir" && ln -s "$PWD/.gpu-ship/build" "$dir"; fi
  build=$dir
  # ctest's files also name the cmake that configured the build (tests that run `cmake -P`):
  # where it is elsewhere here, they are pointed at this machine's
  local cmake_was here
  cmake_was=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' .gpu-ship/build/CMakeCache.txt)
  here=$(command -v cmake || true)
  if [[ -n $cmake_was && -n $here && ! -x $cmake_was ]]; then
    find .gpu-ship/build -name CTestTestfile.cmake -exec sed -i "s|$cmake_was|$here|g" {} +
  fi
}

# Unpacks .gpu-deps and builds kiln (incrementally: a machine that kept build-gpu from an
# earlier call only relinks what changed), or takes a shipped or given build. Sets `build` and
# the library paths for the phases.
prepare() {
  local out=$1
  unpack_deps
  {
    nvidia-smi || true
    nvcc --version || true
    cmake --version | head -1
    c++ --version | head -1
  } >"$out/machine.txt" 2>&1
  # KILN_GPU_BUILD=DIR: a build made elsewhere against the same gathered folder (unpacked at the
  # same /tmp/kiln-deps) and carried along, used as it is: it saves the build's minutes of a
  # lent machine. ctest's files name absolute paths, so DIR must sit where it was configured.
  if [[ -n ${KILN_GPU_BUILD:-} ]]; then
    build=$KILN_GPU_BUILD
    [[ -f $build/CTestTestfile.cmake ]] || { echo "[gpu] KILN_GPU_BUILD=$build is not a build folder" >&2; exit 2; }
    return 0
  fi
  if shipped_build; then
    echo "[gpu] using the shipped build at $build" | tee -a "$out/machine.txt"
    return 0
  fi
  build=build-gpu
  [[ -f $build/build.ninja ]] || configure $build "$out/configure.log"
  cmake --build $build >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
}

# The phases of a GPU run, each small enough for one call of a lent machine (at most ten
# minutes); `run OUTDIR` does them all in order. Every phase appends "phase: status" to
# OUTDIR/summary.txt, which is printed last. With KILN_GPU_DEADLINE=S the whole run ends
# within S seconds: each phase's limit is cut to the time left, and a phase with under 20 s
# left is skipped.
deadline=
limit() {  # limit N: N seconds, or the time left before the deadline if that is less
  local n=$1
  if [[ -n $deadline ]] && (( deadline - SECONDS < n )); then n=$(( deadline - SECONDS )); fi
  (( n > 0 )) || n=1
  echo "$n"
}
phase_test() {  # the CUDA suite on the real GPU, fresh device memory poisoned (NaN / -1), 300 random
                # programs, 100 random graphs at small and at larger shapes, 100 fuzzed graph files,
                # from a fresh seed base each run (tests/common/seeds.h: new programs and input
                # values; the base is in the summary, to reproduce a failure) (KILN_GPU_TEST_REGEX:
                # only the tests it matches)
  local base=${KILN_TEST_SEED_BASE:-$(( RANDOM << 15 | RANDOM ))}  # (under 2^30: base + count fits 32 bits)
  echo "test: KILN_TEST_SEED_BASE=$base" | tee -a "$out/summary.txt"
  KILN_TEST_SEED_BASE=$base KILN_TEST_REAL_CUDA=1 KILN_CUDA_POISON=1 KILN_DIFFERENTIAL_PROGRAMS=${KILN_DIFFERENTIAL_PROGRAMS:-300} \
    KILN_FUZZ_GPU_MUTANTS=${KILN_FUZZ_GPU_MUTANTS:-100} \
    KILN_PROPERTY_GRAPHS=${KILN_PROPERTY_GRAPHS:-100} timeout "$(limit "${KILN_GPU_TEST_TIMEOUT:-540}")" ctest --test-dir $build -j"${KILN_GPU_TEST_JOBS:-4}" -R "${KILN_GPU_TEST_REGEX:-Cuda|cuda}" \
    -E 'CudaEmulation|CudaSource|CudaNvrtc|CudaCubin|golden' --output-on-failure >"$out/ctest-cuda.log" 2>&1
}
phase_memcheck() {  # compute-sanitizer's memcheck over the GPU suite, where the toolkit has it: the
                    # backend's tests, the device runtime's, and the ops' conformance on the GPU,
                    # one after the other within the phase's limit
  command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer" >"$out/memcheck.log"; return 0; }
  local end=$(( SECONDS + $(limit "${KILN_GPU_MEMCHECK_TIMEOUT:-540}") )) rc=0 run t
  : >"$out/memcheck-full.log" && : >"$out/memcheck.log"
  for run in "codegen/cuda_backend_tests" "cuda_device_tests" "conformance_tests --gtest_filter=*Cuda*"; do
    t=${run%% *}
    if (( end - SECONDS < 10 )); then echo "$t: no time left" | tee -a "$out/memcheck.log"; rc=1; continue; fi
    # (word splitting of $run on purpose: the binary, then its filter)
    # shellcheck disable=SC2086
    KILN_TEST_REAL_CUDA=1 timeout $(( end - SECONDS )) compute-sanitizer --tool memcheck --error-exitcode 1 \
      $build/tests/$run >"$out/memcheck-$(basename "$t").log" 2>&1 || rc=1
    cat "$out/memcheck-$(basename "$t").log" >>"$out/memcheck-full.log"
    { echo "== $run"; grep -E "tests? from .* ran|PASSED|FAILED|ERROR SUMMARY" "$out/memcheck-$(basename "$t").log" | tail -5; } >>"$out/memcheck.log"
  done
  return $rc
}
phase_all() {  # everything else (the emulated CUDA tests included)
  timeout "$(limit 540)" ctest --test-dir $build -j16 --output-on-failure >"$out/ctest-all.log" 2>&1
}
phase_bench() {  # kiln (eager, compiled, CUDA graphs) against torch eager, torch.compile and its
                 # reduce-overhead mode at the gpu tier, workload by workload (FILTER: a comma list),
                 # and each compiled kernel alone (kiln-bench --profile: CUDA events around it)
  local filter=${1:-} tag=${1:-all}
  tag=${tag//,/-}
  (( ${#tag} <= 60 )) || tag="${filter%%,*}-and-more"
  local dir=$out/bench-gpu-$tag
  # (every host core for the cpu references and input generation: the timed work is the GPU's)
  # (one peers process for every workload: PyTorch's import and torch.compile's start-up once, 9-12 s
  # per workload otherwise, measured on a CPU host; docs/bench.md)
  timeout "$(limit "${KILN_GPU_BENCH_TIMEOUT:-560}")" python3 tools/bench/compare.py --kiln-bench $build/tools/kiln-bench --python python3 --device cuda \
    --threads "$(nproc)" --tier gpu --no-compile-time --profile --trace --one-peers-process ${filter:+--filter "$filter"} ${KILN_GPU_PEERS:+--peers "$KILN_GPU_PEERS"} --out "$dir" \
    >"$dir.log" 2>&1
  local rc=$?
  # cut short by its limit: the table of the workloads it finished
  [[ -f $dir/table.txt || ! -f $dir/bench.json ]] || python3 tools/bench/compare.py --summarize "$dir" >>"$dir.log" 2>&1
  return $rc
}
# The sweeps of the backend's tuning variables (docs/env_vars.md, tools/bench/sweep.py), a table
# each: the workloads (W, or W/INPUT=SIZES/... for other sizes than the gpu tier's: block-per-row
# layernorm and softmax over rows of 4096) and the settings, separated by '|' ('defaults': none set).
# (An H100 sweep made one block per step of work the default, and a second H100 lease's sweep
# confirmed it, with 64-wide tiles inside the spread; row groups took nbody_forces there from 0.56
# to 0.38 ms: docs/perf-journal.md, "The lease plan on an H100, and what it found" and "The lease
# on an H100, and row groups". The lease keeps the row-group sweep, a check that the default
# still pays.)
sweeps=(
  "nbody_forces|defaults|KILN_CUDA_ROW_GROUPS=0"
  "transpose_add|defaults|KILN_CUDA_TILE=64"
  "transpose_add,softmax/x=16384x4096,row_sum,add_sin_cos_bf16|defaults|KILN_CUDA_GRID_PER_SM=8"
)
phase_sweep() {  # kiln compiled alone under each setting, side by side (N: only the N-th sweep)
  local end=$(( SECONDS + $(limit "${KILN_GPU_SWEEP_TIMEOUT:-300}") )) rc=0 n=0 group
  for group in "${sweeps[@]}"; do
    n=$((n + 1))
    [[ -z ${1:-} || $1 == "$n" ]] || continue
    local parts=() args=() s
    IFS='|' read -r -a parts <<<"$group"
    for s in "${parts[@]:1}"; do args+=(--setting "${s/#defaults/}"); done
    (( end - SECONDS > 5 )) || { echo "sweep $n: no time left" >>"$out/sweep.log"; rc=1; continue; }
    timeout $(( end - SECONDS )) python3 tools/bench/sweep.py --kiln-bench $build/tools/kiln-bench --device cuda --tier gpu \
      --filter "${parts[0]}" "${args[@]}" --rounds "${KILN_GPU_SWEEP_ROUNDS:-1}" --out "$out/sweep-$n" >>"$out/sweep.log" 2>&1 || rc=1
    # cut short by its limit: the table of the workloads it finished
    [[ -f $out/sweep-$n/sweep.txt || ! -f $out/sweep-$n/sweep.json ]] ||
      python3 tools/bench/sweep.py --summarize "$out/sweep-$n" >>"$out/sweep.log" 2>&1
  done
  return $rc
}
phase_small() {  # tiny tensors: the per-call host overhead; and NVRTC compile vs disk-cache load
                 # (the cold and warm first calls in child processes); a new size of a GPU op
                 # (NVRTC per size vs size-generic kernels). FILTER (a comma list): the per-call
                 # overhead of those workloads alone (plain launches and CUDA graphs), in seconds
  if [[ -n ${1:-} ]]; then
    timeout "$(limit 60)" $build/tools/kiln-bench --device cuda --tier small --filter "$1" --no-compile-time \
      --min-time 0.2 --json "$out/bench-small.json" >"$out/bench-small.log" 2>&1
    return
  fi
  timeout "$(limit 480)" $build/tools/kiln-bench --device cuda --tier small --json "$out/bench-small.json" \
    >"$out/bench-small.log" 2>&1 || return 1
  timeout "$(limit 60)" $build/tools/kiln-compile-overhead --cuda-new-sizes --sizes 8 >"$out/new-sizes.log" 2>&1
}
phase_kernels() {  # each kernel alone, where the machine has Nsight Compute (ncu): its time and
                   # DRAM bytes per launch, without the host's work around it (branch_sign's guard
                   # reads the sum back every call), kiln compiled at the gpu tier (FILTER: a comma
                   # list; default branch_sign); the table in OUTDIR/kernels.txt
  command -v ncu >/dev/null || { echo "no ncu" >"$out/kernels.txt"; return 0; }
  local rc copy
  # (LC_ALL=C: numbers with a decimal point, whatever the machine's locale)
  LC_ALL=C timeout "$(limit 150)" ncu --csv --print-units base --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $build/tools/kiln-bench --device cuda --tier gpu --filter "${1:-branch_sign}" --variants compiled --no-check \
    --no-compile-time --warmup 1 --reps 3 --min-time 0 >"$out/kernels-ncu.csv" 2>"$out/kernels-ncu.log"
  rc=$?
  # (the device-to-device copy kiln-bench measures first, which ncu does not profile: not a kernel)
  copy=$(sed -n 's/.*CUDA events): \([0-9.]*\) GB\/s.*/\1/p' "$out/kernels-ncu.csv" | head -1)
  python3 tools/bench/ncu_summary.py "$out/kernels-ncu.csv" ${copy:+--copy-gbps "$copy"} >"$out/kernels.txt" 2>&1 || rc=1
  return $rc
}
phase_dump() {  # the rendered CUDA of a few workloads at the gpu tier
  local w
  for w in add_sin_cos softmax layernorm sum_f64 transpose_add; do
    $build/tools/dump-ir/dump-ir "$w" --size gpu --emit=cuda >"$out/$w.cu" 2>&1 || return 1
  done
}

run() {
  out=${1:?usage: scripts/gpu.sh run OUTDIR [PHASE ...]}
  shift
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local phases=("$@")
  [[ ${#phases[@]} -gt 0 ]] || phases=(test memcheck all small bench dump)
  if [[ ${phases[*]} == lease ]]; then
    # One call of a lent machine (a session has 15 minutes of device time, the machine's start
    # included, and one command runs at most ten): a shorter correctness run, the per-call overhead
    # on tiny tensors (a few seconds), then the workloads against PyTorch with each compiled kernel
    # alone (--profile: branch_sign's kernels without the read back to the host each call), those
    # timed longest ago first (the H100 lease of docs/perf-journal.md, "The lease on an H100, and
    # row groups", timed the last 13), for as long as the deadline allows; then, if time is left,
    # branch_sign's kernels under Nsight Compute (a cross-check) and the row-group sweep. (That
    # lease's call ran test 78 s, sweep 100 s, small 4 s and 13 workloads in 283 s: the 18 with
    # their profiles need most of the deadline.)
    export KILN_DIFFERENTIAL_PROGRAMS=${KILN_DIFFERENTIAL_PROGRAMS:-100} KILN_PROPERTY_GRAPHS=${KILN_PROPERTY_GRAPHS:-30}
    export KILN_GPU_TEST_JOBS=${KILN_GPU_TEST_JOBS:-12} KILN_GPU_TEST_TIMEOUT=${KILN_GPU_TEST_TIMEOUT:-150}
    export KILN_GPU_SWEEP_TIMEOUT=${KILN_GPU_SWEEP_TIMEOUT:-150} KILN_GPU_SWEEP_ROUNDS=${KILN_GPU_SWEEP_ROUNDS:-2}
    KILN_GPU_DEADLINE=${KILN_GPU_DEADLINE:-540}
    phases=(test "small=${KILN_GPU_LEASE_SMALL:-add_sin_cos,softmax,layernorm,attention_scores}" "bench=${KILN_GPU_LEASE_BENCH:-attention_scores,inplace_chain,log_softmax,row_sum,sum_f64,branch_sign,nbody_forces,transpose_add,add_sin_cos_bf16,softmax,layernorm,broadcast_bias,gelu_tanh,bias_relu,poly,where_scale,unrolled_loop,add_sin_cos}" kernels=branch_sign sweep=1)
  fi
  [[ -z ${KILN_GPU_DEADLINE:-} ]] || deadline=$(( SECONDS + KILN_GPU_DEADLINE ))
  prepare "$out"
  local status=0 p rc
  for p in "${phases[@]}"; do
    local name=${p%%=*} arg=
    [[ $p == *=* ]] && arg=${p#*=}
    declare -F "phase_$name" >/dev/null || { echo "[gpu] no phase '$name' (test memcheck all small[=W,...] kernels[=W,...] bench[=W,...] sweep[=N] dump, or lease alone)" >&2; exit 2; }
    if [[ -n $deadline ]] && (( deadline - SECONDS < 20 )); then
      echo "$p: skipped (deadline)" | tee -a "$out/summary.txt"
      continue
    fi
    local t0=$SECONDS
    set +e
    "phase_$name" $arg
    rc=$?
    set -e
    echo "$p: $([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)") in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
    [[ $rc == 0 ]] || status=1
  done
  # the short story last: what the reply of a lent machine's call carries
  grep -h -E "tests passed|tests failed|ERROR SUMMARY" "$out"/ctest-*.log "$out"/memcheck.log 2>/dev/null || true
  for f in "$out"/sweep-*/sweep.txt "$out"/kernels.txt "$out"/bench-gpu-*/table.txt; do [[ -f $f ]] && cat "$f"; done
  echo "[gpu] results in $out (status $status)"
  return $status
}

case "${1:-}" in
  gather) gather ;;
  ship) ship ;;
  run) shift && run "$@" ;;
  *)
    echo "usage: scripts/gpu.sh gather | ship | run OUTDIR [lease | test | memcheck | all | small | kernels[=W,...] | bench[=W,...] | sweep[=N] | dump ...]" >&2
    exit 2
    ;;
esac
