#!/usr/bin/env python3
"""Generates tests/conformance/cases.json: kiln's eager ops checked against PyTorch.

Run with Debian's python3-torch (1.13), not the pyenv python on PATH:

    /usr/bin/python3 tests/conformance/generate.py

Every case records the op, the kiln call it maps to, its attributes, its inputs exactly as laid
out in memory (dtype, sizes, strides, storage offset and the whole flat storage, so that
transposed, sliced and expanded views are rebuilt with as_strided), and either PyTorch's
outputs (dtype, sizes, values; for views also strides/offset/aliasing; for in-place ops the
storage afterwards) or the fact that PyTorch raised (kiln must then throw kiln::Error).

JSON encoding:
  tensor  {"dtype": "float32", "sizes": [...], "strides": [...], "offset": 0, "storage": [...]}
  scalar  {"scalar": "bool"|"int"|"float", "value": v}    (a Python number: "wrapped" scalar)
  values  floats are exact (float32/16-bit values are written as the exact double); NaN and
          infinities are the strings "nan", "inf", "-inf"; bools are 0/1.
  None    null (e.g. a clamp bound that is absent)

A case: {"id": "op/NNN", "op", "call": the kiln call, "desc": a readable summary, "attrs",
"args": [tensor | scalar | null | [tensors]], then "outputs": [{"dtype", "sizes", "values",
("is_view", "strides", "offset") for views, ("storage_after") for in-place ops}] or "error": the
first line of PyTorch's message}, optionally "tol": {"rtol", "atol"} with "tol_reason", and
"known_divergence": a reason.

Cases PyTorch 1.13 cannot run on CPU only because it lacks a Half/BFloat16 kernel are skipped
(kiln computes those in float32 and is expected to support them); see the summary printed.
Cases where kiln intentionally or knowingly differs carry "known_divergence" (see
KNOWN_DIVERGENCES and OPMATH_DIVERGENCE below): the C++ test reports them as skipped with that
reason instead of failing. The output is deterministic (fixed seeds, one thread).
"""
import json
import math
import os
import random
import sys
from collections import OrderedDict, Counter

import torch

SEED = 20240613
torch.manual_seed(SEED)
random.seed(SEED)
torch.set_num_threads(1)  # deterministic reduction order

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json")

DT = OrderedDict([
    ("bool", torch.bool), ("uint8", torch.uint8), ("int8", torch.int8), ("int16", torch.int16),
    ("int32", torch.int32), ("int64", torch.int64), ("float16", torch.float16),
    ("bfloat16", torch.bfloat16), ("float32", torch.float32), ("float64", torch.float64)])
NAME = {v: k for k, v in DT.items()}
ALL = list(DT)
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]
NONBOOL = INTS + FLOATS


def is_float(dt):
    return dt in FLOATS


def contig_strides(sizes):
    st, acc = [0] * len(sizes), 1
    for i in reversed(range(len(sizes))):
        st[i] = acc
        acc *= max(sizes[i], 1)
    return st


def numel(sizes):
    n = 1
    for s in sizes:
        n *= s
    return n


# ---------------------------------------------------------------- value encoding

def enc_float(v):
    v = float(v)
    if v != v:
        return "nan"
    if v == math.inf:
        return "inf"
    if v == -math.inf:
        return "-inf"
    return v


def enc_values(t):
    """Row-major values of t (any layout) as JSON-friendly numbers."""
    flat = t.detach().reshape(-1)
    if flat.dtype.is_floating_point:
        return [enc_float(v) for v in flat.double().tolist()]
    if flat.dtype == torch.bool:
        return [int(v) for v in flat.tolist()]
    return [int(v) for v in flat.tolist()]


# ---------------------------------------------------------------- inputs

DEFAULT_RANGE = {
    "uint8": (0, 255), "int8": (-128, 127), "int16": (-1000, 1000), "int32": (-1000, 1000),
    "int64": (-1000, 1000),
}
SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 0.0]


def layout(sizes, kind):
    """(strides, offset) of a view of `sizes` with the given memory layout."""
    n = len(sizes)
    if kind == "c" or n == 0:
        return contig_strides(sizes), 0
    if kind == "t":  # transposed last two dims (a .t() / .transpose(-1, -2) of a dense tensor)
        assert n >= 2
        ps = list(sizes)
        ps[-1], ps[-2] = ps[-2], ps[-1]
        st = contig_strides(ps)
        st[-1], st[-2] = st[-2], st[-1]
        return st, 0
    if kind == "rev":  # every dim reversed in memory (permute(n-1, ..., 0) of a dense tensor)
        return list(reversed(contig_strides(list(reversed(sizes))))), 0
    if kind == "s":  # x[..., 1::2] of a wider tensor, plus a row gap: sliced, offset 1
        ps = list(sizes)
        ps[-1] = 2 * sizes[-1] + 1
        if n >= 2:
            ps[0] = sizes[0] + 1
        st = contig_strides(ps)
        st[-1] = 2
        return st, 1 + (st[0] if n >= 2 else 0)
    if kind.startswith("e"):  # expanded: stride 0 on one dim (default: the first of size > 1)
        d = int(kind[1:]) if len(kind) > 1 else next(i for i, s in enumerate(sizes) if s > 1)
        ps = list(sizes)
        ps[d] = 1
        st = contig_strides(ps)
        st[d] = 0
        return st, 0
    raise ValueError(kind)


def storage_len(sizes, strides, offset):
    if numel(sizes) == 0:
        return offset
    return offset + sum((s - 1) * st for s, st in zip(sizes, strides)) + 1


def random_storage(dt, n, lo=None, hi=None, distinct=False):
    tdt = DT[dt]
    if n == 0:
        return torch.empty(0, dtype=tdt)
    if dt == "bool":
        v = torch.rand(n) < 0.5
        v[random.randrange(n)] = True
        return v
    if dt in INTS:
        dlo, dhi = DEFAULT_RANGE[dt]
        lo = dlo if lo is None else int(lo)
        hi = dhi if hi is None else int(hi)
        if dt == "uint8":
            lo, hi = max(lo, 0), max(hi, 1)
        if distinct:
            assert hi - lo + 1 >= n
            v = torch.randperm(hi - lo + 1)[:n] + lo
        else:
            v = torch.randint(lo, hi + 1, (n,))
        if bool((v == 0).all()):
            v[0] = 1 if hi >= 1 else lo
        return v.to(tdt)
    lo = -3.0 if lo is None else lo
    hi = 3.0 if hi is None else hi
    if distinct:
        # well separated values so that 16-bit rounding keeps them distinct
        v = (torch.randperm(n).double() + torch.rand(n, dtype=torch.float64) * 0.5) * ((hi - lo) / n) + lo
    else:
        v = torch.rand(n, dtype=torch.float64) * (hi - lo) + lo
    return v.to(tdt)


class In:
    """A tensor input: a view (sizes, strides, offset) of a flat random storage."""

    def __init__(self, dt, sizes, lay="c", lo=None, hi=None, specials=False, values=None,
                 distinct=False, strides=None, offset=None, sparse=False, quant=None):
        self.dt = dt
        self.sizes = list(sizes)
        if strides is None:
            self.strides, self.offset = layout(self.sizes, lay)
        else:
            self.strides, self.offset = list(strides), (offset or 0)
        n = storage_len(self.sizes, self.strides, self.offset)
        if values is not None:
            # explicit logical values: laid out through a dense storage with the wanted layout
            assert lay == "c" and strides is None
            base = torch.tensor(values, dtype=torch.float64 if is_float(dt) else torch.int64).to(DT[dt])
            assert base.numel() == n, (base.numel(), n)
        else:
            base = random_storage(dt, n, lo, hi, distinct)
        if quant and is_float(dt):
            # multiples of 1/quant: short in JSON, and sums of them are exact in float32
            base = (base.double() * quant).round().div(quant).to(DT[dt])
        if sparse and n > 1:
            base[torch.rand(n) < 0.5] = 0
            base[random.randrange(n)] = 1
        if specials and is_float(dt) and numel(self.sizes) > 0:
            reach = torch.as_strided(torch.arange(max(n, 1)), self.sizes, self.strides, self.offset)
            reach = reach.reshape(-1).unique().tolist()
            random.shuffle(reach)
            for pos, val in zip(reach, SPECIALS[: max(1, min(len(SPECIALS), len(reach) - 1))]):
                base[pos] = val
        self.base = base

    def fresh(self):
        """A new (storage, view) pair; in-place ops mutate it, the record stays as generated."""
        b = self.base.clone()
        return b, torch.as_strided(b, self.sizes, self.strides, self.offset)

    @property
    def t(self):
        return self.fresh()[1]

    def rec(self):
        return {"dtype": self.dt, "sizes": self.sizes, "strides": self.strides,
                "offset": self.offset, "storage": enc_values(self.base)}

    def desc(self):
        return "%s%s" % (self.dt, self.sizes)


class Sc:
    """A Python number operand (PyTorch wraps it: it promotes only by category)."""

    def __init__(self, v):
        self.v = v

    def rec(self):
        if isinstance(self.v, bool):
            return {"scalar": "bool", "value": int(self.v)}
        if isinstance(self.v, int):
            return {"scalar": "int", "value": self.v}
        return {"scalar": "float", "value": enc_float(self.v)}

    def desc(self):
        return repr(self.v)


def enc_arg(a):
    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return [enc_arg(x) for x in a]
    return a.rec()


def enc_attr(v):
    if isinstance(v, Sc):
        return v.rec()
    if isinstance(v, float):
        return enc_float(v)
    return v


# ---------------------------------------------------------------- case recording

CASES = []
PER_OP = Counter()
SKIPPED = Counter()


def out_rec(t, view_of=None, storage=None):
    r = {"dtype": NAME[t.dtype], "sizes": list(t.shape), "values": enc_values(t)}
    if view_of is not None:
        r["is_view"] = t.storage().data_ptr() == view_of.storage().data_ptr() and t.numel() > 0
        if r["is_view"]:
            r["strides"] = list(t.stride())
            r["offset"] = t.storage_offset()
    if storage is not None:
        r["storage_after"] = enc_values(storage)
    return r


def runs_in_float32(fn, materialized):
    """Whether fn succeeds when its 16-bit float tensors are given as float32."""
    def up(a):
        if isinstance(a, list):
            return [up(x) for x in a]
        if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.bfloat16):
            return a.float()
        return a
    try:
        fn(*[up(a) for a in materialized])
        return True
    except Exception:  # noqa: BLE001
        return False


# Tolerances of the C++ test for 16-bit float results (used to decide whether PyTorch 1.13's own
# 16-bit arithmetic differs materially from computing in float32 and rounding once).
HALF_TOL = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
# Elementwise ops where PyTorch 1.13 rounds an intermediate result to the 16-bit dtype while
# kiln (like later PyTorch releases) computes in float32 and rounds once. A 16-bit case of these
# ops whose PyTorch 1.13 result differs (beyond the test's tolerance) from the float32-then-round
# result is marked as a known divergence.
OPMATH_DIVERGENCE = {
    "div": "torch 1.13 rounds the 16-bit quotient to float16/bfloat16 before truncating/flooring it "
           "(trunc(half(a/b))); kiln rounds once after trunc/floor of the float32 quotient, as later PyTorch releases do",
    "floor_divide": "torch 1.13 rounds the 16-bit quotient before flooring it; kiln floors the float32 "
                    "quotient and rounds once, as later PyTorch releases do",
}
# GEMMs: torch 1.13 accumulates 16-bit products in the 16-bit type, kiln in float32. Such a case
# stays active but its tolerance is widened by torch 1.13's own error (its distance from the
# float32-accumulated result), recorded with this reason.
GEMM_OPS = ("matmul", "mm", "bmm", "addmm", "einsum")
GEMM_TOL_REASON = ("torch 1.13's CPU GEMM accumulates bfloat16/float16 products in the 16-bit type (a rounding "
                   "per multiply-add); kiln accumulates in float32 and rounds once, as later PyTorch releases do: atol "
                   "is widened by torch 1.13's distance from the float32-accumulated result")


def opmath_reference(fn, materialized, res):
    """The 16-bit result computed in float32 and rounded once, or None for other dtypes."""
    outs = [res] if isinstance(res, torch.Tensor) else list(res)
    if not outs or outs[0].dtype not in HALF_TOL:
        return None
    dt = outs[0].dtype

    def up(a):  # operands as the compute dtype would hold them, widened to float32
        if isinstance(a, list):
            return [up(x) for x in a]
        if isinstance(a, torch.Tensor):
            return a.to(dt).float()
        return a
    alt = fn(*[up(a) for a in materialized])
    alt = [alt] if isinstance(alt, torch.Tensor) else list(alt)
    return outs, [a.to(dt) for a in alt]


def opmath_differs(fn, materialized, res):
    """Whether torch's 16-bit result differs, beyond the test's tolerance, from float32 math."""
    r = opmath_reference(fn, materialized, res)
    if r is None:
        return False
    rtol, atol = HALF_TOL[r[0][0].dtype]
    return not all(torch.isclose(o.double(), a.double(), rtol=rtol, atol=atol, equal_nan=True).all()
                   for o, a in zip(*r))


