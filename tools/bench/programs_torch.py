#!/usr/bin/env python3
"""PyTorch's counterpart of kiln-programs (tools/bench/programs.cpp): the same programs on the
same shapes, eager and under torch.compile, timed the same way (3 untimed calls, then the
median of --reps), one line per program: "torch NAME eager E ms compiled C ms".

Usage: programs_torch.py [--reps N] [--threads T] [NAME...]
"""
import math
import sys

import torch

from peer_timing import median_ms, parse_args


def minmax_scale(x):
    lo, hi = torch.aminmax(x, dim=1, keepdim=True)
    return (x - lo) / (hi - lo)


def sinusoidal_pe(x):
    t, d = x.shape
    pos = torch.arange(0, t, 1, dtype=torch.float32).unsqueeze(1)
    freq = (torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d)).exp()
    angle = pos * freq
    return x + torch.cat([angle.sin(), angle.cos()], 1)


PROGRAMS = {
    "arange_scale": (lambda: torch.randn(1 << 22),
                     lambda x: x * torch.arange(0, x.size(0), 1, dtype=torch.float32) + 1.0),
    "linspace_scale": (lambda: torch.randn(1 << 22), lambda x: x * torch.linspace(0, 1, x.size(0))),
    "eye_mask": (lambda: torch.randn(2048, 2048), lambda x: x * torch.eye(x.size(0), x.size(1)) + x.t()),
    "tan_16k": (lambda: torch.rand(16384) + 0.5, lambda x: x.tan() + 1),
    "atan2_16k": (lambda: torch.rand(16384) + 0.5, lambda x: torch.atan2(x, x * 0.5 + 1) + 1),
    "hypot_1m": (lambda: torch.randn(1 << 20), lambda x: torch.hypot(x, x * 0.5 + 1) + 1),
    "logaddexp_1m": (lambda: torch.randn(1 << 20) * 10, lambda x: torch.logaddexp(x, -x) - x.abs()),
    "minmax_scale": (lambda: torch.randn(4096, 1024), minmax_scale),
    "sinusoidal_pe": (lambda: torch.randn(4096, 512), sinusoidal_pe),
}


def main(argv):
    reps, threads, names = parse_args(argv, PROGRAMS, 30, "programs_torch.py")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    for name, (make, fn) in PROGRAMS.items():
        if names and name not in names:
            continue
        x = make()
        compiled = torch.compile(fn)
        eager = median_ms(lambda: fn(x), reps)
        comp = median_ms(lambda: compiled(x), reps)
        print(f"torch {name:16s} eager {eager:9.4f} ms  compiled {comp:9.4f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
