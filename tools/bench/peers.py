#!/usr/bin/env python3
"""Python peers of kiln-bench: the workloads of kiln's registry (tools/workloads/workloads.cpp:
the same programs and sizes per tier, M = 2^20) through whichever of these import: PyTorch eager,
torch.compile (default mode, CPU), jax.jit (CPU) and numexpr (the elementwise workloads only).

    python3 tools/bench/peers.py [--filter a,b] [--tier small|bench|gpu] [--json FILE]
                                 [--reps N] [--min-time S] [--warmup N] [--threads N]

Per workload: fresh random inputs (NumPy's generator; the values differ from kiln's, the sizes and
distributions do not), every peer's output checked against a float64 NumPy reference of the
program, then timed reps interleaved across the peers (the order rotating each round) until each
has at least --reps reps and --min-time seconds: kiln-bench's policy. Each result is dropped
after its clock stops; inplace_chain re-copies its input before each rep, outside the clock;
branch_sign alternates between an input whose sum is positive and one whose sum is not.
The first call of torch.compile / jax.jit / numexpr (per path) is reported as compile_cold_ms;
torch.compile writes its cache to a fresh temporary TORCHINDUCTOR_CACHE_DIR unless that is set.

Threads: --threads (default 2) via torch.set_num_threads, numexpr.set_num_threads and XLA_FLAGS
(--xla_cpu_multi_thread_eigen / intra_op_parallelism_threads; XLA sizes its CPU pool from the
cores, so this is advisory). The allocator is whatever this process runs under (glibc malloc
unless LD_PRELOAD says otherwise), named in each record. docs/bench.md has the JSON schema.
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

M = 1 << 20
S16M, S100M = [16 * M], [100 * M]


def inp(name, small, bench, gpu, init="normal", dtype="f32"):
    return {"name": name, "sizes": {"small": small, "bench": bench, "gpu": gpu}, "init": init, "dtype": dtype}


# name -> inputs, exactly as tools/workloads/workloads.cpp
WORKLOADS = {
    "add_sin_cos": [inp("a", [1000], S16M, S100M), inp("b", [1000], S16M, S100M)],
    "poly": [inp("x", [10000], S16M, S100M)],
    "where_scale": [inp("x", [1000, 1000], [4096, 4096], [16384, 16384], "uniform")],
    "broadcast_bias": [inp("m", [1000, 512], [8192, 4096], [65536, 4096]), inp("bias", [512], [4096], [4096])],
    "transpose_add": [inp("x", [64, 64], [4096, 4096], [16384, 16384]),
                      inp("y", [64, 64], [4096, 4096], [16384, 16384])],
    "unrolled_loop": [inp("x", [1000], S16M, S100M), inp("y", [1000], S16M, S100M)],
    "inplace_chain": [inp("x", [1000], S16M, S100M, "wide")],
    "gelu_tanh": [inp("x", [1000], S16M, S100M)],
    "sum_f64": [inp("t", [1000], [M], S100M, dtype="f64")],
    "row_sum": [inp("x", [64, 64], [4096, 4096], [16384, 16384])],
    "softmax": [inp("x", [64, 128], [4096, 1024], [65536, 1024])],
    "log_softmax": [inp("x", [64, 128], [4096, 1024], [65536, 1024])],
    "layernorm": [inp("x", [64, 128], [4096, 1024], [65536, 1024]), inp("w", [128], [1024], [1024]),
                  inp("b", [128], [1024], [1024])],
    "nbody_forces": [inp("pos", [2, 64], [2, 2500], [2, 10000]), inp("mass", [64], [2500], [10000], "positive")],
    "bias_relu": [inp("x", [64, 64], [1024, 1024], [8192, 8192]), inp("W", [64, 64], [1024, 1024], [8192, 8192]),
                  inp("b", [64], [1024], [8192])],
    "attention_scores": [inp("q", [2, 2, 16, 64], [32, 8, 100, 64], [32, 8, 1024, 64]),
                         inp("k", [2, 2, 16, 64], [32, 8, 100, 64], [32, 8, 1024, 64])],
    "branch_sign": [inp("x", [100], [M], S100M)],
    "add_sin_cos_bf16": [inp("a", [1000], S16M, S100M, dtype="bf16"), inp("b", [1000], S16M, S100M, dtype="bf16")],
}
ITEMSIZE = {"f32": 4, "f64": 8, "bf16": 2}
# Long transcendental chains, reductions and matmuls: the looser tolerance (as kiln-bench).
EXACT_ENOUGH = {"poly", "where_scale", "broadcast_bias", "transpose_add", "unrolled_loop", "inplace_chain",
                "branch_sign"}
G = 6.67e-11


# ---------------------------------------------------------------- inputs and the reference

def round_bf16(np, a):
    """float32 values rounded to the nearest bfloat16 (ties to even), kept as float32."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def make_inputs(np, name, tier, seed):
    """One list of float32/float64 NumPy arrays per path (bf16 inputs as float32 holding bf16 values)."""
    paths = 2 if name == "branch_sign" else 1
    sets = []
    for p in range(paths):
        rng = np.random.default_rng(seed + p)
        arrs = []
        for d in WORKLOADS[name]:
            dt = np.float64 if d["dtype"] == "f64" else np.float32
            shape = d["sizes"][tier]
            if d["init"] == "uniform":
                a = rng.random(shape, dtype=dt)
            elif d["init"] == "positive":
                a = rng.random(shape, dtype=dt) + dt(0.1)
            else:
                a = rng.standard_normal(shape, dtype=dt)
                if d["init"] == "wide":
                    a *= dt(4)
            if d["dtype"] == "bf16":
                a = round_bf16(np, a)
            arrs.append(np.ascontiguousarray(a))
        if name == "branch_sign":  # path 0: sum > 0; path 1: sum <= 0
            s = float(arrs[0].sum(dtype=np.float64))
            if (p == 0) != (s > 0):
                arrs[0] = -arrs[0]
        sets.append(arrs)
    return sets