def case(op, call, args, fn, attrs=None, kind="value", tag="", tol=None):
    """Runs fn on fresh torch copies of args and records the case.

    kind: "value" (outputs compared), "view" (also aliasing/strides), "inplace" (the mutated
    first argument and its whole storage are compared).
    """
    attrs = attrs or {}
    materialized, storages = [], []

    def mat(a):
        if a is None:
            return None
        if isinstance(a, (list, tuple)):
            return [mat(x) for x in a]
        if isinstance(a, Sc):
            return a.v
        b, t = a.fresh()
        storages.append(b)
        return t

    for a in args:
        materialized.append(mat(a))
    rec = OrderedDict()
    rec["id"] = "%s/%03d" % (op, PER_OP[op])
    rec["op"] = op
    rec["call"] = call
    descs = []
    for a in args:
        if a is None:
            descs.append("None")
        elif isinstance(a, (list, tuple)):
            descs.append("[" + ",".join(x.desc() for x in a) + "]")
        else:
            descs.append(a.desc())
    rec["desc"] = ("%s(%s)" % (op, ", ".join(descs))) + ((" " + tag) if tag else "")
    if attrs:
        rec["attrs"] = {k: enc_attr(v) for k, v in attrs.items()}
    rec["args"] = [enc_arg(a) for a in args]
    try:
        res = fn(*materialized)
    except Exception as e:  # noqa: BLE001 - any PyTorch error is an expected kiln::Error
        msg = str(e).strip().split("\n")[0][:200]
        if ("not implemented for 'Half'" in msg or "not implemented for 'BFloat16'" in msg) and \
                runs_in_float32(fn, materialized):
            # only a missing 16-bit kernel in torch 1.13: kiln computes these in float32
            SKIPPED[op] += 1
            return None
        rec["error"] = msg
    else:
        if isinstance(res, torch.Tensor):
            res = [res]
        outs = []
        for i, r in enumerate(res):
            if kind == "view":
                outs.append(out_rec(r, view_of=materialized[0]))
            elif kind == "inplace" and i == 0:
                outs.append(out_rec(materialized[0], storage=storages[0]))
            else:
                outs.append(out_rec(r))
        rec["outputs"] = outs
        if op in OPMATH_DIVERGENCE and opmath_differs(fn, materialized, res):
            rec["known_divergence"] = OPMATH_DIVERGENCE[op]
        if op in GEMM_OPS:
            r = opmath_reference(fn, materialized, res)
            if r is not None:
                dist = max(((o.double() - a.double()).abs().max().item() if o.numel() else 0.0)
                           for o, a in zip(*r))
                if dist > 0:
                    rtol, atol = HALF_TOL[r[0][0].dtype]
                    tol = {"rtol": rtol, "atol": atol + dist}
                    rec["tol_reason"] = GEMM_TOL_REASON
    if tol:
        rec["tol"] = tol
    PER_OP[op] += 1
    CASES.append(rec)
    return rec


# ---------------------------------------------------------------- unary

def gen_unary():
    # name -> (torch function, float domain (lo, hi), int range or None for the dtype default)
    UN = OrderedDict([
        ("neg", (torch.neg, (-3, 3))), ("abs", (torch.abs, (-3, 3))), ("sign", (torch.sign, (-3, 3))),
        ("exp", (torch.exp, (-5, 5))), ("exp2", (torch.exp2, (-5, 5))), ("expm1", (torch.expm1, (-3, 3))),
        ("log", (torch.log, (-0.5, 5))), ("log2", (torch.log2, (-0.5, 5))), ("log1p", (torch.log1p, (-1.5, 5))),
        ("sqrt", (torch.sqrt, (-0.5, 5))), ("rsqrt", (torch.rsqrt, (-0.5, 5))),
        ("reciprocal", (torch.reciprocal, (-3, 3))),
        ("sin", (torch.sin, (-4, 4))), ("cos", (torch.cos, (-4, 4))), ("tan", (torch.tan, (-1.4, 1.4))),
        ("asin", (torch.asin, (-1.1, 1.1))), ("acos", (torch.acos, (-1.1, 1.1))), ("atan", (torch.atan, (-5, 5))),
        ("sinh", (torch.sinh, (-4, 4))), ("cosh", (torch.cosh, (-4, 4))), ("tanh", (torch.tanh, (-4, 4))),
        ("sigmoid", (torch.sigmoid, (-8, 8))), ("relu", (torch.relu, (-3, 3))),
        ("gelu", (None, (-4, 4))), ("silu", (torch.nn.functional.silu, (-5, 5))), ("erf", (torch.erf, (-3, 3))),
        ("floor", (torch.floor, (-5, 5))), ("ceil", (torch.ceil, (-5, 5))), ("round", (torch.round, (-5, 5))),
        ("trunc", (torch.trunc, (-5, 5))), ("isnan", (torch.isnan, (-3, 3))), ("isinf", (torch.isinf, (-3, 3))),
        ("isfinite", (torch.isfinite, (-3, 3))), ("nan_to_num", (None, (-3, 3))),
        ("logical_not", (torch.logical_not, (-2, 2))), ("bitwise_not", (torch.bitwise_not, (-3, 3))),
    ])
    # integer inputs of the float-valued ops stay in a range where the result is finite
    INT_RANGE = {"exp": (-10, 10), "exp2": (-10, 10), "expm1": (-10, 10), "sinh": (-10, 10),
                 "cosh": (-10, 10)}

    for op, (fn, (lo, hi)) in UN.items():
        variants = [({}, "")]
        if op == "gelu":
            variants = [({"approximate": "none"}, ""), ({"approximate": "tanh"}, "")]
        if op == "nan_to_num":
            variants = [({}, ""), ({"nan": 1.5, "posinf": 100.0, "neginf": -100.0}, "custom"),
                        ({"nan": -2.0}, "nan only")]
        for attrs, vtag in variants:
            if op == "gelu":
                f = lambda x, a=attrs: torch.nn.functional.gelu(x, approximate=a["approximate"])
                call = "kiln::gelu(x, approximate)"
            elif op == "nan_to_num":
                f = lambda x, a=attrs: torch.nan_to_num(x, nan=a.get("nan", 0.0), posinf=a.get("posinf"),
                                                       neginf=a.get("neginf"))
                call = "kiln::nan_to_num(x, nan, posinf, neginf)"
            else:
                f = fn
                call = "kiln::%s(x)" % op
            full = attrs is variants[0][0] or op == "gelu"
            dts = ALL if full else ["float32", "float64", "int32"]
            for dt in dts:
                ilo, ihi = INT_RANGE.get(op, (None, None)) if dt in INTS else (lo, hi)
                case(op, call, [In(dt, [2, 3], lo=ilo, hi=ihi)], f, attrs, tag=vtag)
            for dt in FLOATS:
                case(op, call, [In(dt, [7], lo=lo, hi=hi, specials=True)], f, attrs, tag=vtag + " specials")
            if not full:
                continue
            case(op, call, [In("float32", [], lo=lo, hi=hi)], f, attrs, tag="0-d")
            case(op, call, [In("float64", [0, 3])], f, attrs, tag="empty")
            case(op, call, [In("float32", [3, 4], "t", lo=lo, hi=hi)], f, attrs, tag="transposed")
            case(op, call, [In("float64", [2, 5], "s", lo=lo, hi=hi)], f, attrs, tag="sliced")
            case(op, call, [In("float32", [4, 3], "e", lo=lo, hi=hi)], f, attrs, tag="expanded")
            case(op, call, [In("float32", [2, 3, 4], "rev", lo=lo, hi=hi, specials=True)], f, attrs,
                 tag="permuted")
            case(op, call, [In("int32", [3, 4], "t", lo=INT_RANGE.get(op, (None,))[0],
                               hi=INT_RANGE.get(op, (None, None))[1])], f, attrs, tag="int transposed")
            case(op, call, [In("bfloat16", [3, 4], "s", lo=lo, hi=hi)], f, attrs, tag="bf16 sliced")
            # a longer contiguous run exercises the vectorised float32/float64 paths and their tails
            case(op, call, [In("float32", [37], lo=lo, hi=hi, specials=True)], f, attrs, tag="vector")
            case(op, call, [In("float64", [19], lo=lo, hi=hi, specials=True)], f, attrs, tag="vector")
        if op == "round":
            halves = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 3.5, -0.0, 1e7 + 0.5]
            for dt in ["float32", "float64", "bfloat16"]:
                case(op, "kiln::round(x)", [In(dt, [10], values=halves)], torch.round, tag="ties to even")
        if op in ("floor", "ceil", "trunc"):
            vals = [-0.5, 0.5, -1.0, 2.0, -2.5, 2.5, -0.0, 1e20]
            case(op, "kiln::%s(x)" % op, [In("float32", [8], values=vals)], fn, tag="edges")


# ---------------------------------------------------------------- binary

def binary_common(op, call_t, call_s, f, dom_a=(-3, 3), dom_b=(-3, 3), int_a=(None, None),
                  int_b=(None, None), scalars=True, attrs=None, tag="", scalar_vals=(3, 2.5, True),
                  dtypes=None):
    """The standard set of binary cases: every dtype, broadcasting, promotion, scalars, 0-d,
    non-contiguous, empty, specials and a broadcast error."""
    attrs = attrs or {}

    def A(dt, sizes, lay="c", **kw):
        lo, hi = dom_a if is_float(dt) else int_a
        return In(dt, sizes, lay, lo=kw.pop("lo", lo), hi=kw.pop("hi", hi), **kw)

    def B(dt, sizes, lay="c", **kw):
        lo, hi = dom_b if is_float(dt) else int_b
        return In(dt, sizes, lay, lo=kw.pop("lo", lo), hi=kw.pop("hi", hi), **kw)

    def C(a, b, t=""):
        tt = (tag + " " + t).strip()
        if isinstance(b, Sc):
            case(op, call_s, [a, b], f, attrs, tag=tt)
        else:
            case(op, call_t, [a, b], f, attrs, tag=tt)

    for dt in (dtypes or ALL):
        C(A(dt, [2, 3]), B(dt, [2, 3]))
    C(A("float32", [3, 1]), B("float32", [1, 4]), "broadcast")
    C(A("float32", [2, 3, 4]), B("float32", [4]), "broadcast")
    C(A("float64", [2, 1, 4]), B("float64", [3, 1]), "broadcast")
    C(A("int64", [4, 1]), B("int64", [3]), "broadcast")
    for da, db in [("int32", "float32"), ("uint8", "int8"), ("bool", "int16"), ("int64", "float16"),
                   ("bfloat16", "float16"), ("int8", "float64"), ("bool", "float32"), ("uint8", "bfloat16"),
                   ("int16", "int64"), ("float32", "float64")]:
        C(A(da, [2, 3]), B(db, [2, 3]), "promotion")
    if scalars:
        for dt, s in [("int32", scalar_vals[0]), ("int32", scalar_vals[1]), ("int8", scalar_vals[2]),
                      ("uint8", scalar_vals[0]), ("float16", scalar_vals[1]), ("bfloat16", scalar_vals[0]),
                      ("bool", scalar_vals[0]), ("bool", scalar_vals[1]), ("bool", scalar_vals[2]),
                      ("float32", scalar_vals[2]), ("float64", scalar_vals[0]), ("float32", scalar_vals[1]),
                      ("int64", scalar_vals[1])]:
            C(A(dt, [2, 3]), Sc(s), "scalar")
        C(A("float32", []), Sc(scalar_vals[1]), "0-d and scalar")
    # 0-d tensors rank below dimensioned tensors
    C(A("int8", [2, 3]), B("int64", []), "0-d")
    C(A("int32", [2, 3]), B("float64", []), "0-d")
    C(A("float16", [2, 3]), B("float64", []), "0-d")
    C(A("float32", []), B("int64", []), "both 0-d")
    C(A("int64", []), B("float32", [3]), "0-d first")
    C(A("bool", [2, 3]), B("int32", []), "0-d")
    # layouts
    C(A("float32", [3, 4], "t"), B("float32", [3, 4], "s"), "non-contiguous")
    C(A("float64", [4, 3], "e"), B("float64", [4, 3], "t"), "expanded")
    C(A("int32", [2, 3, 4], "rev"), B("int32", [3, 4], "s"), "permuted")
    C(A("float32", [33]), B("float32", [33]), "vector")
    # empty
    C(A("float32", [0, 3]), B("float32", [1, 3]), "empty")
    C(A("int64", [2, 0]), B("int64", [2, 0]), "empty")
    # specials
    for dt in ["float32", "float64", "bfloat16", "float16"]:
        C(A(dt, [9], specials=True), B(dt, [9], specials=True), "specials")
    # broadcast mismatch
    C(A("float32", [2, 3]), B("float32", [4]), "shape mismatch")


