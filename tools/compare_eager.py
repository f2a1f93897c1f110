#!/usr/bin/env python3
"""Interleaved comparison of kiln eager (kiln-eager-bench) with PyTorch 1.13 eager
(tools/bench_torch_eager.py) under three allocators (glibc malloc as-is, jemalloc with its
defaults, jemalloc set to keep large pages), on every seed workload.

Builds nothing: it runs an existing kiln-eager-bench (build it first, e.g.
  cmake -S . -B build-bench -G Ninja -DKILN_BUILD_TESTS=OFF && ninja -C build-bench kiln-eager-bench).

For each round, for each workload: kiln and the three torch configurations, one fresh process
each, back to back (the order rotates from round to round); each round ends with the bandwidth
references (kiln stream_copy and stream_triad, torch stream_copy). Every process runs with the same threads and OpenMP wait
policy. The table pools the timed reps of all rounds per (workload, implementation) and shows
their median, and kiln/torch ratios of those medians (< 1: kiln faster). The CPU time other
processes used while each measurement ran is recorded ("other load", in cores), since this
machine is shared.

Usage: tools/compare_eager.py [--rounds 3] [--reps 10] [--filter a,b] [--raw out.jsonl]
"""
import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = ["add_sin_cos", "poly", "where_scale", "broadcast_bias", "transpose_add", "unrolled_loop",
        "inplace_chain", "gelu_tanh", "sum_f64", "row_sum", "softmax", "log_softmax", "layernorm",
        "nbody_forces", "bias_relu", "attention_scores", "branch_sign", "add_sin_cos_bf16"]
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
# jemalloc's defaults purge freed blocks of >= 8 MiB at once (the "oversize" arena has zero
# decay); these settings make it keep large pages for reuse, like kiln's caching allocator.
JEMALLOC_KEEP = "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1"
TORCH_PY = "/usr/bin/python3"  # Debian's python3-torch (1.13)
HZ = os.sysconf("SC_CLK_TCK")


def cpu_busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq + steal


def others_load(seconds=0.5):
    """Cores busy over `seconds` while this harness sleeps (so: other processes)."""
    b0 = cpu_busy_jiffies()
    time.sleep(seconds)
    return (cpu_busy_jiffies() - b0) / HZ / seconds


def wait_idle(max_wait, threshold):
    waited = 0.0
    while waited < max_wait:
        if others_load() < threshold:
            break
        waited += 0.5
    return waited


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_one(cmd, env):
    """Runs cmd; returns (its JSON lines, wall seconds, cores other processes used meanwhile)."""
    c0, b0, t0 = children_cpu(), cpu_busy_jiffies(), time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    busy = (cpu_busy_jiffies() - b0) / HZ
    own = children_cpu() - c0  # the child's CPU time (it has been reaped)
    if p.returncode != 0:
        sys.exit(f"compare_eager: {' '.join(cmd)} failed ({p.returncode}):\n{err}")
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return lines, wall, max(0.0, (busy - own) / wall)