def reference(np, name, ins):
    """The program in float64 NumPy."""
    x = [a.astype(np.float64) for a in ins]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if name in ("add_sin_cos", "add_sin_cos_bf16"):
            return (x[0] + x[1]) + np.sin(x[0]) * np.cos(x[1])
        if name == "poly":
            return x[0] ** 2 + x[0] * 3
        if name == "where_scale":
            return np.where(x[0] > 0.5, x[0] * 2, x[0] / 2)
        if name == "broadcast_bias":
            return x[0] + x[1]
        if name == "transpose_add":
            return x[0].T + x[1]
        if name == "unrolled_loop":
            v = x[0]
            for _ in range(16):
                v = v * 0.5 + x[1]
            return v
        if name == "inplace_chain":
            return np.clip(np.maximum(x[0] + 1, 0), 0, 6) * 0.5
        if name == "gelu_tanh":
            v = x[0]
            return 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))
        if name == "sum_f64":
            return np.array(x[0].sum())
        if name == "row_sum":
            return x[0].sum(1)
        if name in ("softmax", "log_softmax", "attention_scores"):
            v = x[0] if name != "attention_scores" else np.matmul(x[0], np.swapaxes(x[1], -1, -2)) / math.sqrt(64.0)
            z = v - v.max(-1, keepdims=True)
            lse = np.log(np.exp(z).sum(-1, keepdims=True))
            return z - lse if name == "log_softmax" else np.exp(z - lse)
        if name == "layernorm":
            mean = x[0].mean(-1, keepdims=True)
            var = x[0].var(-1, keepdims=True)
            return (x[0] - mean) / np.sqrt(var + 1e-5) * x[1] + x[2]
        if name == "nbody_forces":
            pos, mass = x
            diff = pos[:, None, :] - pos[:, :, None]
            dist = np.sqrt((diff * diff).sum(0))
            forces = G * mass[:, None] * mass[None, :] / dist ** 2
            return np.nansum(diff / dist * forces[None], axis=2)
        if name == "bias_relu":
            return np.maximum(x[0] @ x[1] + x[2], 0)
        if name == "branch_sign":
            return x[0] * 2 if x[0].sum() > 0 else x[0] * -2
    raise KeyError(name)