def gen_binary():
    # add / sub with alpha
    for op in ["add", "sub"]:
        tf = torch.add if op == "add" else torch.sub
        ct = "kiln::%s(a, b, alpha)" % op
        binary_common(op, ct, ct, lambda a, b, tf=tf: tf(a, b))
        for dt, alpha in [("float32", 0.5), ("float64", -2), ("int32", 3), ("int32", 2.5), ("int8", -1),
                          ("bool", True), ("bool", 2), ("float16", 1.5), ("bfloat16", -0.25), ("uint8", 2)]:
            a, b = In(dt, [2, 3]), In(dt, [3])
            case(op, ct, [a, b], lambda x, y, al=alpha, tf=tf: tf(x, y, alpha=al), {"alpha": Sc(alpha)},
                 tag="alpha")
        for dt, s, alpha in [("float32", 2, 0.5), ("int64", 3, 2), ("int16", 2.5, 2), ("int16", 2, 1.5)]:
            case(op, ct, [In(dt, [2, 3]), Sc(s)], lambda x, y, al=alpha, tf=tf: tf(x, y, alpha=al),
                 {"alpha": Sc(alpha)}, tag="scalar alpha")
        if op == "sub":
            case(op, ct, [In("bool", [3]), In("int32", [3])], torch.sub, tag="bool error")
    binary_common("mul", "kiln::mul(a, b)", "kiln::mul(a, b)", torch.mul)

    # div in its three rounding modes
    for mode in [None, "trunc", "floor"]:
        tag = "mode=%s" % mode
        attrs = {"rounding_mode": mode}
        f = lambda a, b, m=mode: torch.div(a, b, rounding_mode=m)
        binary_common("div", "kiln::div(a, b, rounding_mode)", "kiln::div(a, b, rounding_mode)", f,
                      int_b=(1, 9), dom_b=(-3, 3), attrs=attrs, tag=tag, scalar_vals=(3, 2.5, True))
        for dt in ["int32", "int8", "int64", "uint8"]:
            case("div", "kiln::div(a, b, rounding_mode)",
                 [In(dt, [2, 3], lo=-20 if dt != "uint8" else 0, hi=20), In(dt, [2, 3], lo=-7 if dt != "uint8" else 1, hi=7)],
                 f, attrs, tag=tag + " signs (may contain a zero divisor)")
        case("div", "kiln::div(a, b, rounding_mode)", [In("int32", [4], values=[7, -7, 0, 3]),
             In("int32", [4], values=[2, 2, 0, 0])], f, attrs, tag=tag + " zero divisor")
        case("div", "kiln::div(a, b, rounding_mode)", [In("int8", [3], values=[-128, 127, -128]),
             In("int8", [3], values=[-1, -1, 1])], f, attrs, tag=tag + " int8 min / -1")
        vals = [7.0, -7.0, 7.5, -7.5, 1.0, -0.0, 0.0, 5.0]
        divs = [2.0, 2.0, -2.5, 2.5, 0.0, 3.0, -3.0, 0.1]
        for dt in ["float32", "float64"]:
            case("div", "kiln::div(a, b, rounding_mode)", [In(dt, [8], values=vals), In(dt, [8], values=divs)],
                 f, attrs, tag=tag + " edges")
        # scalar first: div(Scalar, Tensor)
        for s, dt in [(2, "int32"), (2.5, "int32"), (3, "float32"), (-1.5, "float64"), (True, "int16"),
                      (7, "int64"), (1.5, "bfloat16")]:
            b = In(dt, [2, 3], lo=1, hi=9) if dt in INTS else In(dt, [2, 3])

            def fs(x, y, m=mode):
                rt = torch.result_type(x, y)
                return torch.div(torch.full_like(y, x, dtype=rt), y.to(rt), rounding_mode=m)
            case("div", "kiln::div(a, b, rounding_mode)", [Sc(s), b], fs, attrs, tag=tag + " scalar first")
    binary_common("floor_divide", "kiln::floor_divide(a, b)", "kiln::floor_divide(a, b)", torch.floor_divide,
                  int_b=(1, 9), dtypes=NONBOOL + ["bool"])
    case("floor_divide", "kiln::floor_divide(a, b)", [In("int32", [6], values=[7, -7, 7, -7, 0, -1]),
         In("int32", [6], values=[2, 2, -2, -2, 5, 3])], torch.floor_divide, tag="signs")
    case("floor_divide", "kiln::floor_divide(a, b)", [In("int64", [2], values=[7, 1]),
         In("int64", [2], values=[0, 1])], torch.floor_divide, tag="zero divisor")

    for op, tf in [("remainder", torch.remainder), ("fmod", torch.fmod)]:
        ct = "kiln::%s(a, b)" % op
        binary_common(op, ct, ct, tf, int_b=(1, 9), dom_b=(0.5, 3), scalar_vals=(3, 2.5, True))
        case(op, ct, [In("int32", [8], values=[7, -7, 7, -7, 0, 6, -6, 5]),
             In("int32", [8], values=[3, 3, -3, -3, 4, 3, -3, -1])], tf, tag="signs")
        case(op, ct, [In("float64", [8], values=[7.5, -7.5, 7.5, -7.5, -0.0, 6.0, -6.0, 1e10]),
             In("float64", [8], values=[2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -3.0, 3.0])], tf, tag="float signs")
        case(op, ct, [In("float32", [4], values=[1.0, math.inf, 2.0, -1.0]),
             In("float32", [4], values=[0.0, 2.0, math.inf, math.inf])], tf, tag="float edges")
        case(op, ct, [In("int16", [3], values=[1, 2, 3]), In("int16", [3], values=[1, 0, 2])], tf,
             tag="zero divisor")
        case(op, ct, [In("int32", [2, 3], lo=-50, hi=50), Sc(-4)], tf, tag="negative scalar")
        case(op, ct, [In("float32", [2, 3]), Sc(-1.5)], tf, tag="negative scalar")

    # pow
    ctp = "kiln::pow(a, b)"
    binary_common("pow", ctp, ctp, torch.pow, dom_a=(0.1, 3), dom_b=(-2, 3), int_a=(-4, 4), int_b=(0, 5),
                  scalar_vals=(3, 2.5, True))
    for dt in ["float32", "float64", "int32", "int8", "uint8", "bfloat16", "float16", "bool", "int64"]:
        for e in [2, 3, 0, 1, -1, -2, 0.5, 2.0, -1.0, 1.5, -0.5, 0.0, 1.0, True]:
            if dt == "bool" and e not in (2, 0.5, True):
                continue
            if dt in ("uint8", "int8", "int64") and e not in (2, -1, 0.5, 3):
                continue
            x = In(dt, [2, 3], lo=(0.1 if is_float(dt) else -3), hi=3)
            case("pow", ctp, [x, Sc(e)], torch.pow, tag="scalar exponent")
    case("pow", ctp, [In("float32", [6], values=[-2.0, -0.5, 0.0, -0.0, math.inf, math.nan]), Sc(0.5)],
         torch.pow, tag="negative base sqrt")
    case("pow", ctp, [In("float32", [6], values=[-2.0, -0.5, 0.0, -0.0, math.inf, math.nan]),
                      In("float32", [6], values=[0.5, 2.0, -1.0, -1.0, 0.0, 0.0])], torch.pow, tag="edges")
    case("pow", ctp, [In("int32", [6], values=[2, -2, 1, -1, 0, 3]), In("int32", [6], values=[-1, -1, -3, -3, 2, -2])],
         torch.pow, tag="negative int exponent tensor")
    case("pow", ctp, [In("int64", [3], values=[2, 3, 10]), In("int64", [3], values=[62, 39, 18])], torch.pow,
         tag="large int64")
    for s, dt in [(2, "int32"), (2.5, "int32"), (2, "float32"), (-1.5, "float64"), (3, "int8"), (True, "bool"),
                  (0.5, "bfloat16"), (2, "uint8")]:
        x = In(dt, [2, 3], lo=0 if dt in INTS else -2, hi=5 if dt in INTS else 2)
        case("pow", ctp, [Sc(s), x], lambda a, b: torch.pow(a, b), tag="scalar base")

    binary_common("atan2", "kiln::atan2(a, b)", "kiln::atan2(a, b)", torch.atan2, scalars=False)
    case("atan2", "kiln::atan2(a, b)", [In("float64", [8], values=[0.0, -0.0, 0.0, -0.0, 1.0, -1.0, math.inf, math.inf]),
         In("float64", [8], values=[0.0, 0.0, -0.0, -0.0, 0.0, -0.0, math.inf, -math.inf])], torch.atan2,
         tag="signed zeros and infinities")
    for op, tf in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
        binary_common(op, "kiln::%s(a, b)" % op, "kiln::%s(a, b)" % op, tf, scalars=False)
        case(op, "kiln::%s(a, b)" % op, [In("float32", [4], values=[math.nan, 1.0, math.nan, -0.0]),
             In("float32", [4], values=[1.0, math.nan, math.nan, 0.0])], tf, tag="nan")
    for op in ["eq", "ne", "lt", "le", "gt", "ge"]:
        tf = getattr(torch, op)
        ct = "kiln::%s(a, b)" % op
        binary_common(op, ct, ct, tf, dom_a=(-2, 2), dom_b=(-2, 2), int_a=(-3, 3), int_b=(-3, 3),
                      scalar_vals=(1, 0.5, True))
        case(op, ct, [In("int32", [5], values=[1, 2, 3, -1, 0]), In("int32", [5], values=[1, 3, 2, -1, 1])], tf,
             tag="equal values")
        case(op, ct, [In("int32", [4], values=[2, 3, -1, 0]), Sc(2.5)], tf, tag="int vs float scalar")
        case(op, ct, [In("uint8", [4], values=[0, 1, 255, 200]), Sc(-1)], tf, tag="uint8 vs negative scalar")
        case(op, ct, [In("float32", [4], values=[math.nan, 1.0, math.inf, -0.0]),
             In("float32", [4], values=[math.nan, math.nan, math.inf, 0.0])], tf, tag="nan")
    for op in ["logical_and", "logical_or", "logical_xor"]:
        tf = getattr(torch, op)
        ct = "kiln::%s(a, b)" % op
        binary_common(op, ct, ct, tf, dom_a=(-1, 1), dom_b=(-1, 1), int_a=(-1, 1), int_b=(-1, 1), scalars=False)
        case(op, ct, [In("float32", [4], values=[math.nan, 0.0, -0.0, 1.0]),
             In("float32", [4], values=[1.0, 1.0, 1.0, 0.0])], tf, tag="nan and signed zero")
    for op in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
        tf = getattr(torch, op)
        ct = "kiln::%s(a, b)" % op
        binary_common(op, ct, ct, tf, scalar_vals=(5, 2.5, True))
        case(op, ct, [In("int64", [3], values=[-1, 12345678901, -9]), Sc(0xFF)], tf, tag="int64 scalar")
        case(op, ct, [In("uint8", [3], values=[255, 15, 0]), Sc(-1)], tf, tag="uint8 with -1")


# ---------------------------------------------------------------- ternary

def gen_ternary():
    # where
    ct = "kiln::where(cond, a, b)"
    for dt in ALL:
        case("where", ct, [In("bool", [2, 3]), In(dt, [2, 3]), In(dt, [2, 3])], torch.where)
    case("where", ct, [In("bool", [3, 1]), In("float32", [1, 4]), In("float32", [4])], torch.where, tag="broadcast")
    case("where", ct, [In("bool", [2, 3, 4], "rev"), In("float64", [3, 4], "t"), In("float64", [2, 1, 4], "s")],
         torch.where, tag="non-contiguous")
    case("where", ct, [In("bool", [0, 2]), In("float32", [1, 2]), In("float32", [2])], torch.where, tag="empty")
    case("where", ct, [In("bool", []), In("int32", []), In("int32", [])], torch.where, tag="0-d")
    for da, db in [("int32", "float32"), ("uint8", "int8"), ("bool", "int64"), ("float16", "bfloat16"),
                   ("int64", "float64")]:
        case("where", ct, [In("bool", [2, 3]), In(da, [2, 3]), In(db, [2, 3])], torch.where, tag="promotion")
    for a, b in [(In("int32", [2, 3]), Sc(2.5)), (Sc(1), In("int8", [2, 3])), (In("float16", [2, 3]), Sc(3)),
                 (Sc(True), In("bool", [2, 3])), (Sc(1), Sc(2.5)), (Sc(1), Sc(2)), (Sc(True), Sc(False)),
                 (In("bool", [2, 3]), Sc(0)), (In("int64", [2, 3]), In("float32", []))]:
        case("where", ct, [In("bool", [2, 3]), a, b], torch.where, tag="scalar / 0-d operands")
    case("where", ct, [In("uint8", [2, 3], lo=0, hi=1), In("float32", [2, 3]), In("float32", [2, 3])], torch.where,
         tag="uint8 condition")
    case("where", ct, [In("float32", [2, 3]), In("float32", [2, 3]), In("float32", [2, 3])], torch.where,
         tag="float condition")
    case("where", ct, [In("bool", [2, 3]), In("float32", [3, 2]), In("float32", [2, 3])], torch.where,
         tag="shape mismatch")

    # clamp with scalar bounds
    ct = "kiln::clamp(x, min, max)"

    def cl(x, lo, hi):
        return torch.clamp(x, lo, hi)
    for dt in ALL:
        lo_, hi_ = (-1, 1) if dt in ("int32", "int64", "int16", "int8") else (2, 100) if dt == "uint8" else (-1, 1)
        case("clamp", ct, [In(dt, [2, 4]), Sc(lo_), Sc(hi_)], cl, tag="scalar bounds")
    for dt, lo_, hi_ in [("float32", -0.5, None), ("float32", None, 0.5), ("float64", 0.25, 0.25),
                         ("float32", 1.0, -1.0), ("int32", 0.5, None), ("int8", None, 2.5), ("int16", -3, None),
                         ("float16", -0.5, 0.5), ("bfloat16", -1, 1), ("float32", math.nan, None),
                         ("float32", None, None), ("float32", True, None), ("uint8", None, -1)]:
        case("clamp", ct, [In(dt, [2, 4]), None if lo_ is None else Sc(lo_), None if hi_ is None else Sc(hi_)],
             cl, tag="scalar bounds")
    case("clamp", ct, [In("float32", [9], specials=True), Sc(-1.0), Sc(1.0)], cl, tag="specials")
    case("clamp", ct, [In("float32", [3, 4], "t"), Sc(-1.0), Sc(1.0)], cl, tag="transposed")
    case("clamp", ct, [In("float64", [0, 2]), Sc(-1.0), Sc(1.0)], cl, tag="empty")
    case("clamp", ct, [In("int64", []), Sc(-1), Sc(1)], cl, tag="0-d")
    # tensor bounds
    for x, lo_, hi_ in [(In("float32", [2, 3]), In("float32", [2, 3]), In("float32", [2, 3], lo=0)),
                        (In("float32", [3, 4]), In("float32", [4], lo=-1, hi=0), In("float32", [3, 1], lo=0, hi=1)),
                        (In("float64", [2, 3]), In("float64", [2, 3]), None),
                        (In("int32", [2, 3]), None, In("int32", [3])),
                        (In("int32", [2, 3]), In("float32", [3]), None),
                        (In("int8", [2, 3]), In("int64", []), In("int64", [])),
                        (In("float32", [1, 3]), In("float32", [2, 3]), None),
                        (In("float32", [4], values=[1.0, 2.0, 3.0, math.nan]),
                         In("float32", [4], values=[math.nan, 0.0, 5.0, 0.0]), In("float32", [4], values=[2.0, 1.0, 4.0, 1.0])),
                        (In("bfloat16", [3], "c"), In("bfloat16", [3]), In("float16", [3])),
                        (In("float32", [2, 3]), None, None)]:
        case("clamp", ct, [x, lo_, hi_], cl, tag="tensor bounds")

    # lerp
    ct = "kiln::lerp(start, end, weight)"
    for dt in FLOATS:
        case("lerp", ct, [In(dt, [2, 3]), In(dt, [2, 3]), Sc(0.3)], torch.lerp, tag="scalar weight")
        case("lerp", ct, [In(dt, [2, 3]), In(dt, [2, 3]), In(dt, [2, 3], lo=-0.5, hi=1.5)], torch.lerp,
             tag="tensor weight")
    case("lerp", ct, [In("float32", [3, 1]), In("float32", [4]), In("float32", [3, 4], "t", lo=0, hi=1)],
         torch.lerp, tag="broadcast")
    case("lerp", ct, [In("float32", [2, 3]), In("float32", [2, 3]), Sc(0.75)], torch.lerp, tag="weight > 0.5")
    case("lerp", ct, [In("float32", [2, 3]), In("float32", [2, 3]), Sc(2)], torch.lerp, tag="int weight")
    case("lerp", ct, [In("float32", []), In("float32", [3]), In("float32", [])], torch.lerp, tag="0-d")
    case("lerp", ct, [In("int32", [3]), In("int32", [3]), Sc(0.5)], torch.lerp, tag="int error")
    case("lerp", ct, [In("float32", [3]), In("float64", [3]), Sc(0.5)], torch.lerp, tag="dtype mismatch")
    case("lerp", ct, [In("float32", [3]), In("float32", [3]), In("float64", [3])], torch.lerp,
         tag="weight dtype mismatch")
    case("lerp", ct, [In("float32", [6], specials=True), In("float32", [6]), Sc(0.5)], torch.lerp, tag="specials")

    # addcmul
    ct = "kiln::addcmul(self, t1, t2, value)"
    for dt in ALL:
        case("addcmul", ct, [In(dt, [2, 3]), In(dt, [2, 3], lo=-10, hi=10), In(dt, [2, 3], lo=-10, hi=10)],
             lambda s, a, b: torch.addcmul(s, a, b), {"value": Sc(1)})
    for dt, v in [("float32", 0.5), ("float64", -2), ("int32", 3), ("int32", 0.5), ("bfloat16", 2.5),
                  ("bool", True), ("float16", -1.5)]:
        case("addcmul", ct, [In(dt, [2, 3]), In(dt, [3]), In(dt, [2, 1])],
             lambda s, a, b, v=v: torch.addcmul(s, a, b, value=v), {"value": Sc(v)}, tag="value broadcast")
    case("addcmul", ct, [In("float32", [2, 3]), In("int32", [2, 3]), In("float64", [2, 3])],
         lambda s, a, b: torch.addcmul(s, a, b), {"value": Sc(1)}, tag="promotion")
    case("addcmul", ct, [In("float32", [3, 4], "t"), In("float32", [3, 4], "s"), In("float32", [4])],
         lambda s, a, b: torch.addcmul(s, a, b, value=2), {"value": Sc(2)}, tag="non-contiguous")
    case("addcmul", ct, [In("float32", [1, 3]), In("float32", [2, 3]), In("float32", [2, 3])],
         lambda s, a, b: torch.addcmul(s, a, b), {"value": Sc(1)}, tag="self broadcast")

    # masked_fill
    ct = "kiln::masked_fill(x, mask, value)"
    for dt in ALL:
        v = True if dt == "bool" else (7 if dt in INTS else -1.5)
        case("masked_fill", ct, [In(dt, [2, 3]), In("bool", [2, 3]), Sc(v)], torch.masked_fill)
    for dt, v in [("int32", 2.7), ("int32", -2.7), ("float32", 3), ("float32", True), ("bool", 0), ("uint8", 300),
                  ("float16", 1e5), ("float32", math.nan), ("float32", -math.inf), ("int8", -1), ("bfloat16", 0.1)]:
        case("masked_fill", ct, [In(dt, [2, 3]), In("bool", [3]), Sc(v)], torch.masked_fill, tag="value kind")
    case("masked_fill", ct, [In("float32", [3, 4], "t"), In("bool", [3, 1]), Sc(0.0)], torch.masked_fill,
         tag="transposed, mask broadcast")
    case("masked_fill", ct, [In("float64", [2, 3]), In("bool", []), Sc(1.0)], torch.masked_fill, tag="0-d mask")
    case("masked_fill", ct, [In("float64", [2, 3]), In("uint8", [2, 3], lo=0, hi=1), Sc(1.0)], torch.masked_fill,
         tag="uint8 mask")
    case("masked_fill", ct, [In("float64", [3]), In("bool", [2, 3]), Sc(1.0)], torch.masked_fill,
         tag="mask larger than input")


