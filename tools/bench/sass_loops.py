#!/usr/bin/env python3
"""Instruction counts of the loops in a CUBIN's disassembly (nvdisasm -c output).

A loop is the code from a label to the branch back to it; the shuffle fallbacks ptxas adds
for divergent warps (BRA.DIV) are left out, and so are spans that hold another loop (ptxas
places those fallbacks after the loops, and their branches back make spans across them). For each loop: its instruction count, its most
frequent opcodes and its global loads and stores by width. A static measure, for comparing
two renderings of one kernel without a GPU (what it backs: docs/perf-journal.md, "The warp-per-row
kernels, made without a GPU", and the CUDA sections after it).

  dump-ir softmax --size gpu --emit=ptx > k.ptx
  ptxas -arch=sm_90 k.ptx -o k.cubin && nvdisasm -c k.cubin > k.sass
  python3 tools/bench/sass_loops.py k.sass
"""
import collections
import re
import sys

INSTR = re.compile(r'\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9]+)')
BRANCH = re.compile(r'BRA `\((\.L_x_\d+)\)')
MEMORY = re.compile(r'((?:LDG|STG)[A-Z0-9.]*)')


def loops(lines):
    instrs = [(i, l) for i, l in enumerate(lines) if INSTR.match(l)]
    labels = {l[:-1]: i for i, l in enumerate(lines) if l.startswith('.L_x_') and l.endswith(':')}
    spans = []
    for i, l in instrs:
        m = BRANCH.search(l)
        if m and 'BRA.DIV' not in l and labels.get(m.group(1), i) < i - 1:
            spans.append((labels[m.group(1)], i))
    for start, end in spans:
        if any(s != start and start <= s and e <= end for s, e in spans):
            continue
        body = [x for j, x in instrs if start < j <= end]
        ops = collections.Counter(INSTR.match(x).group(2) for x in body)
        mem = collections.Counter(MEMORY.search(x).group(1) for x in body if MEMORY.search(x))
        yield len(body), ops, mem


def main():
    for path in sys.argv[1:]:
        for n, ops, mem in loops(open(path).read().split('\n')):
            top = ' '.join(f'{k}:{v}' for k, v in ops.most_common(10))
            print(f'{path}: loop of {n} instructions; {top}; memory {dict(mem)}')


if __name__ == '__main__':
    main()
