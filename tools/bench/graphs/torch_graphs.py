#!/usr/bin/env python3
"""PyTorch eager and torch.compile on the graphs of this folder (each *.ir here is the same
program as kiln's text form, timed by `kiln-bench --ir FILE`): median ms of at least 20 calls
and 1 s, after 5 warm-up calls (torch.compile: after the compiling call), 2 threads.

Usage: python3 tools/bench/graphs/torch_graphs.py [NAME ...]   (no names: every graph)
"""
import sys
import statistics
import time

import torch

torch.set_num_threads(2)
x = torch.randn(4096, 1024).half()
y = torch.randn(4096, 1024).half()
xb = x.bfloat16()
wide = torch.randn(4096, 1024)
narrow = torch.randn(65536, 16)
points = torch.randn(1048576, 3)
big = torch.randn(16777216)
PROGRAMS = [
    ("f16_chain", lambda a, b: torch.relu((a + b) * a), (x, y)),
    ("f16_rowsum", lambda a: a.sum(1), (x,)),
    ("bf16_rowsum", lambda a: a.sum(1), (xb,)),
    ("f16_softmax", lambda a: torch.softmax(a, 1), (x,)),
    ("f16_lse", lambda a: a.logsumexp(1), (x,)),
    ("col_sum_wide", lambda a: a.sum(0), (wide,)),
    ("col_sum_narrow", lambda a: a.sum(0), (narrow,)),
    ("amax_rows16_f64", lambda a: a.amax(1), (narrow.double(),)),
    ("sum_rows32_f64", lambda a: a.sum(1), (torch.randn(65536, 32).double(),)),
    ("softmax_rows16", lambda a: torch.softmax(a, 1), (narrow,)),
    ("softmax_rows8", lambda a: torch.softmax(a, 1), (torch.randn(65536, 8),)),
    ("softmax_rows20", lambda a: torch.softmax(a, 1), (torch.randn(65536, 20),)),
    ("softmax_rows24", lambda a: torch.softmax(a, 1), (torch.randn(65536, 24),)),
    ("softmax_rows32", lambda a: torch.softmax(a, 1), (torch.randn(65536, 32),)),
    ("softmax_rows63", lambda a: torch.softmax(a, 1), (torch.randn(65536, 63),)),
    ("log_softmax_rows16", lambda a: torch.log_softmax(a, 1), (narrow,)),
    ("softmax_rows16_f16", lambda a: torch.softmax(a, 1), (narrow.half(),)),
    ("col_sum_3", lambda a: a.sum(0), (torch.randn(699050, 3),)),
    ("col_sum_4", lambda a: a.sum(0), (torch.randn(524288, 4),)),
    ("col_sum_8", lambda a: a.sum(0), (torch.randn(262144, 8),)),
    ("col_sum_narrow_f16", lambda a: a.sum(0), (narrow.half(),)),
    ("col_amax_narrow_i64", lambda a: a.amax(0), (torch.randint(-1000, 1000, (65536, 16)),)),
    ("col_sum_64", lambda a: a.sum(0), (torch.randn(16384, 64),)),
    ("center_of_mass", lambda a: a.mean(0), (points,)),
    ("sq_dev_cols3", lambda a, m: ((a - m) * (a - m)).sum(0), (points, torch.randn(3))),
    ("var_all", lambda a: a.var(), (big,)),
    ("std_all_2d", lambda a: a.std(), (big.view(4096, 4096),)),
    ("logsumexp_all", lambda a: a.logsumexp(0), (big,)),
    ("argmax_all", lambda a: a.argmax(), (big,)),
]


def median_ms(f):
    for _ in range(5):
        f()
    times = []
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end or len(times) < 20:
        t0 = time.perf_counter()
        f()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


for name, program, args in PROGRAMS:
    if len(sys.argv) > 1 and name not in sys.argv[1:]:
        continue
    compiled = torch.compile(program)
    compiled(*args)
    eager = median_ms(lambda: program(*args))
    comp = median_ms(lambda: compiled(*args))
    print(f"{name:16s} torch eager {eager:.3f} ms  torch.compile {comp:.3f} ms")