# ---------------------------------------------------------------- reductions

def dims_arg(dims):
    return None if dims == [] else dims


def chained(tf):
    """tf over a list of dims for ops whose torch 1.13 form takes one int dim (any, all, prod):
    reduces one dim at a time, which is what the multi-dim form (later PyTorch releases for any/all)
    computes."""
    def g(x, dim, keepdim=False):
        nd = max(x.dim(), 1)
        wrapped = []
        for d in dim:
            if not -nd <= d < nd:
                raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                                 % (-nd, nd - 1, d))
            w = d % nd
            if w in wrapped:
                raise RuntimeError("dim %d appears multiple times in the list of dims" % w)
            wrapped.append(w)
        for d in sorted(wrapped, reverse=True):
            x = tf(x, d, keepdim=keepdim)
        return x
    return g


def gen_reductions():
    def red(op, tf, dts, extra_attrs=None, int_range=(None, None), float_range=(-3, 3), specials=True,
            empty_ok=True, sparse=False, multi=False):
        ct = "kiln::%s(x, dims, keepdim)" % op
        ea = extra_attrs or {}

        def f(dims, keepdim):
            def g(x):
                if dims == []:
                    r = tf(x, **ea)
                    return r.reshape([1] * x.dim()) if keepdim else r
                if multi:
                    return chained(tf)(x, dims, keepdim)
                return tf(x, dim=dims, keepdim=keepdim, **ea)
            return g

        def C(x, dims, keepdim, tag=""):
            a = {"dims": dims, "keepdim": keepdim}
            a.update(ea)
            case(op, ct, [x], f(dims, keepdim), a, tag=tag)

        def X(dt, sizes, lay="c", **kw):
            lo, hi = int_range if dt in INTS else float_range if is_float(dt) else (None, None)
            return In(dt, sizes, lay, lo=lo, hi=hi, sparse=sparse and not kw.get("specials"), **kw)
        for dt in dts:
            C(X(dt, [2, 3]), [], False)
            C(X(dt, [2, 3]), [1], False)
        for dt in ["float32", "float64"]:
            C(X(dt, [2, 3, 4]), [0, 2], True)
            C(X(dt, [2, 3, 4]), [-1], False)
            C(X(dt, [2, 3, 4]), [0], False)
            C(X(dt, [2, 3, 4]), [1, 0], False)
        C(X("float32", [3, 4], "t"), [0], False, "transposed")
        C(X("float32", [3, 4], "t"), [1], True, "transposed")
        C(X("float64", [3, 5], "s"), [1], False, "sliced")
        C(X("float32", [4, 3], "e"), [0], False, "expanded")
        C(X("float32", [2, 3, 4], "rev"), [1], False, "permuted")
        C(X("float32", [2, 3, 4], "rev"), [], True, "permuted keepdim")
        C(X("float32", []), [], False, "0-d")
        C(X("float32", []), [0], True, "0-d dim 0")
        C(X("float32", [70, 3]), [0], False, "long column")
        C(X("float64", [3, 70]), [1], False, "long row")
        C(X("float32", [200]), [], False, "long")
        if specials:
            for dt in FLOATS:
                C(X(dt, [3, 4], specials=True), [1], False, "specials")
        for dt in ["int32", "bfloat16", "bool", "float16", "uint8"]:
            if dt in dts:
                C(X(dt, [2, 3, 4], "t"), [0, 2], True, "non-contiguous")
        if empty_ok:
            C(X("float32", [0, 3]), [0], False, "empty dim")
            C(X("float32", [0, 3]), [1], True, "empty kept")
            C(X("float32", [0, 3]), [], False, "empty all")
        C(X("float32", [2, 3]), [0, 0], False, "duplicate dim")
        C(X("float32", [2, 3]), [2], False, "dim out of range")

    red("sum", torch.sum, ALL)
    red("nansum", torch.nansum, ALL)
    red("mean", torch.mean, ALL)
    red("prod", torch.prod, ALL, int_range=(-3, 3), float_range=(0.5, 1.5), multi=True)
    red("amax", torch.amax, ALL)
    red("amin", torch.amin, ALL)
    red("any", torch.any, ALL, int_range=(0, 1), float_range=(-1, 1), sparse=True, multi=True)
    red("all", torch.all, ALL, int_range=(0, 3), float_range=(-1, 1), multi=True)
    for dt in ["float32", "int64", "uint8", "bool"]:
        case("any", "kiln::any(x, dims, keepdim)", [In(dt, [2, 3], values=[0] * 6)], torch.any,
             {"dims": [], "keepdim": False}, tag="all zero")
        case("all", "kiln::all(x, dims, keepdim)", [In(dt, [2, 3], values=[1] * 5 + [0])],
             lambda x: torch.all(x, dim=1), {"dims": [1], "keepdim": False}, tag="one zero")
    case("any", "kiln::any(x, dims, keepdim)", [In("float32", [3], values=[math.nan, 0.0, 0.0])],
         torch.any, {"dims": [], "keepdim": False}, tag="nan is true")
    case("all", "kiln::all(x, dims, keepdim)", [In("float32", [3], values=[math.nan, -0.0, 1.0])],
         torch.all, {"dims": [], "keepdim": False}, tag="negative zero is false")
    case("nansum", "kiln::nansum(x, dims, keepdim)", [In("float32", [4], values=[math.nan] * 4)],
         torch.nansum, {"dims": [], "keepdim": False}, tag="all nan")
    case("prod", "kiln::prod(x, dims, keepdim)", [In("int8", [4], values=[100, 3, 2, 1])],
         torch.prod, {"dims": [], "keepdim": False}, tag="int8 overflow (int64 result)")
    case("sum", "kiln::sum(x, dims, keepdim)", [In("uint8", [4], values=[200, 100, 255, 1])],
         torch.sum, {"dims": [], "keepdim": False}, tag="uint8 overflow (int64 result)")
    case("sum", "kiln::sum(x, dims, keepdim)", [In("float32", [4], values=[1e8, 1.0, -1e8, 1.0])],
         torch.sum, {"dims": [], "keepdim": False}, tag="cancellation", tol={"atol": 2.0})

    # Large logical inputs from a small storage: an overlapping window view (sizes [256, 300],
    # strides [1, 1]: row i is storage[i:i+300]). 76800 elements take kiln's parallel and
    # pairwise reduction paths; PyTorch reads overlapping views as-is. Float values are multiples
    # of 1/256, so sums are exact whatever the accumulation order.
    def window(dt, lo=-3, hi=3, distinct=False):
        return In(dt, [256, 300], strides=[1, 1], offset=0, lo=lo, hi=hi, distinct=distinct,
                  quant=None if distinct else 256)
    big = [("sum", lambda x, d: torch.sum(x, d)), ("mean", lambda x, d: torch.mean(x, d)),
           ("amax", lambda x, d: torch.amax(x, d)), ("nansum", lambda x, d: torch.nansum(x, d)),
           ("logsumexp", lambda x, d: torch.logsumexp(x, d)),
           ("norm", lambda x, d: torch.linalg.vector_norm(x, 2.0, d)),
           ("var", lambda x, d: torch.var(x, d, correction=1)), ("std", lambda x, d: torch.std(x, d, correction=0))]
    for op, tf in big:
        call = {"norm": "kiln::norm(x, p, dims, keepdim)", "var": "kiln::var(x, dims, correction, keepdim)",
                "std": "kiln::std(x, dims, correction, keepdim)"}.get(op, "kiln::%s(x, dims, keepdim)" % op)
        for dims in ([1], [0], [0, 1]) if op in ("sum", "nansum") else ([1], [0, 1]):
            attrs = {"dims": dims, "keepdim": False}
            if op == "norm":
                attrs = {"p": 2.0, "dims": dims, "keepdim": False}
            if op in ("var", "std"):
                attrs = {"dims": dims, "correction": 1 if op == "var" else 0, "keepdim": False}
            dts = ["float32"] + (["int32", "bfloat16"] if op == "sum" and dims == [1] else []) + \
                (["float64"] if op == "var" and dims == [1] else [])
            for dt in dts:
                case(op, call, [window(dt, lo=None if dt in INTS else -3, hi=None if dt in INTS else 3)],
                     lambda x, d=dims, tf=tf: tf(x, d), attrs, tag="large overlapping view")
    for op, tf in [("argmax", torch.argmax), ("max", torch.max)]:
        ct = "kiln::argmax(x, dim, keepdim)" if op == "argmax" else "kiln::max(x, dim, keepdim) -> (values, indices)"
        case(op, ct, [window("float32", distinct=True)], lambda x, tf=tf: tf(x, 1), {"dim": 1, "keepdim": False},
             tag="large overlapping view")
    case("cumsum", "kiln::cumsum(x, dim)", [In("float64", [3, 4000], strides=[1, 0], offset=0)],
         lambda x: torch.cumsum(x, 1), {"dim": 1}, tag="long expanded row")

    # logsumexp (dims required)
    ct = "kiln::logsumexp(x, dims, keepdim)"
    for dt in ALL:
        case("logsumexp", ct, [In(dt, [2, 3], lo=-5, hi=5)], lambda x: torch.logsumexp(x, [1]),
             {"dims": [1], "keepdim": False})
    for sizes, dims, kd, lay in [([2, 3, 4], [0, 2], True, "c"), ([2, 3, 4], [-1], False, "rev"),
                                 ([3, 4], [0], False, "t"), ([], [0], False, "c"), ([0, 3], [0], False, "c"),
                                 ([0, 3], [1], True, "c"), ([40, 3], [0], False, "c")]:
        case("logsumexp", ct, [In("float32", sizes, lay)], lambda x, d=dims, k=kd: torch.logsumexp(x, d, k),
             {"dims": dims, "keepdim": kd})
    case("logsumexp", ct, [In("float32", [3, 3], values=[-math.inf] * 3 + [math.inf, 1.0, 2.0] + [math.nan, 1.0, 1.0])],
         lambda x: torch.logsumexp(x, [1]), {"dims": [1], "keepdim": False}, tag="infinities")
    case("logsumexp", ct, [In("float64", [3], values=[1000.0, 1000.0, -1000.0])],
         lambda x: torch.logsumexp(x, [0]), {"dims": [0], "keepdim": False}, tag="large values")

    # norm (= torch.linalg.vector_norm over dims)
    ct = "kiln::norm(x, p, dims, keepdim)"
    for p in [1.0, 2.0, math.inf, -math.inf, 3.0, 0.0, 0.5]:
        def f(dims, kd, p=p):
            return lambda x: torch.linalg.vector_norm(x, ord=p, dim=dims_arg(dims), keepdim=kd)
        dts = ALL if p in (1.0, 2.0, math.inf) else ["float32", "float64"]
        for dt in dts:
            case("norm", ct, [In(dt, [2, 3])], f([], False), {"p": p, "dims": [], "keepdim": False})
        for dt, sizes, dims, kd, lay in [("float32", [2, 3, 4], [0, 2], True, "c"), ("float64", [3, 4], [1], False, "t"),
                                         ("float32", [4, 3], [0], False, "e"), ("float32", [], [], False, "c"),
                                         ("float64", [9], [0], False, "c")]:
            case("norm", ct, [In(dt, sizes, lay, specials=(sizes == [9]))], f(dims, kd),
                 {"p": p, "dims": dims, "keepdim": kd})
        if p in (2.0, math.inf):
            case("norm", ct, [In("float32", [0, 3])], f([0], False), {"p": p, "dims": [0], "keepdim": False},
                 tag="empty")
            for dt in ["bfloat16", "float16"]:
                case("norm", ct, [In(dt, [3, 4])], f([1], False), {"p": p, "dims": [1], "keepdim": False})

    # var / std
    for op, tf in [("var", torch.var), ("std", torch.std)]:
        ct = "kiln::%s(x, dims, correction, keepdim)" % op
        for corr in [0, 1, 2]:
            def f(dims, kd, c=corr, tf=tf):
                return lambda x: tf(x, dim=dims_arg(dims), correction=c, keepdim=kd)
            for dt in (ALL if corr == 1 else ["float32", "float64"]):
                case(op, ct, [In(dt, [2, 3])], f([], False), {"dims": [], "correction": corr, "keepdim": False})
            for dt, sizes, dims, kd, lay in [("float32", [2, 3, 4], [0, 2], True, "c"),
                                             ("float64", [3, 4], [1], False, "t"),
                                             ("float32", [4, 3], [0], False, "e"),
                                             ("float32", [3, 1], [1], False, "c"),
                                             ("float64", [3, 5], [-1], True, "s"),
                                             ("float32", [], [], False, "c"),
                                             ("float64", [4, 3], [0], False, "c")]:
                case(op, ct, [In(dt, sizes, lay)], f(dims, kd), {"dims": dims, "correction": corr, "keepdim": kd})
            if corr == 1:
                case(op, ct, [In("float32", [5], values=[1e4 + 0.1, 1e4 + 0.2, 1e4 + 0.3, 1e4 + 0.4, 1e4 + 0.5])],
                     f([], False), {"dims": [], "correction": 1, "keepdim": False}, tag="offset data")
                case(op, ct, [In("float32", [4], specials=True)], f([], False),
                     {"dims": [], "correction": 1, "keepdim": False}, tag="specials")
                for dt in ["bfloat16", "float16"]:
                    case(op, ct, [In(dt, [3, 4])], f([1], False), {"dims": [1], "correction": 1, "keepdim": False})

    # max/min over all, and along a dim with indices; argmax/argmin
    for op, tf in [("max", torch.max), ("min", torch.min)]:
        ct_all = "kiln::%s(x)" % op
        for dt in ALL:
            case(op, ct_all, [In(dt, [2, 3])], tf, tag="all")
        case(op, ct_all, [In("float32", [5], values=[1.0, math.nan, 3.0, -math.inf, math.inf])], tf, tag="all nan")
        case(op, ct_all, [In("float32", [0, 3])], tf, tag="all empty")
        case(op, ct_all, [In("int64", [])], tf, tag="all 0-d")
        case(op, ct_all, [In("float32", [3, 4], "t")], tf, tag="all transposed")
        ct = "kiln::%s(x, dim, keepdim) -> (values, indices)" % op
        for dt in ALL:
            x = In(dt, [3, 4], distinct=dt not in ("bool",), lo=None if dt not in INTS else -50, hi=None if dt not in INTS else 50)
            case(op, ct, [x], lambda x, tf=tf: tf(x, 1), {"dim": 1, "keepdim": False})
        for dt, sizes, d, kd, lay in [("float32", [2, 3, 4], 0, True, "c"), ("float64", [3, 4], 0, False, "t"),
                                      ("int32", [2, 3, 4], -1, False, "rev"), ("float32", [], 0, False, "c"),
                                      ("float32", [], -1, True, "c"), ("float32", [4, 3], 1, False, "e"),
                                      ("float32", [0, 3], 1, False, "c"), ("float32", [0, 3], 0, False, "c"),
                                      ("float32", [3, 4], 2, False, "c")]:
            case(op, ct, [In(dt, sizes, lay, distinct=(lay != "e"))], lambda x, d=d, k=kd, tf=tf: tf(x, d, k),
                 {"dim": d, "keepdim": kd})
        case(op, ct, [In("float32", [2, 4], values=[1.0, math.nan, 3.0, math.nan, 2.0, 2.0, -1.0, 2.0])],
             lambda x, tf=tf: tf(x, 1), {"dim": 1, "keepdim": False}, tag="nan and ties")
        case(op, ct, [In("int32", [2, 4], values=[3, 1, 3, 1, 5, 5, 5, 5])],
             lambda x, tf=tf: tf(x, 1), {"dim": 1, "keepdim": False}, tag="ties")
        case(op, ct, [In("float32", [6, 70], distinct=True)], lambda x, tf=tf: tf(x, 1),
             {"dim": 1, "keepdim": False}, tag="long rows")
    for op, tf in [("argmax", torch.argmax), ("argmin", torch.argmin)]:
        ct = "kiln::%s(x, dim, keepdim)" % op
        for dt in ALL:
            x = In(dt, [3, 4], distinct=dt != "bool", lo=None if dt not in INTS else -50, hi=None if dt not in INTS else 50)
            case(op, ct, [x], lambda x, tf=tf: tf(x), {"dim": None, "keepdim": False})
            case(op, ct, [x], lambda x, tf=tf: tf(x, 0), {"dim": 0, "keepdim": False})
        for sizes, d, kd, lay in [([2, 3, 4], 1, True, "c"), ([2, 3, 4], None, True, "c"), ([3, 4], 1, False, "t"),
                                  ([], None, False, "c"), ([], 0, False, "c"), ([0, 3], None, False, "c"),
                                  ([0, 3], 1, False, "c"), ([2, 3, 4], -1, False, "rev")]:
            case(op, ct, [In("float32", sizes, lay, distinct=True)], lambda x, d=d, k=kd, tf=tf: tf(x, d, k),
                 {"dim": d, "keepdim": kd})
        case(op, ct, [In("float32", [2, 4], values=[1.0, math.nan, 3.0, math.nan, 2.0, 2.0, -1.0, 2.0])],
             lambda x, tf=tf: tf(x, 1), {"dim": 1, "keepdim": False}, tag="nan and ties")
        case(op, ct, [In("int64", [6], values=[2, 7, 7, -3, -3, 1])], lambda x, tf=tf: tf(x),
             {"dim": None, "keepdim": False}, tag="ties")

    # softmax / log_softmax
    for op, tf in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]:
        ct = "kiln::%s(x, dim)" % op
        for dt in ALL:
            case(op, ct, [In(dt, [2, 3])], lambda x, tf=tf: tf(x, 1), {"dim": 1})
        for dt, sizes, d, lay in [("float32", [2, 3, 4], 0, "c"), ("float32", [2, 3, 4], 1, "rev"),
                                  ("float64", [3, 4], -1, "t"), ("float32", [3, 5], 1, "s"), ("float32", [4, 3], 0, "e"),
                                  ("float32", [], 0, "c"), ("float32", [0, 3], 1, "c"), ("float32", [3, 40], 1, "c"),
                                  ("float32", [3, 4], 2, "c"), ("bfloat16", [3, 4], 1, "c"), ("float64", [2, 17], 1, "c")]:
            case(op, ct, [In(dt, sizes, lay, lo=-10, hi=10)], lambda x, d=d, tf=tf: tf(x, d), {"dim": d})
        case(op, ct, [In("float32", [4, 3], values=[-math.inf] * 3 + [math.inf, 1.0, 2.0] + [math.nan, 1.0, 1.0]
                         + [-math.inf, 0.0, 1.0])], lambda x, tf=tf: tf(x, 1), {"dim": 1}, tag="infinities")
        case(op, ct, [In("float64", [3], values=[1000.0, 1000.0, -1000.0])], lambda x, tf=tf: tf(x, 0), {"dim": 0},
             tag="large values")

    # cumsum
    ct = "kiln::cumsum(x, dim)"
    for dt in ALL:
        case("cumsum", ct, [In(dt, [2, 3])], lambda x: torch.cumsum(x, 1), {"dim": 1})
    for dt, sizes, d, lay in [("float32", [2, 3, 4], 0, "c"), ("float32", [2, 3, 4], 1, "rev"), ("float64", [3, 4], -1, "t"),
                              ("int32", [3, 5], 1, "s"), ("float32", [4, 3], 0, "e"), ("float32", [], 0, "c"),
                              ("int64", [], -1, "c"), ("float32", [0, 3], 1, "c"), ("float32", [3, 4], 2, "c"),
                              ("float32", [50], 0, "c"), ("uint8", [2, 6], 1, "c"), ("float32", [7], 0, "c")]:
        case("cumsum", ct, [In(dt, sizes, lay, specials=(sizes == [7]))], lambda x, d=d: torch.cumsum(x, d), {"dim": d})