def compare(xp, name, dtype, want, got):
    """kiln-bench's check: |got - want| <= atol * max|want| + rtol * |want|, NaNs in the same places.
    xp is NumPy (want and got float64 arrays) or torch (float64 tensors on one device: on a GPU the
    check of a gpu-tier output takes milliseconds, where NumPy took as long as the reference)."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    loose = name not in EXACT_ENOUGH
    rtol, atol = {"f64": (1e-8, 1e-11) if loose else (1e-9, 1e-12),
                  "f32": (1e-3, 1e-4) if loose else (1e-4, 1e-5), "bf16": (2e-2, 1e-2)}[dtype]
    wn, gn = xp.isnan(want), xp.isnan(got)
    if bool((wn != gn).any()):
        return "NaN in different places"
    fin = xp.isfinite(want)
    scale = float(xp.abs(want[fin]).max()) if bool(fin.any()) else 0.0
    if bool((want[~fin & ~wn] != got[~fin & ~wn]).any()):
        return "infinities differ"
    err = xp.abs(got - want)[fin]
    bad = err > atol * scale + rtol * xp.abs(want[fin])
    if bool(bad.any()):
        n = want.numel() if hasattr(want, "numel") else want.size
        return (f"{int(bad.sum())} of {n} elements differ; max abs err {float(err.max()):.3g} "
                f"(rtol {rtol:g}, atol {atol:g} x max|ref| {scale:.3g})")
    return None


# ---------------------------------------------------------------- the peers

def torch_programs(torch):
    def add_sin_cos(a, b):
        return (a + b) + torch.sin(a) * torch.cos(b)

    def unrolled_loop(x, y):
        for _ in range(16):
            x = x * 0.5 + y
        return x

    def inplace_chain(x):
        x.add_(1)
        x.relu_()
        x.clamp_(0, 6)
        x.mul_(0.5)
        return x

    def layernorm(x, w, b):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * w + b

    def nbody_forces(pos, mass):
        diff = pos[:, None, :] - pos[:, :, None]
        dist = diff.norm(dim=0)
        direction = diff / dist
        forces = G * mass[:, None] * mass[None, :] / dist ** 2
        return (direction * forces[None, :, :]).nansum(dim=2)

    def branch_sign(x):
        if x.sum() > 0:
            return x * 2
        return x * -2

    return {
        "add_sin_cos": add_sin_cos,
        "poly": lambda x: torch.pow(x, 2) + x * 3,
        "where_scale": lambda x: torch.where(x > 0.5, x * 2, x / 2),
        "broadcast_bias": lambda m, bias: m + bias,
        "transpose_add": lambda x, y: x.t() + y,
        "unrolled_loop": unrolled_loop,
        "inplace_chain": inplace_chain,
        "gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3)))),
        "sum_f64": lambda t: t.sum(),
        "row_sum": lambda x: x.sum(1),
        "softmax": lambda x: torch.softmax(x, -1),
        "log_softmax": lambda x: torch.log_softmax(x, -1),
        "layernorm": layernorm,
        "nbody_forces": nbody_forces,
        "bias_relu": lambda x, W, b: torch.relu(x @ W + b),
        "attention_scores": lambda q, k: torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(64.0), -1),
        "branch_sign": branch_sign,
        "add_sin_cos_bf16": add_sin_cos,
    }


def jax_programs(jax, jnp):
    def unrolled_loop(x, y):
        for _ in range(16):  # unrolled while tracing
            x = x * 0.5 + y
        return x

    def layernorm(x, w, b):
        mean = x.mean(-1, keepdims=True)
        var = x.var(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * w + b

    def nbody_forces(pos, mass):
        diff = pos[:, None, :] - pos[:, :, None]
        dist = jnp.linalg.norm(diff, axis=0)
        forces = G * mass[:, None] * mass[None, :] / dist ** 2
        return jnp.nansum(diff / dist * forces[None, :, :], axis=2)

    add_sin_cos = lambda a, b: (a + b) + jnp.sin(a) * jnp.cos(b)
    return {
        "add_sin_cos": add_sin_cos,
        "poly": lambda x: jnp.power(x, 2) + x * 3,
        "where_scale": lambda x: jnp.where(x > 0.5, x * 2, x / 2),
        "broadcast_bias": lambda m, bias: m + bias,
        "transpose_add": lambda x, y: x.T + y,
        "unrolled_loop": unrolled_loop,
        # jax arrays are immutable: the chain returns a new array (its input is untouched)
        "inplace_chain": lambda x: jnp.clip(jax.nn.relu(x + 1), 0, 6) * 0.5,
        "gelu_tanh": lambda x: 0.5 * x * (1 + jnp.tanh(0.7978845608 * (x + 0.044715 * jnp.power(x, 3)))),
        "sum_f64": lambda t: t.sum(),
        "row_sum": lambda x: x.sum(1),
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "log_softmax": lambda x: jax.nn.log_softmax(x, axis=-1),
        "layernorm": layernorm,
        "nbody_forces": nbody_forces,
        "bias_relu": lambda x, W, b: jax.nn.relu(x @ W + b),
        "attention_scores": lambda q, k: jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(64.0), -1),
        # a host `if` on a traced value cannot be jitted: the structured branch (kiln::cond's analogue)
        "branch_sign": lambda x: jax.lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: v * -2, x),
        "add_sin_cos_bf16": add_sin_cos,
    }


def _unrolled_expr():
    e = "x"
    for _ in range(16):
        e = f"({e}) * 0.5 + y"
    return e


# numexpr: the elementwise workloads, each one expression (names are the inputs; `xt` is x.t()).
NUMEXPR = {
    "add_sin_cos": "(a + b) + sin(a) * cos(b)",
    "poly": "x**2 + x * 3",
    "where_scale": "where(x > 0.5, x * 2, x / 2)",
    "broadcast_bias": "m + bias",
    "transpose_add": "xt + y",
    "unrolled_loop": _unrolled_expr(),
    "inplace_chain": "where(x + 1 > 6, 6, where(x + 1 > 0, x + 1, 0)) * 0.5",  # written into x (out=x)
    "gelu_tanh": "0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x**3)))",
}
NUMEXPR_SKIP = "not elementwise (reductions, softmax, matmul, einsum, a host branch) or bfloat16"


class Peer:
    """One tool's program for one workload: prepare() builds the callables; see time_interleaved."""

    def __init__(self, tool, version, allocator):
        self.tool, self.version, self.allocator = tool, version, allocator
        self.seconds, self.calls = [], 0
        self.compile_ms = None
        self.before = None
        self.check = "skipped"
        self.error = None  # why it could not run
        self.check_on = None  # (xp, output -> float64 array, reference -> the same kind): else NumPy


