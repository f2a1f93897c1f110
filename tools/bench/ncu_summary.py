#!/usr/bin/env python3
"""Each kernel's own time and DRAM traffic from Nsight Compute's CSV report.

scripts/gpu.sh's `kernels` phase runs kiln-bench under
  ncu --csv --print-units base --clock-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum ...
and this script reads what ncu printed: one line per kernel name (its launches, the median
duration, the DRAM bytes read and written per launch, and GB/s), with --copy-gbps the share of
that device-to-device copy bandwidth. A kernel's duration here is the kernel alone, without the
host's work around it (a compiled program's guard reading a value back, say), which a
workload's wall-clock time includes. Lines that are not CSV rows (ncu's ==PROF== notes, the
program's own output) are skipped.
"""
import argparse
import csv
import statistics
import sys

# (ncu prints SI prefixes unless --print-units base; both are read)
TIME = {'nsecond': 1e-9, 'ns': 1e-9, 'usecond': 1e-6, 'us': 1e-6, 'msecond': 1e-3, 'ms': 1e-3, 'second': 1.0, 's': 1.0}
BYTES = {'byte': 1.0, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'Tbyte': 1e12,
         'KB': 1e3, 'MB': 1e6, 'GB': 1e9, 'TB': 1e12, 'KiB': 1024.0, 'MiB': 1024.0**2, 'GiB': 1024.0**3}
DURATION, READ, WRITE = 'gpu__time_duration.sum', 'dram__bytes_read.sum', 'dram__bytes_write.sum'


def number(text):
    return float(text.replace(',', ''))  # (thousands separators; gpu.sh runs ncu under LC_ALL=C)


def launches(lines):
    """{(process, launch id): (kernel name, {metric: value in seconds or bytes})} from the CSV
    rows. Other metrics, and values ncu could not read ("n/a"), are left out."""
    rows = [line for line in lines if line.startswith('"')]
    out = {}
    for r in csv.DictReader(rows):
        if r.get('Metric Name') not in (DURATION, READ, WRITE) or 'Kernel Name' not in r:
            continue
        metric, unit, value = r['Metric Name'], (r.get('Metric Unit') or '').strip(), r.get('Metric Value', '').strip()
        if value in ('', 'n/a'):
            continue
        scale = TIME.get(unit) if metric == DURATION else BYTES.get(unit)
        if scale is None:
            sys.exit(f"ncu_summary: unknown unit '{unit}' of {metric}")
        name = r['Kernel Name'].split('(')[0].strip()  # (a demangled name may carry its parameters)
        launch = out.setdefault((r.get('Process ID'), r['ID']), (name, {}))
        launch[1][metric] = number(value) * scale
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('report', help="what ncu --csv printed (other lines are skipped)")
    ap.add_argument('--copy-gbps', type=float, help='the device-to-device copy bandwidth to compare with')
    a = ap.parse_args()
    with open(a.report) as f:
        per_launch = launches(f.read().splitlines())
    if not per_launch:
        sys.exit(f'ncu_summary: no kernel launches in {a.report}')
    kernels = {}
    for name, metrics in per_launch.values():
        kernels.setdefault(name, []).append(metrics)
    print(f"{'kernel':<36} {'launches':>8} {'median us':>10} {'MB read':>9} {'MB written':>10} {'GB/s':>7}"
          + (' % of copy' if a.copy_gbps else ''))
    for name, ms in kernels.items():
        t = statistics.median(m.get(DURATION, 0.0) for m in ms)
        rd = statistics.median(m.get(READ, 0.0) for m in ms)
        wr = statistics.median(m.get(WRITE, 0.0) for m in ms)
        gbps = (rd + wr) / t / 1e9 if t > 0 else 0.0
        line = f'{name[:36]:<36} {len(ms):>8} {t * 1e6:>10.1f} {rd / 1e6:>9.1f} {wr / 1e6:>10.1f} {gbps:>7.0f}'
        if a.copy_gbps:
            line += f' {100 * gbps / a.copy_gbps:>8.1f}%'
        print(line)


if __name__ == '__main__':
    main()