# ---------------------------------------------------------------- linear algebra

def gen_linalg():
    ct = "kiln::matmul(a, b)"
    shapes = [([4], [4], "1-D . 1-D"), ([3, 4], [4], "2-D . 1-D"), ([4], [4, 5], "1-D . 2-D"),
              ([3, 4], [4, 5], "2-D . 2-D"), ([2, 3, 4], [4, 5], "batched . 2-D"), ([2, 3, 4], [2, 4, 5], "batched"),
              ([2, 1, 3, 4], [3, 4, 2], "batched broadcast"), ([4], [2, 4, 5], "1-D . batched"),
              ([2, 3, 4], [4], "batched . 1-D"), ([3, 4], [2, 4, 5], "2-D . batched"),
              ([1, 3, 4], [2, 1, 4, 5], "batched broadcast 4-D"), ([3, 0], [0, 4], "k = 0"),
              ([0, 3], [3, 2], "n = 0"), ([2, 0, 3], [3, 4], "empty batch rows")]
    for sa, sb, tag in shapes:
        for dt in ["float32", "float64"]:
            case("matmul", ct, [In(dt, sa), In(dt, sb)], torch.matmul, tag=tag)
    for dt in ["int64", "int32", "int8", "uint8", "bfloat16", "float16", "bool", "int16"]:
        case("matmul", ct, [In(dt, [3, 4], lo=-5 if dt != "uint8" else 0, hi=5), In(dt, [4, 2], lo=-5 if dt != "uint8" else 0, hi=5)],
             torch.matmul, tag="dtype")
        case("matmul", ct, [In(dt, [2, 3, 4], lo=-5 if dt != "uint8" else 0, hi=5), In(dt, [4], lo=-5 if dt != "uint8" else 0, hi=5)],
             torch.matmul, tag="dtype batched")
    case("matmul", ct, [In("float32", [4, 3], "t"), In("float32", [3, 5], "s")], torch.matmul, tag="non-contiguous")
    case("matmul", ct, [In("float64", [2, 4, 3], "t"), In("float64", [3, 5], "t")], torch.matmul,
         tag="transposed batched")
    case("matmul", ct, [In("float32", [3, 4], "e1"), In("float32", [4, 2], "e0")], torch.matmul, tag="expanded")
    case("matmul", ct, [In("float32", [40, 33]), In("float32", [33, 20])], torch.matmul, tag="larger")
    case("matmul", ct, [In("float32", [3, 4]), In("float64", [4, 2])], torch.matmul, tag="dtype mismatch")
    case("matmul", ct, [In("float32", [3, 4]), In("float32", [5, 2])], torch.matmul, tag="size mismatch")
    case("matmul", ct, [In("float32", [4]), In("float32", [5])], torch.matmul, tag="size mismatch 1-D")
    case("matmul", ct, [In("float32", []), In("float32", [3])], torch.matmul, tag="0-d")
    case("matmul", ct, [In("float32", [2, 3, 4]), In("float32", [3, 4, 5])], torch.matmul, tag="batch mismatch")

    ct = "kiln::mm(a, b)"
    for dt in ["float32", "float64", "int64", "int32", "bfloat16", "bool"]:
        case("mm", ct, [In(dt, [3, 4], lo=-5, hi=5), In(dt, [4, 2], lo=-5, hi=5)], torch.mm)
    case("mm", ct, [In("float32", [4, 3], "t"), In("float32", [2, 4], "t")], torch.mm, tag="transposed")
    case("mm", ct, [In("float64", [3, 5], "s"), In("float64", [5, 3], "s")], torch.mm, tag="sliced")
    case("mm", ct, [In("float32", [3, 0]), In("float32", [0, 2])], torch.mm, tag="k = 0")
    case("mm", ct, [In("float32", [3, 4]), In("float32", [4])], torch.mm, tag="1-D error")
    case("mm", ct, [In("float32", [3, 4]), In("float32", [3, 4])], torch.mm, tag="size mismatch")
    case("mm", ct, [In("int32", [3, 4]), In("int64", [4, 2])], torch.mm, tag="dtype mismatch")
    case("mm", ct, [In("float32", [1, 4], specials=True), In("float32", [4, 3])], torch.mm, tag="specials")

    ct = "kiln::bmm(a, b)"
    for dt in ["float32", "float64", "int64", "bfloat16"]:
        case("bmm", ct, [In(dt, [2, 3, 4], lo=-5, hi=5), In(dt, [2, 4, 5], lo=-5, hi=5)], torch.bmm)
    case("bmm", ct, [In("float32", [2, 4, 3], "t"), In("float32", [2, 4, 5], "rev")], torch.bmm, tag="non-contiguous")
    case("bmm", ct, [In("float32", [3, 2, 4], "e0"), In("float32", [3, 4, 1])], torch.bmm, tag="expanded batch")
    case("bmm", ct, [In("float32", [0, 2, 3]), In("float32", [0, 3, 4])], torch.bmm, tag="empty batch")
    case("bmm", ct, [In("float32", [2, 3, 4]), In("float32", [3, 4, 5])], torch.bmm, tag="batch mismatch")
    case("bmm", ct, [In("float32", [3, 4]), In("float32", [4, 5])], torch.bmm, tag="2-D error")
    case("bmm", ct, [In("float32", [2, 3, 4]), In("float32", [2, 5, 4])], torch.bmm, tag="size mismatch")

    ct = "kiln::addmm(self, a, b, beta, alpha)"
    for dt, beta, alpha, ss in [("float32", 1, 1, [3, 2]), ("float64", 0.5, 2.0, [3, 2]), ("float32", 1, 1, [2]),
                                ("float32", -1.0, 0.5, [3, 1]), ("int64", 2, 3, [3, 2]), ("int32", 1, 1, []),
                                ("bfloat16", 1, 1, [3, 2]), ("float32", 0, 1, [3, 2]), ("float64", 1, 0, [2])]:
        case("addmm", ct, [In(dt, ss, lo=-5, hi=5, specials=(beta == 0)), In(dt, [3, 4], lo=-5, hi=5),
                           In(dt, [4, 2], lo=-5, hi=5)],
             lambda s, a, b, be=beta, al=alpha: torch.addmm(s, a, b, beta=be, alpha=al),
             {"beta": Sc(beta), "alpha": Sc(alpha)}, tag="beta=0 ignores nan" if beta == 0 else "")
    case("addmm", ct, [In("float32", [3, 2], "t"), In("float32", [3, 4], "t"), In("float32", [4, 2], "s")],
         lambda s, a, b: torch.addmm(s, a, b), {"beta": Sc(1), "alpha": Sc(1)}, tag="non-contiguous")
    case("addmm", ct, [In("float32", [4]), In("float32", [3, 4]), In("float32", [4, 2])],
         lambda s, a, b: torch.addmm(s, a, b), {"beta": Sc(1), "alpha": Sc(1)}, tag="self shape error")
    case("addmm", ct, [In("float64", [3, 2]), In("float32", [3, 4]), In("float32", [4, 2])],
         lambda s, a, b: torch.addmm(s, a, b), {"beta": Sc(1), "alpha": Sc(1)}, tag="self dtype mismatch")
    case("addmm", ct, [In("float32", [3, 2]), In("float32", [3, 0]), In("float32", [0, 2])],
         lambda s, a, b: torch.addmm(s, a, b, beta=2), {"beta": Sc(2), "alpha": Sc(1)}, tag="k = 0")

    ct = "kiln::einsum(equation, operands)"
    eqs = [("ij,jk->ik", [[3, 4], [4, 5]]), ("ij,jk", [[3, 4], [4, 2]]), ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
           ("i,i->", [[5], [5]]), ("i,i", [[5], [5]]), ("i,j->ij", [[3], [4]]), ("ii->i", [[4, 4]]), ("ii", [[4, 4]]),
           ("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]]), ("...ij->...ji", [[2, 3, 4]]), ("ij->", [[3, 4]]),
           ("ijk->kji", [[2, 3, 4]]), ("ij,ij->ij", [[3, 4], [3, 4]]), ("ij,kj->ik", [[3, 4], [5, 4]]),
           ("ji", [[3, 4]]), ("bn,anm,bm->ba", [[2, 3], [4, 3, 5], [2, 5]]), ("iij->ij", [[3, 3, 2]]),
           ("ij,j->i", [[3, 4], [4]]), ("ij", [[3, 4]]), ("i...->...", [[3, 2, 4]]),
           ("...i,...i->...", [[2, 3, 4], [3, 4]]), ("ab,cd->abcd", [[2, 3], [2, 2]]), ("bij,jk->bik", [[2, 3, 4], [4, 2]]),
           ("ij, jk -> ik", [[2, 3], [3, 2]]), ("ijj->i", [[2, 3, 3]]), ("i,i,i->i", [[4], [4], [4]]),
           ("iJ,Jk->ik", [[2, 3], [3, 2]])]
    for eq, shapes_ in eqs:
        case("einsum", ct, [In("float32", s) for s in shapes_], lambda *ts, e=eq: torch.einsum(e, *ts),
             {"equation": eq})
    for eq, shapes_ in [("ij,jk->ik", [[3, 4], [4, 5]]), ("ii->i", [[3, 3]]), ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]])]:
        for dt in ["float64", "int64", "bfloat16"]:
            case("einsum", ct, [In(dt, s, lo=-5, hi=5) for s in shapes_], lambda *ts, e=eq: torch.einsum(e, *ts),
                 {"equation": eq}, tag="dtype")
    case("einsum", ct, [In("float32", [4, 3], "t"), In("float32", [3, 5], "s")],
         lambda *ts: torch.einsum("ij,jk->ik", *ts), {"equation": "ij,jk->ik"}, tag="non-contiguous")
    case("einsum", ct, [In("float32", [3, 1]), In("float32", [1, 4])],
         lambda *ts: torch.einsum("ij,jk->ik", *ts), {"equation": "ij,jk->ik"}, tag="size-1 contraction")
    case("einsum", ct, [In("float32", [2, 3]), In("float32", [1, 3])],
         lambda *ts: torch.einsum("ij,ij->ij", *ts), {"equation": "ij,ij->ij"}, tag="broadcast size-1")
    for eq, shapes_, tag in [("ij,jk->ik", [[3, 4], [5, 2]], "size mismatch"), ("ij->ik", [[3, 4]], "unknown output label"),
                             ("ij,jk->ik", [[3, 4]], "operand count"), ("ijk->ij", [[3, 4]], "rank mismatch"),
                             ("ii->i", [[3, 4]], "diagonal size mismatch"), ("ij->ii", [[3, 3]], "repeated output label")]:
        case("einsum", ct, [In("float32", s) for s in shapes_], lambda *ts, e=eq: torch.einsum(e, *ts),
             {"equation": eq}, tag=tag)
    case("einsum", ct, [In("float32", [3, 4]), In("float64", [4, 5])],
         lambda *ts: torch.einsum("ij,jk->ik", *ts), {"equation": "ij,jk->ik"}, tag="dtype mismatch")