def allocator_name(what):
    pre = os.environ.get("LD_PRELOAD", "")
    for lib in ("jemalloc", "tcmalloc", "mimalloc"):
        if lib in pre:
            conf = os.environ.get("MALLOC_CONF", "")
            base = f"{lib} (LD_PRELOAD{', MALLOC_CONF=' + conf if conf and lib == 'jemalloc' else ''})"
            break
    else:
        base = f"LD_PRELOAD={pre}" if pre else "glibc malloc"
    return f"{what} over {base}"


def make_torch_peer(torch, np, name, sets, dtype, tool, device="cpu"):
    """tool: torch (eager), torch.compile, or torch.compile-ro (mode="reduce-overhead", CUDA graphs)."""
    gpu = device == "cuda"
    alloc = "PyTorch CUDA caching allocator" if gpu else allocator_name("PyTorch CPU allocator")
    peer = Peer(tool, torch.__version__, alloc)
    fn = torch_programs(torch)[name]
    if tool == "torch.compile":
        fn = torch.compile(fn)
    elif tool == "torch.compile-ro":
        fn = torch.compile(fn, mode="reduce-overhead")
    tdt = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}[dtype]
    pristine = [[torch.from_numpy(a.copy()).to(tdt).to(device) for a in s] for s in sets]
    work = [[t.clone() for t in s] for s in pristine] if name == "inplace_chain" else pristine
    paths = len(sets)
    if name == "inplace_chain":
        def before(call):
            p = call % paths
            for w, src in zip(work[p], pristine[p]):
                w.copy_(src)
            if gpu:
                torch.cuda.synchronize()  # (else the copy, only enqueued, is timed with the call)
        peer.before = before

    def run(call):
        with torch.no_grad():
            out = fn(*work[call % paths])
        if gpu:
            # (reduce-overhead hands out its graph's output buffers, as kiln's CUDA graphs do; neither
            # is copied here: each run's output is dropped before the next but one)
            torch.cuda.synchronize()
        return out

    peer.run = run
    peer.to_numpy = lambda out: out.detach().to(torch.float64).cpu().numpy()
    if gpu:  # (checked where it ran: compare() on the device)
        peer.check_on = (torch, lambda out: out.detach().to(torch.float64),
                         lambda ref: torch.from_numpy(ref).to(device))
    return peer


