#!/usr/bin/env python3
"""PyTorch's counterpart of kiln-op-time (tools/op_time.cpp): the same op on the same shape and
dtype, timed the same way (10 untimed calls, then the median of --reps), the same output line.

Usage: op_time_torch.py OP ROWS COLS [float32|float64|float16|bfloat16] [--reps N]
"""
import sys
import time

import torch

OPS = {
    "sum_rows": lambda x, y: x.sum(1),
    "sum_cols": lambda x, y: x.sum(0),
    "mean_cols": lambda x, y: x.mean(0),
    "amax_cols": lambda x, y: x.amax(0),
    "mean_rows": lambda x, y: x.mean(1),
    "amax_rows": lambda x, y: x.amax(1),
    "argmax_rows": lambda x, y: x.argmax(1),
    "var_rows": lambda x, y: x.var(1),
    "softmax_rows": lambda x, y: torch.softmax(x, 1),
    "relu": lambda x, y: torch.relu(x),
    "exp": lambda x, y: torch.exp(x),
    "tanh": lambda x, y: torch.tanh(x),
    "gelu": lambda x, y: torch.nn.functional.gelu(x),
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "add_scalar": lambda x, y: x + 1.5,
    "clamp": lambda x, y: torch.clamp(x, -0.5, 0.5),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "to_float32": lambda x, y: x.to(torch.float32),
    "to_float16": lambda x, y: x.to(torch.float16),
    "to_bfloat16": lambda x, y: x.to(torch.bfloat16),
    "transpose_copy": lambda x, y: x.t().contiguous(),
    "sub": lambda x, y: x - y,
    "div": lambda x, y: x / y,
    "floor_divide": lambda x, y: torch.floor_divide(x, y),
    "remainder": lambda x, y: torch.remainder(x, y),
    "pow_scalar": lambda x, y: torch.pow(x, 2.5),
    "pow": lambda x, y: torch.pow(x, y),
    "maximum": lambda x, y: torch.maximum(x, y),
    "lt": lambda x, y: x < y,
    "masked_fill": lambda x, y: x.masked_fill(y > 0, 0.0),
    "sigmoid": lambda x, y: torch.sigmoid(x),
    "silu": lambda x, y: torch.nn.functional.silu(x),
    "sqrt": lambda x, y: torch.sqrt(x),
    "log": lambda x, y: torch.log(x),
    "sin": lambda x, y: torch.sin(x),
    "abs": lambda x, y: torch.abs(x),
    "floor": lambda x, y: torch.floor(x),
    "sum_all": lambda x, y: x.sum(),
    "prod_rows": lambda x, y: x.prod(1),
    "min_rows": lambda x, y: x.min(1)[0],
    "std_rows": lambda x, y: x.std(1),
    "norm_rows": lambda x, y: x.norm(2, 1),
    "logsumexp_rows": lambda x, y: x.logsumexp(1),
    "log_softmax_rows": lambda x, y: torch.log_softmax(x, 1),
    "cumsum_rows": lambda x, y: x.cumsum(1),
    "cat_rows": lambda x, y: torch.cat([x, y], 0),
    "cat_cols": lambda x, y: torch.cat([x, y], 1),
    "index_select_rows": lambda x, y: torch.index_select(x, 0, INDEX[0]),
}
INDEX = []
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


def main():
    args = sys.argv[1:]
    reps = 50
    if "--reps" in args:
        i = args.index("--reps")
        reps = max(1, int(args[i + 1]))
        del args[i:i + 2]
    if len(args) < 3 or args[0] not in OPS:
        sys.exit(__doc__)
    op, rows, cols = args[0], int(args[1]), int(args[2])
    dtype = args[3] if len(args) > 3 else "float32"
    x = torch.randn(rows, cols).to(DTYPES[dtype])
    y = x.clone()
    INDEX.append(torch.randint(0, rows, (rows,)))
    f = OPS[op]
    ms = []
    for i in range(10 + reps):
        t0 = time.perf_counter()
        r = f(x, y)
        t1 = time.perf_counter()
        del r
        if i >= 10:
            ms.append((t1 - t0) * 1e3)
    ms.sort()
    print("torch %s [%d,%d] %s %.4f ms" % (op, rows, cols, dtype, ms[len(ms) // 2]))


if __name__ == "__main__":
    main()