# ---------------------------------------------------------------- joining and indexing

def gen_join():
    ct = "kiln::cat(tensors, dim)"
    for dt in ALL:
        case("cat", ct, [[In(dt, [2, 3]), In(dt, [1, 3])]], lambda ts: torch.cat(ts, 0), {"dim": 0})
    for ts, d, tag in [([In("float32", [2, 3]), In("float32", [2, 1]), In("float32", [2, 2])], 1, ""),
                       ([In("float32", [2, 3]), In("float32", [2, 4])], -1, "negative dim"),
                       ([In("float32", [3, 2], "t"), In("float32", [3, 2], "s")], 0, "non-contiguous"),
                       ([In("float32", [4, 3], "e"), In("float32", [1, 3])], 0, "expanded"),
                       ([In("int32", [2, 3]), In("float32", [2, 3])], 0, "promotion"),
                       ([In("uint8", [2]), In("int8", [2]), In("bool", [1])], 0, "promotion"),
                       ([In("float16", [2]), In("bfloat16", [2])], 0, "promotion"),
                       ([In("float32", [2, 3]), In("float32", [0])], 0, "legacy empty"),
                       ([In("float32", [0]), In("float32", [2, 3])], 1, "legacy empty first"),
                       ([In("float32", [0, 3]), In("float32", [2, 3])], 0, "empty"),
                       ([In("float64", [2, 3, 4]), In("float64", [2, 1, 4], "s")], 1, ""),
                       ([In("float32", [3])], 0, "single"),
                       ([In("float32", [2, 3]), In("float32", [2, 4])], 0, "size mismatch"),
                       ([In("float32", [2, 3]), In("float32", [3])], 0, "rank mismatch"),
                       ([In("float32", []), In("float32", [])], 0, "0-d"),
                       ([In("float32", [2, 3])], 2, "dim out of range")]:
        case("cat", ct, [ts], lambda ts, d=d: torch.cat(ts, d), {"dim": d}, tag=tag)
    ct = "kiln::stack(tensors, dim)"
    for dt in ALL:
        case("stack", ct, [[In(dt, [2, 3]), In(dt, [2, 3])]], lambda ts: torch.stack(ts, 0), {"dim": 0})
    for ts, d, tag in [([In("float32", [2, 3]), In("float32", [2, 3], "s"), In("float32", [2, 3], "e")], 1, ""),
                       ([In("float32", [2, 3]), In("float32", [2, 3])], 2, "last"),
                       ([In("float32", [2, 3]), In("float32", [2, 3])], -1, "negative"),
                       ([In("float32", [3, 2], "t"), In("float32", [3, 2])], -3, "negative first"),
                       ([In("int64", []), In("int64", [])], 0, "0-d"),
                       ([In("int32", [2]), In("float64", [2])], 0, "promotion"),
                       ([In("float32", [0, 2]), In("float32", [0, 2])], 1, "empty"),
                       ([In("float32", [2, 3]), In("float32", [3, 2])], 0, "size mismatch"),
                       ([In("float32", [2, 3])], 3, "dim out of range")]:
        case("stack", ct, [ts], lambda ts, d=d: torch.stack(ts, d), {"dim": d}, tag=tag)

    ct = "kiln::split(x, split_size, dim)"
    for sizes, ss, d, lay in [([5, 3], 2, 0, "c"), ([4, 6], 3, 1, "c"), ([4, 6], 4, -1, "t"), ([3, 5], 5, 1, "s"),
                              ([3, 5], 10, 1, "c"), ([0, 3], 2, 0, "c"), ([6], 1, 0, "c"), ([2, 3], 0, 1, "c"),
                              ([], 1, 0, "c"), ([2, 3], 1, 2, "c")]:
        case("split", ct, [In("float32", sizes, lay)], lambda x, s=ss, d=d: torch.split(x, s, d),
             {"split_size": ss, "dim": d}, kind="view")
    case("split", ct, [In("int16", [7])], lambda x: torch.split(x, 3, 0), {"split_size": 3, "dim": 0}, kind="view")
    ct = "kiln::chunk(x, chunks, dim)"
    for sizes, ch, d, lay in [([6, 2], 3, 0, "c"), ([5, 2], 3, 0, "c"), ([6, 2], 4, 0, "c"), ([2, 3], 5, 1, "t"),
                              ([3, 7], 2, -1, "s"), ([0, 3], 2, 0, "c"), ([4], 1, 0, "c"), ([4], 0, 0, "c"),
                              ([], 2, 0, "c"), ([2, 3], 2, 2, "c")]:
        case("chunk", ct, [In("float64", sizes, lay)], lambda x, c=ch, d=d: torch.chunk(x, c, d),
             {"chunks": ch, "dim": d}, kind="view")
    case("chunk", ct, [In("bool", [5])], lambda x: torch.chunk(x, 2, 0), {"chunks": 2, "dim": 0}, kind="view")

    ct = "kiln::index_select(x, dim, index)"
    for dt in ALL:
        case("index_select", ct, [In(dt, [3, 4]), In("int64", [3], values=[2, 0, 2])],
             lambda x, i: torch.index_select(x, 0, i), {"dim": 0})
    for x, d, idx, tag in [(In("float32", [3, 4]), 1, In("int64", [5], values=[3, 0, 1, 1, 2]), ""),
                           (In("float32", [3, 4], "t"), -1, In("int32", [2], values=[1, 3]), "int32 index"),
                           (In("float64", [2, 3, 4], "rev"), 1, In("int64", [2], values=[2, 0]), "permuted"),
                           (In("float32", [3, 4]), 0, In("int64", [0], values=[]), "empty index"),
                           (In("float32", [3, 4]), 0, In("int64", [], values=1), "0-d index"),
                           (In("float32", []), 0, In("int64", [1], values=[0]), "0-d input"),
                           (In("float32", [3, 4]), 0, In("int64", [1], values=[3]), "out of range"),
                           (In("float32", [3, 4]), 0, In("int64", [1], values=[-1]), "negative index"),
                           (In("float32", [3, 4]), 0, In("float32", [1], values=[0.0]), "float index"),
                           (In("float32", [3, 4]), 0, In("int64", [2, 1], values=[0, 1]), "2-D index"),
                           (In("float32", [3, 4]), 2, In("int64", [1], values=[0]), "dim out of range")]:
        case("index_select", ct, [x, idx], lambda x, i, d=d: torch.index_select(x, d, i), {"dim": d}, tag=tag)
    ct = "kiln::gather(x, dim, index)"
    for dt in ALL:
        case("gather", ct, [In(dt, [3, 4]), In("int64", [2, 4], lo=0, hi=2)], lambda x, i: torch.gather(x, 0, i),
             {"dim": 0})
    for x, d, idx, tag in [(In("float32", [3, 4]), 1, In("int64", [3, 2], lo=0, hi=3), ""),
                           (In("float32", [3, 4]), 1, In("int64", [2, 6], lo=0, hi=3), "index longer along dim"),
                           (In("float32", [3, 4], "t"), -1, In("int64", [3, 4], "t", lo=0, hi=3), "transposed"),
                           (In("float64", [2, 3, 4], "rev"), 1, In("int64", [2, 2, 3], lo=0, hi=2), "permuted"),
                           (In("float32", [3, 4]), 0, In("int64", [0, 4], lo=0, hi=2), "empty index"),
                           (In("float32", []), 0, In("int64", [], values=0), "0-d"),
                           (In("float32", [3, 4]), 0, In("int64", [1, 1], values=[3]), "out of range"),
                           (In("float32", [3, 4]), 0, In("int64", [1, 1], values=[-1]), "negative index"),
                           (In("float32", [3, 4]), 0, In("int32", [1, 2], values=[0, 1]), "int32 index"),
                           (In("float32", [3, 4]), 0, In("int64", [4], values=[0, 1, 0, 1]), "rank mismatch"),
                           (In("float32", [3, 4]), 0, In("int64", [2, 5], lo=0, hi=2), "index too large")]:
        case("gather", ct, [x, idx], lambda x, i, d=d: torch.gather(x, d, i), {"dim": d}, tag=tag)


# ---------------------------------------------------------------- in place