def make_jax_peer(jax, jnp, np, name, sets, dtype):
    peer = Peer("jax", jax.__version__, allocator_name("XLA CPU allocator"))
    fn = jax.jit(jax_programs(jax, jnp)[name])
    jdt = {"f32": jnp.float32, "f64": jnp.float64, "bf16": jnp.bfloat16}[dtype]
    args = [[jax.device_put(jnp.asarray(a, dtype=jdt)) for a in s] for s in sets]
    paths = len(sets)

    def run(call):
        out = fn(*args[call % paths])
        out.block_until_ready()
        return out

    peer.run = run
    peer.to_numpy = lambda out: np.asarray(out.astype(jnp.float32 if dtype == "bf16" else out.dtype), dtype=np.float64)
    return peer


def make_numexpr_peer(ne, np, name, sets, dtype):
    peer = Peer("numexpr", ne.__version__, allocator_name("NumPy allocator"))
    expr = NUMEXPR[name]
    # numeric literals (not exponents: x**3 stays a multiplication) as float32 constants, so
    # that float32 stays float32 and nothing is converted per element
    consts = {}

    def const(m):
        key = "c" + m.group(0).replace(".", "_")
        consts[key] = np.float32(float(m.group(0)))
        return key

    expr = re.sub(r"(?<![\w.])(?<!\*\*)\d+(?:\.\d+)?(?![\w.])", const, expr)
    names = [d["name"] for d in WORKLOADS[name]]
    pristine = [dict(zip(names, s)) for s in sets]
    work = [{k: v.copy() for k, v in d.items()} for d in pristine] if name == "inplace_chain" else pristine
    for d in work:
        d.update(consts)
        if name == "transpose_add":
            d["xt"] = d.pop("x").T
    paths = len(sets)
    if name == "inplace_chain":
        def before(call):
            p = call % paths
            np.copyto(work[p]["x"], pristine[p]["x"])
        peer.before = before

    def run(call):
        d = work[call % paths]
        return ne.evaluate(expr, local_dict=d, out=d["x"] if name == "inplace_chain" else None)

    peer.run = run
    peer.to_numpy = lambda out: np.asarray(out, dtype=np.float64)
    return peer


# ---------------------------------------------------------------- timing

def call_once(peer):
    call = peer.calls
    peer.calls += 1
    if peer.before is not None:
        peer.before(call)
    t0 = time.perf_counter()
    out = peer.run(call)
    t1 = time.perf_counter()
    del out  # dropped after the clock stopped
    return t1 - t0


def time_interleaved(peers, warmup, reps, min_time, max_reps):
    """kiln-bench's policy: warm-ups, then one rep of each unsatisfied peer per round, the order
    rotating, until each has >= reps reps and >= min_time seconds (or max_reps reps)."""
    for _ in range(warmup):
        for p in peers:
            call_once(p)
    total = [0.0] * len(peers)

    def satisfied(i):
        n = len(peers[i].seconds)
        return n >= max_reps or (n >= reps and total[i] >= min_time)

    rnd = 0
    while True:
        ran = False
        for k in range(len(peers)):
            i = (rnd + k) % len(peers)
            if satisfied(i):
                continue
            ran = True
            s = call_once(peers[i])
            peers[i].seconds.append(s)
            total[i] += s
        rnd += 1
        if not ran:
            return


# ---------------------------------------------------------------- main

