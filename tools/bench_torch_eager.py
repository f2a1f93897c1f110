#!/usr/bin/python3
"""PyTorch eager on kiln's seed workloads: the programs, sizes and rep policy of
tools/eager_bench.cpp (kiln-eager-bench), printing the same lines.

Run with Debian's python3-torch (1.13): /usr/bin/python3 tools/bench_torch_eager.py --json
The allocator is whatever the process runs under: glibc malloc as-is, or jemalloc via
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (the JSON line's "allocator" says which,
with MALLOC_CONF). Note that jemalloc's defaults purge blocks of 8 MiB and more at once when
freed (its "oversize" arena has zero decay), so only with
MALLOC_CONF=oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1 does it keep the pages
of large tensors for reuse, as kiln's caching allocator does.

Per workload: fresh random inputs, --warmup untimed runs, then at least --reps timed runs (more
for short workloads, enough to fill --min-time seconds judged from the last warmup run); each
result is dropped after its clock stops. inplace_chain re-copies its input from a pristine source
before every run, outside the timed region. Threads: --threads (default 2) is passed to
torch.set_num_threads; the default torch picked before that is reported as "default_threads".
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

MI = 1 << 20
N16, N1 = 16 * MI, MI
F4 = 4.0


def _inplace_chain():
    src = torch.randn(N16) * 4
    x = torch.empty(N16)

    def run():
        x.add_(1)
        x.relu_()
        x.clamp_(0, 6)
        x.mul_(0.5)
        return x

    def before():
        x.copy_(src)

    return run, before


def _unrolled_loop():
    x0, y = torch.randn(N16), torch.randn(N16)

    def run():
        x = x0
        for _ in range(16):
            x = x * 0.5 + y
        return x

    return run, None


def _layernorm():
    x, w, b = torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024)

    def run():
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * w + b

    return run, None


def _nbody(n=2500):
    pos, mass = torch.randn(2, n), torch.rand(n)

    def run():
        G = 6.67e-11
        diff = pos[:, None, :] - pos[:, :, None]
        dist = diff.norm(dim=0)
        direction = diff / dist
        forces = G * mass[:, None] * mass[None, :] / dist**2
        return (direction * forces[None, :, :]).nansum(dim=2)

    return run, None


def _bias_relu():
    x, W, b = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.randn(1024)
    return (lambda: torch.relu(x @ W + b)), None


def _attention():
    q, k = torch.randn(32, 8, 100, 64), torch.randn(32, 8, 100, 64)
    return (lambda: torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(64.0), -1)), None


def _branch_sign():
    x = torch.randn(N1)

    def run():
        if x.sum() > 0:
            return x * 2
        return x * -2

    return run, None


def _add_sin_cos(dtype):
    def make():
        a, b = torch.randn(N16, dtype=dtype), torch.randn(N16, dtype=dtype)
        return (lambda: (a + b) + torch.sin(a) * torch.cos(b)), None
    return make


def _unary(make_input, fn):
    def make():
        x = make_input()
        return (lambda: fn(x)), None
    return make


def _inplace_op(op):
    def make():
        src = torch.randn(N16) * 4
        x = torch.empty(N16)

        def before():
            x.copy_(src)

        return (lambda: op(x)), before
    return make


def _stream_copy():
    x, y = torch.randn(N16), torch.empty(N16)
    return (lambda: y.copy_(x)), None


def _nbody_eager_bytes(n=2500):
    nn = float(n) * n
    return ((2 * nn + nn) + (2 * nn + nn + 2 * nn) + nn * 5 + (2 * nn * 2 + 2 * nn) + (2 * nn + 2 * n)) * F4


SM = 4096.0 * 1024
B_ATT, Q_ATT, D_ATT = 32 * 8, 100, 64

# name: (make, bytes, eager_bytes, flops, reference); must match tools/eager_bench.cpp
WORKLOADS = {
    "add_sin_cos": (_add_sin_cos(torch.float32), 3 * N16 * F4, 13 * N16 * F4, 0, False),
    "poly": (_unary(lambda: torch.randn(N16), lambda x: torch.pow(x, 2) + x * 3), 2 * N16 * F4, 7 * N16 * F4, 0, False),
    "where_scale": (_unary(lambda: torch.rand(4096, 4096), lambda x: torch.where(x > 0.5, x * 2, x / 2)),
                    2 * N16 * F4, 34.0 * N16, 0, False),
    "broadcast_bias": (lambda: ((lambda m, bias: (lambda: m + bias))(torch.randn(8192, 4096), torch.randn(4096)), None),
                       (2.0 * 8192 * 4096 + 4096) * F4, (2.0 * 8192 * 4096 + 4096) * F4, 0, False),
    "transpose_add": (lambda: ((lambda x, y: (lambda: x.t() + y))(torch.randn(4096, 4096), torch.randn(4096, 4096)), None),
                      3 * N16 * F4, 3 * N16 * F4, 0, False),
    "unrolled_loop": (_unrolled_loop, 3 * N16 * F4, 16 * 5 * N16 * F4, 0, False),
    "inplace_chain": (_inplace_chain, 2 * N16 * F4, 4 * 2 * N16 * F4, 0, False),
    "gelu_tanh": (_unary(lambda: torch.randn(N16),
                         lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3))))),
                  2 * N16 * F4, 18 * N16 * F4, 0, False),
    "sum_f64": (_unary(lambda: torch.randn(N1, dtype=torch.float64), lambda t: t.sum()), N1 * 8.0, N1 * 8.0, 0, False),
    "row_sum": (_unary(lambda: torch.randn(4096, 4096), lambda x: x.sum(1)), (N16 + 4096) * F4, (N16 + 4096) * F4, 0, False),
    "softmax": (_unary(lambda: torch.randn(4096, 1024), lambda x: torch.softmax(x, -1)), 2 * SM * F4, 2 * SM * F4, 0, False),
    "log_softmax": (_unary(lambda: torch.randn(4096, 1024), lambda x: torch.log_softmax(x, -1)),
                    2 * SM * F4, 2 * SM * F4, 0, False),
    "layernorm": (_layernorm, (2 * SM + 2048) * F4, 10 * SM * F4, 0, False),
    "nbody_forces": (_nbody, 5.0 * 2500 * F4, _nbody_eager_bytes(), 0, False),
    "bias_relu": (_bias_relu, (3 * 1024.0**2 + 1024) * F4, (3 * 1024.0**2 + 1024 + 4 * 1024.0**2) * F4,
                  2 * 1024.0**3, False),
    "attention_scores": (_attention, (2 * B_ATT * Q_ATT * D_ATT + B_ATT * Q_ATT * Q_ATT) * F4,
                         (2 * B_ATT * Q_ATT * D_ATT + 5 * B_ATT * Q_ATT * Q_ATT) * F4,
                         2.0 * B_ATT * Q_ATT * Q_ATT * D_ATT, False),
    "branch_sign": (_branch_sign, 2 * N1 * F4, 3 * N1 * F4, 0, False),
    "add_sin_cos_bf16": (_add_sin_cos(torch.bfloat16), 3 * N16 * 2.0, 13 * N16 * 2.0, 0, False),
    "stream_copy": (_stream_copy, 2 * N16 * F4, 2 * N16 * F4, 0, True),
    # single ops behind the slow seed workloads (diagnostics; docs/perf-journal.md, "Eager CPU vs
    # PyTorch 1.13 eager")
    "op_clamp_": (_inplace_op(lambda x: x.clamp_(0, 6)), 2 * N16 * F4, 2 * N16 * F4, 0, True),
    "op_add_": (_inplace_op(lambda x: x.add_(1)), 2 * N16 * F4, 2 * N16 * F4, 0, True),
    "op_pow3": (_unary(lambda: torch.randn(N16), lambda x: torch.pow(x, 3)), 2 * N16 * F4, 2 * N16 * F4, 0, True),
    "op_sin_bf16": (_unary(lambda: torch.randn(N16, dtype=torch.bfloat16), torch.sin), 2 * N16 * 2.0, 2 * N16 * 2.0, 0,
                    True),
    "op_sin_f32": (_unary(lambda: torch.randn(N16), torch.sin), 2 * N16 * F4, 2 * N16 * F4, 0, True),
    "op_amax_rows": (_unary(lambda: torch.randn(4096, 1024), lambda x: x.amax(-1)), (SM + 4096) * F4,
                     (SM + 4096) * F4, 0, True),
    "op_index_select_rows": (_unary(lambda: (torch.randn(131072, 64), torch.randint(0, 131072, (131072,))),
                                    lambda xi: torch.index_select(xi[0], 0, xi[1])),
                             2.0 * 131072 * 64 * F4 + 131072 * 8.0, 2.0 * 131072 * 64 * F4 + 131072 * 8.0, 0, True),
    "op_index_select_1d": (_unary(lambda: (torch.randn(N1), torch.randint(0, N1, (N1,))),
                                  lambda xi: torch.index_select(xi[0], 0, xi[1])),
                           N1 * (2 * F4 + 8.0), N1 * (2 * F4 + 8.0), 0, True),
    "op_einsum_attn": (_unary(lambda: (torch.randn(32, 8, 100, 64), torch.randn(32, 8, 100, 64)),
                              lambda qk: torch.einsum("bhqd,bhkd->bhqk", qk[0], qk[1])),
                       (2 * B_ATT * Q_ATT * D_ATT + B_ATT * Q_ATT * Q_ATT) * F4,
                       (2 * B_ATT * Q_ATT * D_ATT + B_ATT * Q_ATT * Q_ATT) * F4, 2.0 * B_ATT * Q_ATT * Q_ATT * D_ATT, True),
    "op_softmax_attn": (_unary(lambda: torch.randn(32, 8, 100, 100), lambda s: torch.softmax(s, -1)),
                        2 * B_ATT * Q_ATT * Q_ATT * F4, 2 * B_ATT * Q_ATT * Q_ATT * F4, 0, True),
}
# float32 products, the second operand transposed (kiln-eager-bench's op_mm_<n>)
for _n in (16, 64, 128, 256, 1024):
    WORKLOADS[f"op_mm_{_n}"] = (_unary(lambda n=_n: (torch.randn(n, n), torch.randn(n, n)),
                                       lambda ab: torch.mm(ab[0], ab[1].t())),
                                3.0 * _n * _n * F4, 3.0 * _n * _n * F4, 2.0 * _n ** 3, True)


def reps_for(args, warm_seconds):
    """The rep policy of kiln-eager-bench: at least --reps timed runs, more for short workloads so
    they add up to about --min-time seconds (at most 2000)."""
    if warm_seconds <= 0:
        return args.reps
    want = math.ceil(args.min_time / warm_seconds)
    return int(min(max(want, args.reps), max(2000, args.reps)))


def allocator_name():
    pre = os.environ.get("LD_PRELOAD", "")
    for name in ("jemalloc", "mimalloc", "tcmalloc"):
        if name in pre:
            conf = os.environ.get("MALLOC_CONF", "") if name == "jemalloc" else ""
            return f"{name} ({conf})" if conf else name
    return "glibc"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="",
                    help="comma-separated workload names (stream_copy and the op_* diagnostics run only when named)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.2,
                    help="more timed runs for short workloads, to about this many seconds in all")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name, w in WORKLOADS.items():
            print(name + ("  (reference)" if w[4] else ""))
        return 0
    names = [n for n in args.filter.split(",") if n]
    for n in names:
        if n not in WORKLOADS:
            print(f"bench_torch_eager: no workload named '{n}' (see --list)", file=sys.stderr)
            return 2
    selected = names if names else [n for n, w in WORKLOADS.items() if not w[4]]

    default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    alloc = allocator_name()
    torch.manual_seed(12345)
    if not args.json:
        print(f"torch {torch.__version__}, threads {threads} (default {default_threads}), allocator {alloc}")
        print(f"{'workload':<18} {'median ms':>12} {'min ms':>12} {'reps':>5} {'GB/s compl':>10} {'GB/s opbyop':>10}")
    with torch.no_grad():
        for name in selected:
            make, nbytes, eager_bytes, flops, _ = WORKLOADS[name]
            run, before = make()
            def once():
                if before is not None:
                    before()
                t0 = time.perf_counter()
                out = run()
                t1 = time.perf_counter()
                del out  # freed after the clock stopped
                return t1 - t0

            last = 0.0
            for _ in range(args.warmup):
                last = once()
            times = [once() for _ in range(reps_for(args, last))]
            med, mn = statistics.median(times), min(times)
            if args.json:
                print(json.dumps({"impl": "torch", "name": name, "median_s": med, "min_s": mn, "reps": len(times),
                                  "warmup": args.warmup, "bytes": nbytes, "eager_bytes": eager_bytes, "flops": flops,
                                  "threads": threads, "default_threads": default_threads, "allocator": alloc,
                                  "torch": torch.__version__, "times": times}))
            else:
                print(f"{name:<18} {med * 1e3:12.3f} {mn * 1e3:12.3f} {len(times):5d} "
                      f"{nbytes / med / 1e9:10.1f} {eager_bytes / med / 1e9:10.1f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
