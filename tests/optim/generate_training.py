# Generates tests/optim/training.json: a small MLP trained 50 steps in PyTorch (float32), with
# SGD-momentum and with AdamW, from fixed initial weights on fixed batches; test_training.cpp
# trains the same model in kiln, eagerly and as one compiled step, and compares the losses and
# the final weights. Run with any PyTorch: python3 tests/optim/generate_training.py
import json
import os

import torch

torch.manual_seed(11)
STEPS, BATCHES, BATCH, IN, HIDDEN, OUT = 50, 5, 16, 8, 16, 4
w1 = torch.randn(IN, HIDDEN) / IN ** 0.5
b1 = torch.randn(HIDDEN) * 0.1
w2 = torch.randn(HIDDEN, OUT) / HIDDEN ** 0.5
b2 = torch.zeros(OUT)
xs = [torch.randn(BATCH, IN) for _ in range(BATCHES)]
ys = [torch.softmax(torch.randn(BATCH, OUT) * 3, 1) for _ in range(BATCHES)]  # soft targets

CONFIGS = [
    ("sgd", {"lr": 0.1, "momentum": 0.9}),
    ("adamw", {"lr": 0.01, "weight_decay": 0.01}),
]


def loss_of(params, x, y):
    w1, b1, w2, b2 = params
    h = torch.nn.functional.gelu(x @ w1 + b1)
    return -(torch.log_softmax(h @ w2 + b2, 1) * y).sum(1).mean()


def train(kind, opts):
    params = [t.clone().requires_grad_() for t in (w1, b1, w2, b2)]
    cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[kind]
    opt = cls(params, foreach=False, **opts)
    losses = []
    for k in range(STEPS):
        opt.zero_grad()
        loss = loss_of(params, xs[k % BATCHES], ys[k % BATCHES])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"optimizer": kind, "options": opts, "losses": losses,
            "final": [p.detach().flatten().tolist() for p in params]}


data = {"torch": torch.__version__, "steps": STEPS, "sizes": [[IN, HIDDEN], [HIDDEN], [HIDDEN, OUT], [OUT]],
        "batch": [BATCH, IN, OUT], "params0": [t.flatten().tolist() for t in (w1, b1, w2, b2)],
        "xs": [x.flatten().tolist() for x in xs], "ys": [y.flatten().tolist() for y in ys],
        "runs": [train(kind, opts) for kind, opts in CONFIGS]}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "training.json"), "w") as f:
    json.dump(data, f)