def gen_inplace():
    def ip(op, call, self_, other, f, attrs=None, tag=""):
        args = [self_] + ([] if other is None else (other if isinstance(other, list) else [other]))
        case(op, call, args, f, attrs, kind="inplace", tag=tag)

    for op in ["add_", "sub_"]:
        call = "x.%s(other, alpha)" % op
        for sd, od in [("float32", "float32"), ("float64", "int64"), ("int32", "int32"), ("int32", "float32"),
                       ("float16", "float32"), ("bfloat16", "float16"), ("uint8", "int8"), ("bool", "bool"),
                       ("int64", "bool"), ("bool", "int32"), ("int8", "int64"), ("float32", "float64")]:
            ip(op, call, In(sd, [2, 3]), In(od, [2, 3]), lambda x, y, op=op: getattr(x, op)(y), {"alpha": Sc(1)})
        for sd, s in [("int32", 3), ("int32", 2.5), ("float16", 0.1), ("bool", True), ("uint8", -1), ("int16", True)]:
            ip(op, call, In(sd, [2, 3]), Sc(s), lambda x, y, op=op: getattr(x, op)(y), {"alpha": Sc(1)}, "scalar")
        for sd, alpha in [("float32", 0.5), ("int32", 2), ("int32", 1.5)]:
            ip(op, call, In(sd, [2, 3]), In(sd, [3]), lambda x, y, op=op, a=alpha: getattr(x, op)(y, alpha=a),
               {"alpha": Sc(alpha)}, "alpha")
        ip(op, call, In("float32", [3, 4], "t"), In("float32", [4]), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "transposed self")
        ip(op, call, In("float64", [3, 4], "s"), In("float64", [3, 4], "t"), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "sliced self")
        ip(op, call, In("int32", [2, 3, 4], "rev"), In("int32", [3, 1]), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "permuted self")
        ip(op, call, In("float32", [4, 3], "e"), In("float32", [4, 3]), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "expanded self")
        ip(op, call, In("float32", [3]), In("float32", [2, 3]), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "broadcast would grow self")
        ip(op, call, In("float32", []), In("float32", []), lambda x, y, op=op: getattr(x, op)(y), {"alpha": Sc(1)},
           "0-d")
        ip(op, call, In("float32", [0, 3]), In("float32", [3]), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "empty")
        ip(op, call, In("int64", [2, 3]), In("float32", []), lambda x, y, op=op: getattr(x, op)(y),
           {"alpha": Sc(1)}, "0-d float into int")
    call = "x.mul_(other)"
    for sd, od in [("float32", "float32"), ("int32", "int32"), ("int32", "float32"), ("bool", "bool"), ("uint8", "int8"),
                   ("float16", "float64"), ("bfloat16", "bfloat16"), ("int16", "bool")]:
        ip("mul_", call, In(sd, [2, 3]), In(od, [2, 3]), lambda x, y: x.mul_(y))
    for sd, s in [("int32", 3), ("int32", 2.5), ("float32", True), ("bool", 2), ("bool", False), ("int8", -1)]:
        ip("mul_", call, In(sd, [2, 3]), Sc(s), lambda x, y: x.mul_(y), tag="scalar")
    ip("mul_", call, In("float32", [3, 4], "t"), In("float32", [3, 1]), lambda x, y: x.mul_(y), tag="transposed self")
    ip("mul_", call, In("float32", [3, 4], "s"), Sc(2.0), lambda x, y: x.mul_(y), tag="sliced self")
    ip("mul_", call, In("float32", [4, 3], "e"), Sc(2.0), lambda x, y: x.mul_(y), tag="expanded self")
    ip("mul_", call, In("float32", [1, 3]), In("float32", [2, 3]), lambda x, y: x.mul_(y), tag="broadcast would grow self")
    call = "x.div_(other, rounding_mode)"
    for mode in [None, "trunc", "floor"]:
        for sd, od in [("float32", "float32"), ("float64", "int32"), ("int32", "int32"), ("int64", "float32"),
                       ("bfloat16", "float32"), ("uint8", "uint8")]:
            ip("div_", call, In(sd, [2, 3]), In(od, [2, 3], lo=1, hi=9) if od in INTS else In(od, [2, 3]),
               lambda x, y, m=mode: x.div_(y, rounding_mode=m), {"rounding_mode": mode})
        ip("div_", call, In("int32", [2, 3]), Sc(2), lambda x, y, m=mode: x.div_(y, rounding_mode=m),
           {"rounding_mode": mode}, "scalar")
        ip("div_", call, In("float32", [3, 4], "t"), Sc(-1.5), lambda x, y, m=mode: x.div_(y, rounding_mode=m),
           {"rounding_mode": mode}, "transposed self")
        ip("div_", call, In("int32", [3], values=[1, 2, 3]), In("int32", [3], values=[1, 0, 1]),
           lambda x, y, m=mode: x.div_(y, rounding_mode=m), {"rounding_mode": mode}, "zero divisor")
    call = "kiln::relu_(x)"
    for dt in ALL:
        ip("relu_", call, In(dt, [2, 3], specials=True), None, lambda x: torch.relu_(x))
    ip("relu_", call, In("float32", [3, 4], "t"), None, lambda x: torch.relu_(x), tag="transposed")
    ip("relu_", call, In("float64", [3, 4], "s"), None, lambda x: torch.relu_(x), tag="sliced")
    ip("relu_", call, In("float32", [4, 3], "e"), None, lambda x: torch.relu_(x), tag="expanded")
    ip("relu_", call, In("float32", []), None, lambda x: torch.relu_(x), tag="0-d")
    call = "kiln::clamp_(x, min, max)"
    for dt in ALL:
        ip("clamp_", call, In(dt, [2, 4]), [Sc(-1 if dt != "uint8" else 5), Sc(1 if dt != "uint8" else 200)],
           lambda x, lo, hi: x.clamp_(lo, hi))
    for dt, lo_, hi_ in [("float32", -0.5, None), ("float32", None, 0.5), ("int32", 0.5, None), ("int32", -2, 2),
                         ("float16", -0.5, 0.5), ("float32", 1.0, -1.0), ("int8", True, None)]:
        ip("clamp_", call, In(dt, [2, 4]), [None if lo_ is None else Sc(lo_), None if hi_ is None else Sc(hi_)],
           lambda x, lo, hi: x.clamp_(lo, hi), tag="bounds")
    ip("clamp_", call, In("float32", [3, 4], "t"), [Sc(-1.0), Sc(1.0)], lambda x, lo, hi: x.clamp_(lo, hi),
       tag="transposed")
    ip("clamp_", call, In("float32", [9], specials=True), [Sc(-1.0), Sc(1.0)], lambda x, lo, hi: x.clamp_(lo, hi),
       tag="specials")
    ip("clamp_", call, In("float32", [4, 3], "e"), [Sc(-1.0), Sc(1.0)], lambda x, lo, hi: x.clamp_(lo, hi),
       tag="expanded")
    call = "x.fill_(value)"
    for dt in ALL:
        for v in [2, -2.7, True, 0.5]:
            ip("fill_", call, In(dt, [2, 3]), Sc(v), lambda x, v: x.fill_(v))
    for dt, v in [("float16", 1e5), ("float32", math.nan), ("float64", -math.inf), ("bfloat16", 1.0 / 3),
                  ("int64", 2 ** 40), ("uint8", 300), ("int8", -129), ("float32", 1e-50)]:
        ip("fill_", call, In(dt, [3]), Sc(v), lambda x, v: x.fill_(v), tag="value edge")
    ip("fill_", call, In("float32", [3, 4], "t"), Sc(1.5), lambda x, v: x.fill_(v), tag="transposed")
    ip("fill_", call, In("int32", [3, 4], "s"), Sc(7), lambda x, v: x.fill_(v), tag="sliced")
    ip("fill_", call, In("float32", [4, 3], "e"), Sc(7), lambda x, v: x.fill_(v), tag="expanded")
    ip("fill_", call, In("float32", [0, 3]), Sc(7), lambda x, v: x.fill_(v), tag="empty")
    ip("fill_", call, In("int16", []), Sc(-3), lambda x, v: x.fill_(v), tag="0-d")
    call = "x.zero_()"
    for dt in ALL:
        ip("zero_", call, In(dt, [2, 3], specials=True), None, lambda x: x.zero_())
    ip("zero_", call, In("float32", [3, 4], "t"), None, lambda x: x.zero_(), tag="transposed")
    ip("zero_", call, In("float64", [3, 4], "s"), None, lambda x: x.zero_(), tag="sliced")
    ip("zero_", call, In("float32", [4, 3], "e"), None, lambda x: x.zero_(), tag="expanded")
    call = "x.copy_(src)"
    for dt in ALL:
        for sd in ["float32", "int64", "bool", "bfloat16", "uint8"]:
            lo, hi = (-100.0, 100.0) if is_float(sd) and dt != "uint8" else (None, None)
            if dt in ("uint8", "bool") and is_float(sd):
                lo, hi = 0.0, 100.0  # negative float -> uint8 is undefined behaviour in C++
            if dt in ("uint8", "int8", "int16") and sd == "int64":
                lo, hi = -1000, 1000
            ip("copy_", call, In(dt, [2, 3]), In(sd, [2, 3], lo=lo, hi=hi), lambda x, y: x.copy_(y))
    for sd in ["float32", "float64"]:
        ip("copy_", call, In("int32", [6]), In(sd, [6], values=[2.7, -2.7, 0.5, -0.5, 1e6 + 0.5, -0.0]),
           lambda x, y: x.copy_(y), tag="float to int truncates")
        ip("copy_", call, In("bool", [6]), In(sd, [6], values=[0.1, -0.0, 0.0, math.nan, math.inf, -2.0]),
           lambda x, y: x.copy_(y), tag="float to bool")
    ip("copy_", call, In("float16", [6]), In("float64", [6], values=[1e5, 65519.0, 65520.0, 1e-8, 1.0 / 3, -math.inf]),
       lambda x, y: x.copy_(y), tag="float16 rounding and overflow")
    ip("copy_", call, In("bfloat16", [4]), In("float32", [4], values=[1.0 / 3, 3.4e38, math.nan, 1.00390625]),
       lambda x, y: x.copy_(y), tag="bfloat16 rounding")
    ip("copy_", call, In("int8", [4]), In("int64", [4], values=[127, 128, -129, 300]), lambda x, y: x.copy_(y),
       tag="int narrowing wraps")
    ip("copy_", call, In("float32", [3, 4], "t"), In("float32", [4]), lambda x, y: x.copy_(y),
       tag="transposed dst, broadcast src")
    ip("copy_", call, In("float32", [3, 4], "s"), In("float64", [3, 4], "t"), lambda x, y: x.copy_(y),
       tag="sliced dst, transposed src")
    ip("copy_", call, In("int32", [2, 3, 4], "rev"), In("int32", [2, 3, 4]), lambda x, y: x.copy_(y), tag="permuted dst")
    ip("copy_", call, In("float32", [2, 3]), In("float32", []), lambda x, y: x.copy_(y), tag="0-d src")
    ip("copy_", call, In("float32", [3]), In("float32", [2, 3]), lambda x, y: x.copy_(y), tag="src larger")
    ip("copy_", call, In("float32", [2, 3]), In("float32", [2, 2]), lambda x, y: x.copy_(y), tag="shape mismatch")
    ip("copy_", call, In("float32", [4, 3], "e"), In("float32", [4, 3]), lambda x, y: x.copy_(y), tag="expanded dst")
    ip("copy_", call, In("float32", [0, 3]), In("float32", [3]), lambda x, y: x.copy_(y), tag="empty")


# ---------------------------------------------------------------- views

