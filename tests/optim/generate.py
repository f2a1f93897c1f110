# Generates tests/optim/cases.json: PyTorch's optimizers and schedules run on fixed parameters
# and fixed gradients, step by step, for test_optim.cpp to compare kiln's against.
# Run with any PyTorch: python3 tests/optim/generate.py
import json
import os

import torch

torch.manual_seed(7)
STEPS = 5
SHAPES = [[3, 4], [5]]
params0 = [torch.randn(s, dtype=torch.float64) for s in SHAPES]
grads = [[torch.randn(s, dtype=torch.float64) for s in SHAPES] for _ in range(STEPS)]

CONFIGS = [
    ("sgd", {"lr": 0.1}, None),
    ("sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}, None),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.05}, ("step", {"step_size": 2, "gamma": 0.5})),
    ("adam", {"lr": 0.01}, None),
    ("adam", {"lr": 0.02, "weight_decay": 0.1, "amsgrad": True}, None),
    ("adamw", {"lr": 0.01, "weight_decay": 0.01}, ("cosine", {"T_max": 4})),
    ("adamw", {"lr": 0.03, "betas": (0.8, 0.95), "eps": 1e-6, "amsgrad": True, "weight_decay": 0.2}, None),
]


def run(kind, opts, sched):
    ps = [p.clone().requires_grad_() for p in params0]
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
    opt = cls(ps, foreach=False, **opts)
    s = None
    if sched:
        if sched[0] == "step":
            s = torch.optim.lr_scheduler.StepLR(opt, **sched[1])
        else:
            s = torch.optim.lr_scheduler.CosineAnnealingLR(opt, **sched[1])
    out = []
    for k in range(STEPS):
        for p, g in zip(ps, grads[k]):
            p.grad = g.clone()
        opt.step()
        if s:
            s.step()
        out.append({"params": [p.detach().flatten().tolist() for p in ps], "lr": opt.param_groups[0]["lr"]})
    return out


cases = []
for kind, opts, sched in CONFIGS:
    jopts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()}
    cases.append({"optimizer": kind, "options": jopts,
                  "schedule": {"kind": sched[0], **sched[1]} if sched else None, "steps": run(kind, opts, sched)})

data = {"torch": torch.__version__, "shapes": SHAPES, "params0": [p.flatten().tolist() for p in params0],
        "grads": [[g.flatten().tolist() for g in step] for step in grads], "cases": cases}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json"), "w") as f:
    json.dump(data, f, indent=1)