def load_peers(threads, notes):
    """Imports what is there; returns {tool: modules} and appends a note for each missing one."""
    found = {}
    try:
        import numpy as np
    except ImportError:
        sys.exit("peers.py: NumPy is needed (inputs and the reference)")
    found["numpy"] = np
    try:
        import torch
        torch.set_num_threads(threads)
        found["torch"] = torch
        if hasattr(torch, "compile") and int(torch.__version__.split(".")[0]) >= 2:
            found["torch.compile"] = torch
            found["torch.compile-ro"] = torch
        else:
            notes.append(f"torch.compile: skipped (torch {torch.__version__} has no torch.compile; needs >= 2.0)")
    except ImportError as e:
        notes.append(f"torch, torch.compile: skipped ({e})")
    try:
        import jax
        jax.config.update("jax_enable_x64", True)  # for sum_f64; float32 inputs stay float32
        import jax.numpy as jnp
        found["jax"] = (jax, jnp)
    except ImportError as e:
        notes.append(f"jax: skipped ({e})")
    try:
        import numexpr
        numexpr.set_num_threads(threads)
        found["numexpr"] = numexpr
    except ImportError as e:
        notes.append(f"numexpr: skipped ({e})")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--tier", default="bench", choices=["small", "bench", "gpu"])
    ap.add_argument("--json", metavar="FILE", help="write the records to FILE (a JSON array)")
    ap.add_argument("--reps", type=int, default=20, help="at least this many timed reps per peer (default 20)")
    ap.add_argument("--min-time", type=float, default=0.5, help="and at least this many seconds (default 0.5)")
    ap.add_argument("--max-reps", type=int, default=10000, help="but at most this many reps (default 10000)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed reps of each peer first (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every peer (default 2)")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--peers", default="torch,torch.compile,jax,numexpr",
                    help="which peers to run, of torch, torch.compile, torch.compile-ro (reduce-overhead), jax, "
                         "numexpr (default: torch, torch.compile, jax, numexpr on the cpu; the torch ones on cuda)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: PyTorch's peers on the GPU (each timed call ends with torch.cuda.synchronize())")
    ap.add_argument("--serve", action="store_true",
                    help="one process for many requests: read lines 'WORKLOAD JSONFILE' on stdin, run each "
                         "workload, write its records to JSONFILE and answer 'done STATUS' on stdout "
                         "(compare.py --one-peers-process: the imports and torch.compile's start-up once)")
    args = ap.parse_args()
    if args.device == "cuda" and args.peers == ap.get_default("peers"):
        args.peers = "torch,torch.compile,torch.compile-ro"
    names = [n for n in args.filter.split(",") if n] or list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"peers.py: no workload named '{n}' (known: {', '.join(WORKLOADS)})")
    wanted = [p for p in args.peers.split(",") if p]

    # before the imports: thread counts and a cold torch.compile cache
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    xla = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in xla:
        os.environ["XLA_FLAGS"] = (xla + " --xla_cpu_multi_thread_eigen=true "
                                   f"intra_op_parallelism_threads={args.threads}").strip()
    inductor_dir = None
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        inductor_dir = tempfile.mkdtemp(prefix="kiln-peers-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_dir
    try:
        if args.serve:
            return serve(args, wanted)
        return run(args, names, wanted)
    finally:
        if inductor_dir:
            shutil.rmtree(inductor_dir, ignore_errors=True)


def serve(args, wanted):
    """--serve: a workload per line of stdin, in this one process (its peers imported once)."""
    state = {}
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or parts[0] not in WORKLOADS:
            print(f"peers.py: expected 'WORKLOAD JSONFILE' with a known workload, got '{line.strip()}'")
            print("done 2", flush=True)
            continue
        args.json = parts[1]
        status = run(args, [parts[0]], wanted, state)
        print(f"done {status}", flush=True)
    return 0


def run(args, names, wanted, state=None):
    """The peers on each workload of `names`; `state` (--serve) keeps the imports between calls."""
    notes = []
    if state is not None and "found" in state:
        found = state["found"]
    else:
        found = load_peers(args.threads, notes)
        if state is not None:
            state["found"] = found
    np = found["numpy"]
    tools = [t for t in ("torch", "torch.compile", "torch.compile-ro", "jax", "numexpr") if t in found and t in wanted]
    if args.device == "cuda":
        if "torch" not in found or not found["torch"].cuda.is_available():
            sys.exit("peers.py: --device cuda needs PyTorch with a CUDA device")
        tools = [t for t in tools if t.startswith("torch")]
    for n in notes:
        print("note: " + n)
    print(f"peers.py: tier {args.tier}, device {args.device}, threads {args.threads}, peers: {', '.join(tools) or 'none'}")
    print(f"{'workload':<18} {'peer':<14} {'median ms':>10} {'min ms':>10} {'reps':>6} {'GB/s':>7} "
          f"{'compile ms':>10}  check")
    records, failed = [], 0
    for name in names:
        dtype = WORKLOADS[name][0]["dtype"]
        sets = make_inputs(np, name, args.tier, args.seed)
        inputs = ", ".join(f"{d['name']}: {d['dtype']}[{', '.join(str(s) for s in d['sizes'][args.tier])}]"
                           for d in WORKLOADS[name])
        refs = [reference(np, name, s) for s in sets]
        refs_on = {}  # path -> the reference where the peers' outputs are checked (on a GPU)
        nbytes = (sum(a.size for a in sets[0]) + refs[0].size) * ITEMSIZE[dtype]
        peers = []
        for tool in tools:
            try:
                if tool.startswith("torch"):
                    peer = make_torch_peer(found[tool], np, name, sets, dtype, tool, args.device)
                elif tool == "jax":
                    peer = make_jax_peer(*found["jax"], np, name, sets, dtype)
                elif name in NUMEXPR and dtype != "bf16":
                    peer = make_numexpr_peer(found["numexpr"], np, name, sets, dtype)
                else:
                    print(f"note: {name}: numexpr skipped ({NUMEXPR_SKIP})")
                    continue
                # the first call of each path (a compile for torch.compile, jax and numexpr), then the check
                t0 = time.perf_counter()
                for p in range(len(sets)):
                    call_once(peer)
                if tool != "torch":
                    peer.compile_ms = (time.perf_counter() - t0) * 1e3
                peer.check = "ok"
                for p in range(len(sets)):
                    if peer.before is not None:
                        peer.before(p)
                    if peer.check_on:
                        xp, as_f64, move = peer.check_on
                        if p not in refs_on:  # (moved once per workload, for every peer)
                            refs_on[p] = move(refs[p])
                        err = compare(xp, name, dtype, refs_on[p], as_f64(peer.run(p)))
                    else:
                        err = compare(np, name, dtype, refs[p], np.asarray(peer.to_numpy(peer.run(p)), dtype=np.float64))
                    if err:
                        peer.check = "failed"
                        print(f"FAILED: {name}: {tool}{' (path %d)' % p if len(sets) > 1 else ''}: {err}")
                        break
            except Exception as e:  # a peer that cannot run this program: skipped, with the reason
                msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(f"note: {name}: {tool} cannot run it: {msg}")
                peer = Peer(tool, "", "")
                peer.check, peer.error = "skipped", msg
            peers.append(peer)
        refs = refs_on = None
        timed = [p for p in peers if p.error is None and p.check != "failed"]
        time_interleaved(timed, max(args.warmup, len(sets)), args.reps, args.min_time, args.max_reps)
        for p in peers:
            failed += p.check == "failed"
            med = statistics.median(p.seconds) * 1e3 if p.seconds else None
            rec = {"tool": p.tool, "variant": "peer", "workload": name, "tier": args.tier, "dtype": dtype,
                   "inputs": inputs, "median_ms": med, "min_ms": min(p.seconds) * 1e3 if p.seconds else None,
                   "reps": len(p.seconds), "bytes": float(nbytes),
                   "gbps": nbytes / (med * 1e-3) / 1e9 if med else None, "stream_gbps": None,
                   "compile_cold_ms": p.compile_ms, "compile_warm_ms": None, "check": p.check,
                   "threads": args.threads, "allocator": p.allocator, "version": p.version,
                   "device": "cuda:0" if args.device == "cuda" else "cpu"}
            if len(sets) > 1:
                rec["paths"] = len(sets)
            if p.error:
                rec["error"] = p.error
            if p.tool == "jax" and name == "inplace_chain":
                rec["note"] = "functional: returns a new array, the input is not written"
            if p.tool == "jax" and name == "branch_sign":
                rec["note"] = "jax.lax.cond (both branches compiled into one program)"
            records.append(rec)
            fmt = lambda v, f: f % v if v is not None else "-"
            print(f"{name:<18} {p.tool:<14} {fmt(med, '%10.3f'):>10} {fmt(rec['min_ms'], '%10.3f'):>10} "
                  f"{rec['reps']:>6} {fmt(rec['gbps'], '%7.1f'):>7} {fmt(p.compile_ms, '%10.1f'):>10}  {p.check}")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    if state is not None and args.device == "cuda":
        import gc
        gc.collect()
        found["torch"].cuda.empty_cache()  # (kiln-bench runs next, in its own process)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
