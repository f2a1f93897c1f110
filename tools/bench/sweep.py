#!/usr/bin/env python3
"""kiln compiled under several settings of the backend's tuning variables, side by side: the
experiment a short GPU lease runs to choose a default (docs/bench.md, "Sweeps").

    python3 tools/bench/sweep.py [--kiln-bench build/tools/kiln-bench] --device cuda --tier gpu \
        --filter transpose_add,softmax/x=16384x4096 --setting '' --setting KILN_CUDA_GRID_PER_SM=0 \
        --setting 'KILN_CUDA_TILE=64 KILN_CUDA_GRID_PER_SM=0' [--rounds 2] --out sweep-out
    python3 tools/bench/sweep.py --summarize sweep-out      # the table again, from sweep.json

A workload is a name of the registry, with its inputs' sizes (kiln-bench --input) after slashes
where they are not the tier's: softmax/x=16384x4096. A setting is a space-separated list of
VAR=VALUE (docs/env_vars.md); '' is the defaults. For each
workload in turn, each round runs one `kiln-bench --filter W --variants compiled` per setting (fresh
processes, in order, so that drift hits every setting alike), with the compiled outputs checked
against eager. Prints and writes (DIR/sweep.txt) a table of median ms per setting and its ratio to
the first setting, with the achieved share of the copy bandwidth kiln-bench measured in the same
process; DIR/sweep.json holds every record, saved after each workload so that a run cut short
keeps what it measured. Builds nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_setting(text):
    env = {}
    for item in text.split():
        name, eq, value = item.partition("=")
        if not eq or not name.startswith("KILN_"):
            sys.exit(f"sweep.py: a setting is VAR=VALUE items with KILN_ variables, not '{item}'")
        env[name] = value
    return env


def run_one(kiln_bench, workload, setting, base_env, common, tmp):
    env = dict(base_env)
    env.update(parse_setting(setting))
    out = os.path.join(tmp, "one.json")
    if os.path.exists(out):
        os.remove(out)
    name, *inputs = workload.split("/")
    cmd = [kiln_bench, "--filter", name, "--json", out, "--no-compile-time", "--variants", "compiled"] + common
    for spec in inputs:
        cmd += ["--input", spec]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    try:
        with open(out) as f:
            recs = json.load(f)
    except (OSError, ValueError):
        recs = []
    machine = next((r for r in recs if r.get("tool") == "machine"), {})
    comp = next((r for r in recs if r.get("variant") == "compiled"), None)
    rec = {"workload": workload, "setting": setting, "wall_s": wall, "status": p.returncode,
           "stream_gbps": machine.get("stream_gbps"), "device": machine.get("cpu")}
    if comp:
        rec.update({k: comp.get(k) for k in ("median_ms", "min_ms", "reps", "gbps", "bytes", "check", "inputs")})
    else:
        rec["check"] = "no record"
    if rec["check"] != "ok":  # (why, as kiln-bench said it)
        rec["output"] = (comp or {}).get("error") or "\n".join(p.stdout.splitlines()[-10:])
    return rec


def table(workloads, settings, records):
    width, wl = 24, max([18] + [len(w) + 2 for w in workloads])
    out = ["median ms of kiln compiled per setting (x: relative to setting 1; %: of the copy bandwidth "
           "measured in the same process; several rounds: the median of the rounds' medians)", ""]
    out += [f"  [{i + 1}] {s or '(the defaults)'}" for i, s in enumerate(settings)] + [""]
    out.append(f"{'workload':<{wl}}" + "".join(f"{'[%d]' % (i + 1):>{width}}" for i in range(len(settings))))
    for w in workloads:
        row, base = f"{w:<{wl}}", None
        for i, s in enumerate(settings):
            rs = [r for r in records if r["workload"] == w and r["setting"] == s]
            if any(r.get("check") not in ("ok", None) for r in rs):
                cell = "FAILED" if any(r.get("check") == "failed" for r in rs) else "no record"
            else:
                meds = [r["median_ms"] for r in rs if r.get("median_ms")]
                if not meds:
                    cell = "-"
                else:
                    med = statistics.median(meds)
                    pcts = [100 * r["gbps"] / r["stream_gbps"] for r in rs if r.get("gbps") and r.get("stream_gbps")]
                    if i == 0:
                        base = med
                    cell = f"{med:.4g}"
                    if base and i > 0:
                        cell += f" ({med / base:.2f}x)"
                    if pcts:
                        cell += f" {statistics.median(pcts):.0f}%"
            row += f"{cell:>{width}}"
        out.append(row)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln-bench", default=os.path.join(ROOT, "build", "tools", "kiln-bench"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tier", default="bench", choices=["small", "bench", "gpu"])
    ap.add_argument("--filter", default="",
                    help="comma-separated workloads, each NAME[/INPUT=SIZES...] (needed unless --summarize)")
    ap.add_argument("--setting", action="append", default=None,
                    help="space-separated KILN_VAR=VALUE; repeatable; '' for the defaults (default: only that)")
    ap.add_argument("--rounds", type=int, default=1, help="times each setting runs per workload (interleaved)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                    help="host threads (the cpu eager reference, input generation; on a GPU they are not timed)")
    ap.add_argument("--out", default="sweep-out")
    ap.add_argument("--summarize", metavar="DIR",
                    help="only write DIR/sweep.txt from DIR/sweep.json (a run cut short before its table)")
    args = ap.parse_args()
    if args.summarize:
        with open(os.path.join(args.summarize, "sweep.json")) as f:
            records = json.load(f)
        first = lambda key: list(dict.fromkeys(r[key] for r in records))
        text = table(first("workload"), first("setting"), records)
        print(text)
        with open(os.path.join(args.summarize, "sweep.txt"), "w") as f:
            f.write(text)
        return 0
    settings = args.setting if args.setting else [""]
    for s in settings:
        parse_setting(s)
    if not os.access(args.kiln_bench, os.X_OK):
        sys.exit(f"sweep.py: no kiln-bench at {args.kiln_bench}")
    workloads = [w for w in args.filter.split(",") if w]
    if not workloads:
        sys.exit("sweep.py: --filter names no workload")
    base_env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "KILN_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        base_env[var] = str(args.threads)
    base_env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for s in settings:  # (a variable some setting sets is otherwise unset: '' means the defaults)
        for name in parse_setting(s):
            base_env.pop(name, None)
    common = ["--tier", args.tier, "--device", args.device, "--reps", str(args.reps), "--min-time", str(args.min_time)]
    os.makedirs(args.out, exist_ok=True)
    records = []
    with tempfile.TemporaryDirectory(prefix="kiln-sweep-") as tmp:
        for w in workloads:
            for rnd in range(args.rounds):
                for s in settings:
                    r = run_one(args.kiln_bench, w, s, base_env, common, tmp)
                    r["round"] = rnd
                    records.append(r)
                    med = r.get("median_ms")
                    print(f"{w} [{s or 'defaults'}] round {rnd + 1}: "
                          f"{'%.4f ms' % med if med else r.get('check')} ({r['wall_s']:.1f} s)", flush=True)
                    if r.get("output"):
                        print("    " + r["output"].replace("\n", "\n    "), flush=True)
            with open(os.path.join(args.out, "sweep.json"), "w") as f:
                json.dump(records, f, indent=1)
    text = table(workloads, settings, records)
    print()
    print(text)
    with open(os.path.join(args.out, "sweep.txt"), "w") as f:
        f.write(text)
    # (a setting that failed its check, or a kiln-bench that left no record, fails the sweep)
    return 1 if any(r.get("check") != "ok" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