def gen_views():
    def V(op, call, x, f, attrs, tag=""):
        case(op, call, [x], f, attrs, kind="view", tag=tag)

    call = "x.view(shape)"
    for x, shape, tag in [(In("float32", [2, 3, 4]), [6, 4], ""), (In("float32", [2, 3, 4]), [-1], "flatten"),
                          (In("int64", [2, 3, 4]), [4, -1, 2], "infer"), (In("float32", [3, 4], "t"), [12], "transposed error"),
                          (In("float32", [3, 4], "t"), [4, 3], "transposed same shape"),
                          (In("float32", [3, 4], "t"), [2, 2, 3], "transposed split outer"),
                          (In("float32", [3, 4], "s"), [3, 2, 2], "sliced split inner"),
                          (In("float32", [3, 4], "s"), [12], "sliced error"),
                          (In("float32", [4, 3], "e"), [2, 2, 3], "expanded split"),
                          (In("float32", [4, 3], "e"), [12], "expanded error"),
                          (In("float32", [1, 3, 1]), [3], "drop ones"), (In("float32", []), [1, 1], "0-d"),
                          (In("float32", [1]), [], "to 0-d"), (In("float32", [0, 3]), [3, 0, 5], "empty"),
                          (In("float32", [0, 3]), [-1, 3], "empty infer"),
                          (In("float32", [2, 3]), [4, 2], "numel mismatch"), (In("float32", [2, 3]), [-1, -1], "two -1"),
                          (In("bool", [2, 3, 4], "rev"), [2, 3, 4], "permuted identity"),
                          (In("float32", [2, 3, 4], "rev"), [2, 12], "permuted error")]:
        V("view", call, x, lambda t, s=shape: t.view(s), {"shape": shape}, tag)
    call = "x.reshape(shape)"
    for x, shape, tag in [(In("float32", [2, 3, 4]), [6, 4], ""), (In("float32", [3, 4], "t"), [12], "transposed copies"),
                          (In("float32", [3, 4], "t"), [2, 2, 3], "transposed view"),
                          (In("float32", [3, 4], "s"), [12], "sliced copies"), (In("float32", [3, 4], "s"), [3, 2, 2], "sliced view"),
                          (In("int32", [4, 3], "e"), [12], "expanded copies"), (In("float32", []), [-1], "0-d"),
                          (In("float32", [0, 3]), [0, -1], "empty"), (In("float32", [2, 3]), [5], "numel mismatch"),
                          (In("float64", [2, 3, 4], "rev"), [4, 6], "permuted")]:
        V("reshape", call, x, lambda t, s=shape: t.reshape(s), {"shape": shape}, tag)
    call = "x.transpose(dim0, dim1)"
    for x, d0, d1 in [(In("float32", [2, 3]), 0, 1), (In("float32", [2, 3, 4]), 0, 2), (In("float32", [2, 3, 4]), -1, 1),
                      (In("float32", [3, 4], "s"), 1, 0), (In("float32", []), 0, -1), (In("float32", [2, 3]), 1, 1),
                      (In("float32", [2, 3]), 0, 2)]:
        V("transpose", call, x, lambda t, a=d0, b=d1: t.transpose(a, b), {"dim0": d0, "dim1": d1})
    call = "x.permute(dims)"
    for x, dims in [(In("float32", [2, 3, 4]), [2, 0, 1]), (In("int8", [2, 3, 4], "rev"), [1, 2, 0]),
                    (In("float32", [2, 3]), [-1, 0]), (In("float32", []), []), (In("float32", [2, 3]), [0, 0]),
                    (In("float32", [2, 3]), [0]), (In("float32", [2, 3, 4], "s"), [0, 2, 1])]:
        V("permute", call, x, lambda t, d=dims: t.permute(d), {"dims": dims})
    call = "x.narrow(dim, start, length)"
    for x, d, s, n in [(In("float32", [4, 5]), 0, 1, 2), (In("float32", [4, 5]), 1, 2, 3), (In("float32", [4, 5], "t"), -1, 0, 4),
                       (In("float32", [4, 5]), 1, -2, 2), (In("float32", [4, 5]), 0, 4, 0), (In("float32", [4, 5]), 0, 3, 2),
                       (In("float32", [4, 5], "s"), 1, 1, 3), (In("float32", []), 0, 0, 1)]:
        V("narrow", call, x, lambda t, d=d, s=s, n=n: t.narrow(d, s, n), {"dim": d, "start": s, "length": n})
    call = "x.select(dim, index)"
    for x, d, i in [(In("float32", [4, 5]), 0, 1), (In("float32", [4, 5]), 1, -1), (In("float32", [2, 3, 4], "rev"), 1, 2),
                    (In("float32", [4, 5], "s"), 1, 3), (In("float32", [4]), 0, 3), (In("float32", [4, 5]), 0, 4),
                    (In("float32", [4, 5]), 0, -5), (In("float32", []), 0, 0), (In("float32", [4, 3], "e"), 0, 2)]:
        V("select", call, x, lambda t, d=d, i=i: t.select(d, i), {"dim": d, "index": i})
    call = "x.slice(dim, start, end, step)"

    def sl(t, d, s, e, st):
        idx = [slice(None)] * t.dim()
        idx[d] = slice(s, e, st)
        return t[tuple(idx)]
    for x, d, s, e, st in [(In("float32", [6, 5]), 0, 1, 4, 1), (In("float32", [6, 5]), 1, None, None, 2),
                           (In("float32", [6, 5]), 0, -3, None, 1), (In("float32", [6, 5]), 1, 1, -1, 2),
                           (In("float32", [6, 5]), 0, 10, 20, 1), (In("float32", [6, 5]), 0, -100, 100, 3),
                           (In("float32", [6, 5]), 1, 3, 1, 1), (In("float32", [6, 5], "t"), -1, 1, 5, 2),
                           (In("float32", [6, 5], "s"), 1, 0, 5, 2), (In("float32", [6, 5]), 0, 0, 6, 0),
                           (In("float32", [6, 5]), 0, 0, 6, -1), (In("int32", [2, 3, 4], "rev"), 2, 1, 3, 1)]:
        V("slice", call, x, lambda t, d=d, s=s, e=e, st=st: sl(t, d, s, e, st),
          {"dim": d, "start": s, "end": e, "step": st})
    call = "x.expand(sizes)"
    for x, sizes in [(In("float32", [3, 1]), [3, 4]), (In("float32", [3, 1]), [2, 3, 4]), (In("float32", [3, 1]), [-1, 4]),
                     (In("float32", []), [2, 3]), (In("float32", [3]), [2, 3]), (In("float32", [3, 1], "s"), [3, 5]),
                     (In("float32", [3, 1]), [3, 0]), (In("float32", [3, 2]), [3, 4]), (In("float32", [3, 1]), [4]),
                     (In("float32", [3, 1]), [-1, 3, 1]), (In("float32", [1, 1], "t"), [2, 2, 2])]:
        V("expand", call, x, lambda t, s=sizes: t.expand(s), {"sizes": sizes})
    call = "x.squeeze() / x.squeeze(dim)"
    for x, d in [(In("float32", [1, 3, 1]), None), (In("float32", [1, 3, 1]), 0), (In("float32", [1, 3, 1]), -1),
                 (In("float32", [1, 3, 1]), 1), (In("float32", []), None), (In("float32", []), 0),
                 (In("float32", [1, 1]), None), (In("float32", [1, 3]), 2), (In("float32", [3, 1], "s"), 1),
                 (In("float32", [0, 1]), None)]:
        V("squeeze", call, x, (lambda t: t.squeeze()) if d is None else (lambda t, d=d: t.squeeze(d)),
          {} if d is None else {"dim": d})
    call = "x.unsqueeze(dim)"
    for x, d in [(In("float32", [2, 3]), 0), (In("float32", [2, 3]), 1), (In("float32", [2, 3]), 2),
                 (In("float32", [2, 3]), -1), (In("float32", [2, 3]), -3), (In("float32", []), 0),
                 (In("float32", [3, 4], "t"), 1), (In("float32", [3, 4], "s"), 2), (In("float32", [2, 3]), 3),
                 (In("float32", [4, 3], "e"), 1)]:
        V("unsqueeze", call, x, lambda t, d=d: t.unsqueeze(d), {"dim": d})
    call = "x.flatten(start_dim, end_dim)"
    for x, s, e in [(In("float32", [2, 3, 4]), 0, -1), (In("float32", [2, 3, 4]), 1, 2), (In("float32", [2, 3, 4]), 0, 1),
                    (In("float32", [2, 3, 4], "rev"), 0, -1), (In("float32", [2, 3, 4], "rev"), 1, 1),
                    (In("float32", []), 0, -1), (In("float32", [3, 4], "t"), 0, 1), (In("float32", [2, 3, 4]), 2, 1),
                    (In("float32", [2, 3, 4], "s"), 0, 1), (In("float32", [0, 3]), 0, 1)]:
        V("flatten", call, x, lambda t, s=s, e=e: t.flatten(s, e), {"start_dim": s, "end_dim": e})
    call = "x.diagonal(offset, dim1, dim2)"
    for x, o, d1, d2 in [(In("float32", [4, 4]), 0, 0, 1), (In("float32", [4, 5]), 1, 0, 1), (In("float32", [4, 5]), -2, 0, 1),
                         (In("float32", [3, 4, 5]), 0, 1, 2), (In("float32", [3, 4, 5]), 1, 2, 0),
                         (In("float32", [4, 5]), 7, 0, 1), (In("float32", [4, 5]), -9, 0, 1),
                         (In("float32", [4, 4], "t"), 0, 1, 0), (In("float32", [3, 4], "s"), 1, 0, 1),
                         (In("float32", [4]), 0, 0, 1), (In("float32", [4, 4]), 0, 0, 0), (In("float32", [0, 3]), 0, 0, 1)]:
        V("diagonal", call, x, lambda t, o=o, a=d1, b=d2: t.diagonal(o, a, b), {"offset": o, "dim1": d1, "dim2": d2})


# ---------------------------------------------------------------- known divergences

# (predicate over a recorded case, reason). Matching cases keep their expected values but the
# C++ test reports them as skipped with the reason instead of comparing.
def _arg_dtype(c, i):
    a = c["args"][i] if i < len(c["args"]) else None
    return a.get("dtype") if isinstance(a, dict) else None


def _has_nan_scalar(c):
    return any(isinstance(a, dict) and a.get("scalar") == "float" and a.get("value") == "nan" for a in c["args"])


def _writes_through_stride0(c):
    a = c["args"][0]
    return any(st == 0 and sz > 1 for sz, st in zip(a["sizes"], a["strides"]))


KNOWN_DIVERGENCES = [
    (lambda c: c["op"] == "where" and _arg_dtype(c, 0) == "uint8",
     "torch 1.13 still accepts a uint8 condition (deprecated, with a warning); kiln requires bool, "
     "as later PyTorch releases do"),
    (lambda c: c["op"] == "masked_fill" and _arg_dtype(c, 1) == "uint8",
     "torch 1.13 still accepts a uint8 mask (deprecated, with a warning); kiln requires bool, "
     "as later PyTorch releases do"),
    (lambda c: c["op"] in ("clamp", "clamp_") and _has_nan_scalar(c),
     "a NaN scalar bound: torch 1.13's scalar clamp kernel computes std::max(x, nan) = x and ignores it; "
     "kiln propagates the NaN bound, as PyTorch does for tensor bounds (design choice, not changed)"),
    (lambda c: c["op"] == "aminmax" and c["attrs"].get("keepdim") and c["attrs"].get("dim") is not None
     and not c["args"][0]["sizes"],
     "torch 1.13's aminmax of a 0-d tensor along dim 0 with keepdim returns shape [1] (resizing its output, "
     "with a warning); kiln returns 0-d, as amin and amax do and as PyTorch 2.x's aminmax does"),
]


def gen_added():
    """Ops added after the generator's first sections: their cases come last, so that their
    random draws leave every earlier case as it was."""
    inf, nan = math.inf, math.nan
    binary_common("hypot", "kiln::hypot(a, b)", "kiln::hypot(a, b)", torch.hypot, scalars=False)
    case("hypot", "kiln::hypot(a, b)", [In("float64", [8], values=[inf, -inf, nan, nan, 0.0, -0.0, 3e300, 1e-310]),
         In("float64", [8], values=[nan, 1.0, inf, 1.0, -0.0, -0.0, 4e300, 1e-310])], torch.hypot,
         tag="infinities, NaN, zeros, overflow and denormals")
    case("hypot", "kiln::hypot(a, b)", [In("float32", [4], values=[3e38, -2e38, 1e-40, inf]),
         In("float32", [4], values=[3e38, 1e38, -1e-40, nan])], torch.hypot, tag="float32 overflow and denormals")
    binary_common("logaddexp", "kiln::logaddexp(a, b)", "kiln::logaddexp(a, b)", torch.logaddexp, scalars=False,
                  dom_a=(-20, 20), dom_b=(-20, 20))
    case("logaddexp", "kiln::logaddexp(a, b)",
         [In("float64", [9], values=[inf, -inf, inf, -inf, nan, 1.0, 700.0, -800.0, 0.0]),
          In("float64", [9], values=[inf, -inf, -inf, 5.0, 1.0, nan, 700.0, -800.0, -0.0])], torch.logaddexp,
         tag="infinities, NaN, large and equal values")
    case("logaddexp", "kiln::logaddexp(a, b)", [In("float32", [5], values=[inf, -inf, 80.0, -100.0, 1e-30]),
         In("float32", [5], values=[inf, -inf, 90.0, -100.0, -1e-30])], torch.logaddexp, tag="float32 edges")

    # aminmax: (amin, amax) along one dim, or over every element
    ct = "kiln::aminmax(x, dim, keepdim) -> (min, max)"

    def mm(dim, keepdim):
        if dim is None:
            return lambda x: tuple(torch.aminmax(x, keepdim=keepdim))
        return lambda x: tuple(torch.aminmax(x, dim=dim, keepdim=keepdim))
    for dt in ALL:
        case("aminmax", ct, [In(dt, [3, 4])], mm(None, False), {"dim": None, "keepdim": False}, tag="all")
        case("aminmax", ct, [In(dt, [3, 4])], mm(1, False), {"dim": 1, "keepdim": False})
    for dt, sizes, d, kd, lay, tag in [
            ("float32", [2, 3, 4], 0, True, "c", "keepdim"), ("float64", [3, 4], 0, False, "t", "transposed"),
            ("float32", [2, 3, 4], -1, True, "rev", "permuted"), ("int32", [3, 4], None, True, "c", "all keepdim"),
            ("float32", [], None, False, "c", "0-d"), ("int64", [], 0, True, "c", "0-d dim 0"),
            ("float32", [0, 3], 1, False, "c", "empty kept dim"), ("float32", [0, 3], 0, False, "c", "empty dim"),
            ("float32", [0, 3], None, False, "c", "empty all"), ("float32", [2, 3], 2, False, "c", "dim out of range"),
            ("float32", [70, 3], 0, False, "c", "long column"), ("float64", [3, 70], 1, False, "c", "long row"),
            ("float32", [4, 3], 0, False, "e", "expanded"), ("bfloat16", [3, 5], 1, False, "s", "sliced")]:
        case("aminmax", ct, [In(dt, sizes, lay)], mm(d, kd), {"dim": d, "keepdim": kd}, tag=tag)
    for dt in FLOATS:
        case("aminmax", ct, [In(dt, [3, 4], specials=True)], mm(1, False), {"dim": 1, "keepdim": False},
             tag="specials")
    case("aminmax", ct, [In("float32", [5], values=[1.0, nan, 3.0, -inf, inf])], mm(None, False),
         {"dim": None, "keepdim": False}, tag="all nan")


def main():
    gen_unary()
    gen_binary()
    gen_ternary()
    gen_reductions()
    gen_linalg()
    gen_join()
    gen_inplace()
    gen_views()
    gen_added()
    for c in CASES:
        if "known_divergence" in c:
            continue
        for pred, reason in KNOWN_DIVERGENCES:
            if pred(c):
                c["known_divergence"] = reason
                break
    marked = sum(1 for c in CASES if "known_divergence" in c)
    with open(OUT, "w") as f:
        f.write("{\"generator\": \"tests/conformance/generate.py\", \"torch\": \"%s\", \"seed\": %d,\n"
                % (torch.__version__, SEED))
        f.write("\"cases\": [\n")
        f.write(",\n".join(json.dumps(c, separators=(",", ":"), allow_nan=False) for c in CASES))
        f.write("\n]}\n")
    size = os.path.getsize(OUT)
    print("wrote %s: %d cases, %.2f MB, %d errors expected, %d known divergences"
          % (OUT, len(CASES), size / 1e6, sum(1 for c in CASES if "error" in c), marked))
    for op, n in PER_OP.items():
        print("  %-14s %4d%s" % (op, n, ("  (skipped %d: no Half/BFloat16 kernel in torch %s)"
                                        % (SKIPPED[op], torch.__version__)) if SKIPPED[op] else ""))


if __name__ == "__main__":
    sys.exit(main())