def source_state():
    """The kiln sources the bench was presumably built from: HEAD and any uncommitted runtime edits."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        diff = subprocess.run(["git", "-C", ROOT, "diff", "--stat", "HEAD", "--", "runtime"], capture_output=True,
                              text=True).stdout.strip().splitlines()
        return f"HEAD {head}" + (f", uncommitted runtime edits ({diff[-1].strip()})" if diff else ", runtime clean")
    except OSError:
        return "unknown (no git)"


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def fmt_ms(s):
    return f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln-bench", default=os.path.join(ROOT, "build-bench/tools/kiln-eager-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.2,
                    help="short workloads get more reps, to about this many seconds (both harnesses)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wait-policy", default="PASSIVE",
                    help="OMP_WAIT_POLICY for every process ('default' leaves it unset); see "
                         "docs/perf-journal.md, 'Eager CPU vs PyTorch 1.13 eager'")
    ap.add_argument("--wait-idle", type=float, default=5.0,
                    help="before each workload's group of runs wait up to this many seconds for other load to drop")
    ap.add_argument("--idle-threshold", type=float, default=0.5, help="cores of other load counted as idle")
    ap.add_argument("--filter", default="", help="comma-separated seed workloads (default: all)")
    ap.add_argument("--raw", default="", help="also write every JSON line here")
    args = ap.parse_args()

    if not os.access(args.kiln_bench, os.X_OK):
        sys.exit(f"compare_eager: {args.kiln_bench} not found; build it first:\n"
                 "  cmake -S . -B build-bench -G Ninja -DKILN_BUILD_TESTS=OFF && ninja -C build-bench kiln-eager-bench")
    if not os.path.exists(JEMALLOC):
        sys.exit(f"compare_eager: {JEMALLOC} missing (apt-get install -y libjemalloc2)")
    names = [n for n in args.filter.split(",") if n] or SEED

    env = dict(os.environ)
    for var in ("LD_PRELOAD", "MALLOC_CONF"):
        env.pop(var, None)
    env.update(OMP_NUM_THREADS=str(args.threads), KILN_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))
    if args.wait_policy.lower() == "default":
        env.pop("OMP_WAIT_POLICY", None)
    else:
        env["OMP_WAIT_POLICY"] = args.wait_policy
    common = ["--json", "--reps", str(args.reps), "--warmup", str(args.warmup), "--min-time", str(args.min_time)]
    torch_cmd = [TORCH_PY, os.path.join(ROOT, "tools/bench_torch_eager.py"), "--threads", str(args.threads)] + common
    kiln_cmd = [args.kiln_bench] + common
    impls = [("kiln", kiln_cmd, env),
             ("torch_glibc", torch_cmd, env),
             ("torch_jemalloc", torch_cmd, dict(env, LD_PRELOAD=JEMALLOC)),
             ("torch_jemalloc_keep", torch_cmd, dict(env, LD_PRELOAD=JEMALLOC, MALLOC_CONF=JEMALLOC_KEEP))]
    torch_impls = [i for i, _, _ in impls[1:]]

    raw = open(args.raw, "w") if args.raw else None
    times = {}   # (workload, impl) -> pooled rep times
    rounds = {}  # (workload, impl) -> per-round medians
    loads = {}   # impl -> other-load samples (cores)
    meta = {}
    start = time.monotonic()
    sources = source_state()  # at the start: others may edit the tree while this runs
    print(f"# compare_eager {datetime.datetime.now().isoformat(timespec='seconds')}: rounds {args.rounds}, "
          f"reps {args.reps} (+{args.warmup} warmup), threads {args.threads}, OMP_WAIT_POLICY {args.wait_policy}",
          file=sys.stderr)
    for r in range(args.rounds):
        # rotate which implementation goes first, so none always runs right after another's pages
        order = impls[r % len(impls):] + impls[:r % len(impls)]
        for w in names + ["__stream__"]:
            waited = wait_idle(args.wait_idle, args.idle_threshold) if args.wait_idle > 0 else 0.0
            for impl, cmd, e in order:
                if w == "__stream__":
                    if impl not in ("kiln", "torch_jemalloc_keep"):
                        continue
                    flt = "stream_copy,stream_triad" if impl == "kiln" else "stream_copy"
                else:
                    flt = w
                lines, wall, other = run_one(cmd + ["--filter", flt], e)
                loads.setdefault(impl, []).append(other)
                for d in lines:
                    d.update(round=r, impl_config=impl, other_load_cores=round(other, 3), waited_s=waited)
                    if raw:
                        raw.write(json.dumps(d) + "\n")
                    key = (d["name"], impl)
                    times.setdefault(key, []).extend(d["times"])
                    rounds.setdefault(key, []).append(d["median_s"])
                    meta[key] = d
                    if impl == "torch_glibc":
                        meta["torch_default_threads"] = d.get("default_threads")
                        meta["torch_version"] = d.get("torch")
                print(f"  round {r + 1} {flt:<26} {impl:<20} {wall:6.1f} s  other load {other:.2f} cores"
                      f"{f'  (waited {waited:.0f} s)' if waited else ''}", file=sys.stderr)
                waited = 0.0
    if raw:
        raw.close()

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nkiln eager vs PyTorch {meta.get('torch_version')} eager, {args.threads} threads "
          f"(torch default was {meta.get('torch_default_threads')}), OMP_WAIT_POLICY={args.wait_policy}; "
          f"{args.rounds} interleaved rounds x at least {args.reps} reps (+{args.warmup} warmup; short workloads: "
          f"reps filling {args.min_time} s), medians of the pooled reps.")
    print("torch columns: glibc = as-is; jemalloc = LD_PRELOAD libjemalloc.so.2, default settings; "
          f"jemalloc keep = the same with MALLOC_CONF={JEMALLOC_KEEP}.")
    print("Ratios are kiln / torch (< 1: kiln faster); 'best' is the fastest torch column per workload; "
          "range = min..max of the per-round kiln/best ratios.\n")
    print("| workload | kiln ms | torch glibc ms | torch jemalloc ms | torch jemalloc keep ms | kiln/glibc "
          "| kiln/jemalloc | kiln/jemalloc keep | kiln/best torch | range | kiln GB/s op by op | within 1.5x of best |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for w in names:
        k = med.get((w, "kiln"))
        t = [med.get((w, i)) for i in torch_impls]
        if k is None or None in t:
            continue
        best = min(t)
        nround = min(len(rounds[(w, i)]) for i in ["kiln"] + torch_impls)
        per_round = [rounds[(w, "kiln")][r] / min(rounds[(w, i)][r] for i in torch_impls) for r in range(nround)]
        gbs = meta[(w, "kiln")]["eager_bytes"] / k / 1e9
        ok = "yes" if k / best <= 1.5 else "**no**"
        print(f"| {w} | {fmt_ms(k)} | " + " | ".join(fmt_ms(x) for x in t) + " | "
              + " | ".join(f"{k / x:.2f}" for x in t)
              + f" | {k / best:.2f} | {min(per_round):.2f}..{max(per_round):.2f} | {gbs:.1f} | {ok} |")
    print()
    for key, label in [(("stream_copy", "kiln"), "kiln y.copy_(x) (memmove, 1 thread)"),
                       (("stream_triad", "kiln"), f"OpenMP triad a = b + s*c ({args.threads} threads)"),
                       (("stream_copy", "torch_jemalloc_keep"), "torch y.copy_(x) (jemalloc keep)")]:
        if key in med:
            print(f"- bandwidth, {label}, 64 MiB float32: {meta[key]['bytes'] / med[key] / 1e9:.1f} GB/s "
                  f"(median {fmt_ms(med[key])} ms; bytes counted: reads + writes)")
    for impl, v in loads.items():
        print(f"- other processes' load while {impl} ran: median {statistics.median(v):.2f} cores, "
              f"max {max(v):.2f} (of 2)")
    print(f"- wall time of the comparison: {(time.monotonic() - start) / 60:.1f} min; machine: {cpu_model()}, "
          f"{os.cpu_count()} CPUs; kiln sources at the start: {sources}; binary: {args.kiln_bench} "
          f"(built {datetime.datetime.fromtimestamp(os.path.getmtime(args.kiln_bench)).isoformat(timespec='seconds')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
