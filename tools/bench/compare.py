#!/usr/bin/env python3
"""The one command of the benchmark: kiln (eager, compiled, and libtorch when kiln-bench has it)
and the Python peers (PyTorch eager, torch.compile, jax, numexpr: whatever --python imports) on
the workloads of kiln's registry, workload by workload, so that machine drift hits all alike.

    python3 tools/bench/compare.py [--kiln-bench build/tools/kiln-bench] [--python .venv-peers/bin/python]
                                   [--tier bench] [--filter a,b] [--out bench-out]

For each workload in turn it runs `kiln-bench --filter W --json ...` and then
`peers.py --filter W --json ...` (fresh processes; with --one-peers-process one `peers.py
--serve` for all the workloads, asked for each in turn), merges their records, and at the end prints
one table (median ms per implementation and its ratio to kiln compiled), a table of first-call
(compile) times, and writes DIR/bench.json (every record; machine records carry the workload of
their run), DIR/table.txt and DIR/bench.svg (speedup over kiln eager). Every child runs with
OMP_NUM_THREADS = KILN_NUM_THREADS = OPENBLAS_NUM_THREADS = --threads and OMP_WAIT_POLICY
(--wait-policy, default PASSIVE: on a shared machine spinning OpenMP threads stall for whole
scheduler ticks; see docs/perf-journal.md, "Eager CPU vs PyTorch 1.13 eager"). Builds nothing.
docs/bench.md describes it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COLUMNS = ["kiln eager", "kiln compiled", "kiln compiled_graphs", "libtorch", "torch", "torch.compile",
           "torch.compile-ro", "jax", "numexpr"]
COLORS = {"kiln compiled": "#1f77b4", "libtorch": "#d62728", "torch": "#ff7f0e", "torch.compile": "#2ca02c",
          "jax": "#9467bd", "numexpr": "#8c564b", "kiln compiled_graphs": "#17becf", "torch.compile-ro": "#bcbd22"}


def column(rec):
    if rec["tool"] == "kiln":
        return "kiln " + rec["variant"]
    return rec["tool"]


def run_child(cmd, env, label):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1):  # 1: a check failed; the records say which
        tail = "\n".join(p.stdout.splitlines()[-15:])
        print(f"  {label} failed with status {p.returncode}:\n{tail}")
    else:
        for line in p.stdout.splitlines():
            if line.strip().startswith(("FAILED", "note:")):
                print(f"  {label}: {line.strip()}")
    return wall


class PeersProcess:
    """One `peers.py --serve` for every workload (--one-peers-process): Python, PyTorch and
    torch.compile's workers start once instead of once per workload. Started at its first use,
    it waits on its stdin while kiln-bench runs."""

    def __init__(self, cmd, env):
        self.cmd, self.env, self.p, self.requests = cmd, env, None, 0

    def run(self, w, path):
        t0 = time.monotonic()
        if self.p is None:
            self.p = subprocess.Popen(self.cmd + ["--serve"], env=self.env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.requests = 0
        self.requests += 1
        try:
            self.p.stdin.write(f"{w} {path}\n")
            self.p.stdin.flush()
        except OSError:
            pass  # (it ended: reported below)
        tail = []
        for line in self.p.stdout:
            s = line.strip()
            if s.startswith("done"):
                if s not in ("done 0", "done 1"):  # 1: a check failed; the records say which
                    print(f"  peers.py answered '{s}' for {w}:\n" + "\n".join(tail))
                return time.monotonic() - t0
            tail = (tail + [s])[-15:]
            if s.startswith(("FAILED", "note:")):
                print(f"  peers.py: {s}")
        print(f"  peers.py ended with status {self.p.wait()}:\n" + "\n".join(tail))
        self.p = None  # (the next workload starts a new one)
        return time.monotonic() - t0

    def close(self):
        if self.p is not None:
            self.p.stdin.close()
            self.p.wait()


def read_records(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def fmt_ms(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 100 else f"{v:.1f}"


def tables(workloads, by):
    """by[(workload, column)] -> record. Returns the text of both tables."""
    present = [c for c in COLUMNS if any((w, c) in by for w in workloads)]
    width = 22
    out = ["median ms per implementation (x: relative to kiln compiled; > 1: slower than kiln compiled)", ""]
    out.append(f"{'workload':<18}" + "".join(f"{c:>{width}}" for c in present))
    for w in workloads:
        base = by.get((w, "kiln compiled"), {}).get("median_ms")
        row = f"{w:<18}"
        for c in present:
            r = by.get((w, c))
            med = r.get("median_ms") if r else None
            if r and r.get("check") == "failed":
                cell = "FAILED"
            elif med is None:
                cell = "-"
            elif base and c != "kiln compiled":
                cell = f"{fmt_ms(med)} ({med / base:.2f}x)"
            else:
                cell = fmt_ms(med)
            row += f"{cell:>{width}}"
        out.append(row)
    comp = [c for c in present if c in ("kiln compiled", "kiln compiled_graphs", "torch.compile", "torch.compile-ro", "jax", "numexpr")]
    if comp:
        out += ["", "first call ms (kiln compiled: cold / warm disk cache; the peers: cold, in-process)", ""]
        out.append(f"{'workload':<18}" + "".join(f"{c:>{width}}" for c in comp))
        for w in workloads:
            row = f"{w:<18}"
            for c in comp:
                r = by.get((w, c)) or {}
                cold, warm = r.get("compile_cold_ms"), r.get("compile_warm_ms")
                cell = "-" if cold is None else f"{cold:.1f}" + (f" / {warm:.1f}" if warm is not None else "")
                row += f"{cell:>{width}}"
            out.append(row)
    profiled = [(w, k, by[(w, "kiln compiled")].get("stream_gbps")) for w in workloads
                for k in (by.get((w, "kiln compiled")) or {}).get("kernels") or []]
    if profiled:
        out += ["", "each kernel of kiln compiled alone (kiln-bench --profile: its own time; GB/s over its traffic, "
                "each buffer's distinct bytes read and written; copy: the copy bandwidth of the same run)", ""]
        out.append(f"{'workload':<18}{'calls':>7}{'mean us':>11}{'GB/s':>9}{'of copy':>9}  kernel")
        for w, k, copy in profiled:
            share = f"{100 * k['gbps'] / copy:.1f}%" if copy and k.get("gbps") is not None else "-"
            out.append(f"{w:<18}{k['calls']:>7}{1e3 * k['mean_ms']:>11.2f}{k['gbps']:>9.1f}{share:>9}  {k['name']}")
    out += verdict(workloads, by, profiled)
    return "\n".join(out) + "\n"


def verdict(workloads, by, profiled, share=0.85):
    """The run against the targets the backends are held to: kiln compiled against each peer
    (ratio = peer median / kiln compiled median; below 1: kiln behind), and the kernels under
    `share` of the copy bandwidth (with --profile)."""
    out = []
    base = {w: (by.get((w, "kiln compiled")) or {}).get("median_ms") for w in workloads}
    for peer in ("kiln eager", "torch", "torch.compile", "torch.compile-ro", "jax", "libtorch"):
        ratios = [(w, by[(w, peer)]["median_ms"] / base[w]) for w in workloads
                  if base[w] and (by.get((w, peer)) or {}).get("median_ms")]
        if not ratios:
            continue
        behind = [f"{w} {r:.2f}x" for w, r in ratios if r < 1]
        low = min(r for _, r in ratios)
        out.append(f"kiln compiled against {peer}: ahead or level on {len(ratios) - len(behind)} of {len(ratios)} "
                   f"(lowest ratio {low:.2f}x)" + (f"; behind on {', '.join(behind)}" if behind else ""))
    shares = [(w, k, k["gbps"] / copy) for w, k, copy in profiled if copy and k.get("gbps") is not None]
    if shares:
        under = [f"{w} {100 * s:.1f}% ({k['name'].split(': ', 1)[-1]})" for w, k, s in shares if s < share]
        out.append(f"kernels at {100 * share:.0f}% of the copy bandwidth or more: {len(shares) - len(under)} of "
                   f"{len(shares)} (compute-bound kernels count as under)" + (f"; under: {', '.join(under)}" if under else ""))
    return ["", "against the targets (ratio = peer median / kiln compiled median)", ""] + out if out else []


def svg_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def chart(title, workloads, series):
    """Horizontal bars on a log scale from the 1x line (kiln eager); series: [(label, [value|None])]."""
    width, left, right, top, bar, gap, pad = 960, 180, 70, 86, 11, 2, 10
    group = max(len(series), 1) * (bar + gap) + pad
    plot_h, plot_w = group * len(workloads), width - left - right
    height = top + plot_h + 44
    vals = [v for _, vs in series for v in vs if v is not None and v > 0 and math.isfinite(v)]
    vmin, vmax = min(vals + [1.0]), max(vals + [1.0])
    ticks = [m * 10.0 ** e for e in range(-3, 4) for m in (1, 2, 5)]
    lo = max([t for t in ticks if t <= min(vmin / 1.15, 0.5)] or [ticks[0]])
    hi = min([t for t in ticks if t >= max(vmax * 1.15, 2.0)] or [ticks[-1]])

    def x(v):
        v = min(max(v, lo), hi)
        return left + (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) * plot_w

    def label(v):
        return f"{v:.0f}x" if v >= 100 else f"{v:.1f}x" if v >= 10 else f"{v:.2f}x" if v >= 0.1 else f"{v:.3f}x"

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{svg_escape(title)}</text>',
         f'<text x="{width / 2}" y="40" text-anchor="middle" fill="#555">speedup over kiln eager '
         '(log scale; right of the 1x line: faster than kiln eager)</text>']
    lx = left
    for name, _ in series:
        o.append(f'<rect x="{lx}" y="50" width="12" height="12" fill="{COLORS.get(name, "#777")}"/>'
                 f'<text x="{lx + 16}" y="60">{svg_escape(name)}</text>')
        lx += 28 + 7 * len(name)
    for t in ticks:
        if lo <= t <= hi:
            one = t == 1
            o.append(f'<line x1="{x(t):.1f}" y1="{top - 6}" x2="{x(t):.1f}" y2="{top + plot_h}" '
                     f'stroke="{"#000" if one else "#ddd"}" stroke-width="{1.5 if one else 1}"/>')
            o.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{t:g}x</text>')
    o.append(f'<text x="{x(1):.1f}" y="{top + plot_h + 32}" text-anchor="middle" fill="#555">1x = kiln eager</text>')
    for wi, w in enumerate(workloads):
        gy = top + group * wi
        if wi % 2:
            o.append(f'<rect x="0" y="{gy}" width="{width}" height="{group}" fill="#f4f4f4"/>')
        o.append(f'<text x="{left - 8}" y="{gy + group / 2 + 4:.1f}" text-anchor="end">{svg_escape(w)}</text>')
        for si, (name, vs) in enumerate(series):
            y = gy + pad / 2 + si * (bar + gap)
            v = vs[wi]
            if v is None or not (v > 0 and math.isfinite(v)):
                o.append(f'<text x="{x(1) + 4:.1f}" y="{y + bar - 2}" fill="#999" font-size="9">n/a</text>')
                continue
            x0, x1 = min(x(1), x(v)), max(x(1), x(v))
            o.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="{bar}" '
                     f'fill="{COLORS.get(name, "#777")}"><title>{svg_escape(name)}: {label(v)}</title></rect>')
            anchor, tx = ("start", x1 + 3) if v >= 1 else ("end", x0 - 3)
            o.append(f'<text x="{tx:.1f}" y="{y + bar - 2}" text-anchor="{anchor}" font-size="10">{label(v)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def summarize(out):
    merged = read_records(os.path.join(out, "bench.json"))
    workloads, by = [], {}
    for r in merged:
        w = r.get("workload")
        if w and w not in workloads:
            workloads.append(w)
        if r.get("tool") != "machine":
            by[(w, column(r))] = r
    text = tables(workloads, by)
    print(text)
    with open(os.path.join(out, "table.txt"), "w") as f:
        f.write(text)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln-bench", default=os.path.join(ROOT, "build", "tools", "kiln-bench"),
                    help="the kiln-bench executable (default: build/tools/kiln-bench)")
    venv = os.path.join(ROOT, ".venv-peers", "bin", "python")
    ap.add_argument("--python", default=venv if os.path.exists(venv) else sys.executable,
                    help="the peers' interpreter (default: .venv-peers/bin/python if present, else this one)")
    ap.add_argument("--tier", default="bench", choices=["small", "bench", "gpu"])
    ap.add_argument("--filter", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--out", default="bench-out", help="where bench.json, table.txt and bench.svg go")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wait-policy", default="PASSIVE", help="OMP_WAIT_POLICY of every child (default PASSIVE)")
    ap.add_argument("--peers", default="torch,torch.compile,jax,numexpr", help="passed to peers.py --peers")
    ap.add_argument("--no-compile-time", action="store_true", help="passed to kiln-bench")
    ap.add_argument("--no-peers", action="store_true", help="kiln-bench only")
    ap.add_argument("--profile", action="store_true",
                    help="passed to kiln-bench: each kernel of kiln compiled timed alone, in a third table")
    ap.add_argument("--trace", action="store_true",
                    help="kiln-bench --profile --trace OUT/traces (each workload's kernel timeline too)")
    ap.add_argument("--one-peers-process", action="store_true",
                    help="one peers.py for all the workloads (started once: saves the imports and "
                         "torch.compile's start-up per workload; its cold compile times are then in a warm process)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: kiln and PyTorch on the GPU (kiln with and without CUDA graphs; torch eager, "
                         "torch.compile and its reduce-overhead mode)")
    ap.add_argument("--summarize", metavar="DIR",
                    help="only write DIR/table.txt from DIR/bench.json (a run cut short before its tables)")
    args = ap.parse_args()
    if args.summarize:
        return summarize(args.summarize)
    if args.device == "cuda" and args.peers == ap.get_default("peers"):
        args.peers = "torch,torch.compile,torch.compile-ro"
    if not os.access(args.kiln_bench, os.X_OK):
        sys.exit(f"compare.py: no kiln-bench at {args.kiln_bench} (build it: see docs/bench.md, or pass --kiln-bench)")

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "KILN_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    env["OMP_WAIT_POLICY"] = args.wait_policy

    listed = subprocess.run([args.kiln_bench, "--list", "--tier", args.tier], env=env, stdout=subprocess.PIPE,
                            text=True, check=True).stdout
    known = [line.split()[0] for line in listed.splitlines() if line.strip()]
    workloads = [w for w in args.filter.split(",") if w] or known
    for w in workloads:
        if w not in known:
            sys.exit(f"compare.py: no workload named '{w}' (known: {', '.join(known)})")
    os.makedirs(args.out, exist_ok=True)
    common = ["--tier", args.tier, "--reps", str(args.reps), "--min-time", str(args.min_time), "--device", args.device]
    merged, by = [], {}
    peers_cmd = [args.python, os.path.join(HERE, "peers.py"), "--threads", str(args.threads), "--peers", args.peers] + common
    server = PeersProcess(peers_cmd, env) if args.one_peers_process else None
    with tempfile.TemporaryDirectory(prefix="kiln-compare-") as tmp:
        for i, w in enumerate(workloads):
            kjson, pjson = os.path.join(tmp, f"{w}.kiln.json"), os.path.join(tmp, f"{w}.peers.json")
            cmd = [args.kiln_bench, "--filter", w, "--json", kjson] + common
            if args.no_compile_time:
                cmd.append("--no-compile-time")
            if args.profile or args.trace:
                cmd.append("--profile")
            if args.trace:
                cmd += ["--trace", os.path.join(args.out, "traces")]
            kt = run_child(cmd, env, "kiln-bench")
            recs = read_records(kjson)
            pt = 0.0
            if not args.no_peers:
                if server:
                    pt = server.run(w, pjson)
                else:
                    pt = run_child(peers_cmd + ["--filter", w, "--json", pjson], env, "peers.py")
                stream = next((r.get("stream_gbps") for r in recs if r.get("tool") == "machine"), None)
                for r in read_records(pjson):
                    r["stream_gbps"] = stream  # the STREAM copy kiln-bench measured just before
                    recs.append(r)
            for r in recs:
                if r.get("tool") == "machine":
                    r["workload"] = w
                else:
                    by[(w, column(r))] = r
                merged.append(r)
            shared = f" (request {server.requests} of one process)" if server and not args.no_peers else ""
            print(f"[{i + 1}/{len(workloads)}] {w}: kiln-bench {kt:.1f} s, peers {pt:.1f} s{shared}", flush=True)
            medians = [(c, by[(w, c)].get("median_ms")) for c in COLUMNS if (w, c) in by]
            print("    " + ", ".join(f"{c} {m:.4g} ms" for c, m in medians if m), flush=True)
            # the records so far (after the last workload, all of them), so that a run cut short
            # (a lent machine's time limit) keeps what it measured
            with open(os.path.join(args.out, "bench.json"), "w") as f:
                json.dump(merged, f, indent=1)
        if server:
            server.close()

    text = tables(workloads, by)
    print()
    print(text)
    machine = next((r for r in merged if r.get("tool") == "machine"), {})
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(text)
    series = []
    for c in COLUMNS[1:]:
        vals = []
        for w in workloads:
            e = by.get((w, "kiln eager"), {}).get("median_ms")
            m = by.get((w, c), {}).get("median_ms")
            vals.append(e / m if e and m else None)
        if any(v is not None for v in vals):
            series.append((c, vals))
    title = f"tier {args.tier}, {args.threads} threads, {machine.get('cpu', '')}"
    with open(os.path.join(args.out, "bench.svg"), "w") as f:
        f.write(chart(title, workloads, series))
    print(f"wrote {os.path.join(args.out, 'bench.json')}, table.txt and bench.svg")
    failed = [k for k, r in by.items() if r.get("check") == "failed"]
    # (a workload kiln-bench left no compiled record for failed too: the log says why)
    unmeasured = [w for w in workloads if (w, "kiln compiled") not in by]
    if unmeasured:
        print(f"compare.py: no kiln compiled record for {', '.join(unmeasured)}")
    return 1 if failed or unmeasured else 0


if __name__ == "__main__":
    sys.exit(main())
