#!/usr/bin/env python3
"""PyTorch's counterpart of kiln-train (tools/bench/train.cpp): the same training steps on the
same shapes (zero_grad, forward, backward, optimizer step), eager and with the whole step under
torch.compile, timed the same way (3 untimed steps, then the median of --reps), one line per
program: "torch NAME eager E ms compiled C ms first F ms" (first: the compiled step's first two
calls, which compile), and a line with the forward alone compiled, backward and the update after.

Usage: train_torch.py [--reps N] [--threads T] [NAME...]
"""
import math
import sys
import time

import torch

from peer_timing import median_ms, parse_args


class Session:
    def __init__(self, params, opt, x, y, loss=None):
        self.params, self.opt, self.x, self.y, self.loss = params, opt, x, y, loss

    def step(self, x, y):
        if self.loss is None:  # adam_step: the update alone
            self.opt.step()
            return None
        self.opt.zero_grad()
        l = self.loss(x, y)
        l.backward()
        self.opt.step()
        return l


def param(sizes, scale):
    return (torch.randn(*sizes) * scale).requires_grad_()


def zero_param(sizes):
    return torch.zeros(*sizes).requires_grad_()


def mlp_train():
    w1, b1 = param([784, 1024], 1 / math.sqrt(784)), zero_param([1024])
    w2, b2 = param([1024, 10], 1 / math.sqrt(1024)), zero_param([10])
    x, y = torch.randn(256, 784), torch.softmax(torch.randn(256, 10) * 6, 1)

    def loss(x, y):
        h = torch.nn.functional.gelu(x @ w1 + b1)
        return -(torch.log_softmax(h @ w2 + b2, 1) * y).sum(1).mean()
    params = [w1, b1, w2, b2]
    return Session(params, torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01), x, y, loss)


def layernorm_train():
    w, b = param([1024, 1024], 1 / 32), zero_param([1024])
    g, beta = torch.ones(1024).requires_grad_(), zero_param([1024])
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)

    def loss(x, y):
        h = x @ w + b
        mu = h.mean(1, keepdim=True)
        var = (h - mu).pow(2).mean(1, keepdim=True)
        n = (h - mu) / (var + 1e-5).sqrt() * g + beta
        return (n - y).pow(2).mean()
    params = [w, b, g, beta]
    return Session(params, torch.optim.SGD(params, lr=0.01, momentum=0.9), x, y, loss)


def attention_train():
    B, T, D = 8, 128, 256
    wq, wk, wv, wo = (param([D, D], 1 / 16) for _ in range(4))
    x, y = torch.randn(B, T, D), torch.randn(B, T, D)

    def loss(x, y):
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = q @ k.transpose(1, 2) / math.sqrt(D)
        pos = torch.arange(0, T)
        future = pos.unsqueeze(0) > pos.unsqueeze(1)
        att = torch.softmax(scores.masked_fill(future, -math.inf), -1)
        return ((att @ v) @ wo - y).pow(2).mean()
    params = [wq, wk, wv, wo]
    return Session(params, torch.optim.AdamW(params, lr=1e-3), x, y, loss)


def adam_step():
    params = []
    for _ in range(10):
        p = param([1000, 1000], 1.0)
        p.grad = torch.randn(1000, 1000)
        params.append(p)
    return Session(params, torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01), None, None)


def rnn_train():
    B, I, H, T = 64, 128, 256, 16
    wx, wh = param([I, H], 1 / math.sqrt(I)), param([H, H], 1 / math.sqrt(H))
    b, wo = zero_param([H]), param([H, 1], 1 / 16)
    x, y = torch.randn(T, B, I), torch.randn(B, 1)

    def loss(x, y):
        h = torch.zeros(B, H)
        for t in range(T):
            h = torch.tanh(x[t] @ wx + h @ wh + b)
        return ((h @ wo) - y).pow(2).mean()
    params = [wx, wh, b, wo]
    return Session(params, torch.optim.SGD(params, lr=0.01), x, y, loss)


def regression_sgd():
    w, b = zero_param([16, 1]), zero_param([1])
    x = torch.randn(10000, 16)
    y = x @ torch.randn(16, 1) + 0.5 + torch.randn(10000, 1) * 0.1

    def loss(x, y):
        return (x @ w + b - y).pow(2).mean()
    return Session([w, b], torch.optim.SGD([w, b], lr=0.05), x, y, loss)


PROGRAMS = {f.__name__: f for f in (mlp_train, layernorm_train, attention_train, adam_step, rnn_train,
                                     regression_sgd)}


def main(argv):
    reps, threads, names = parse_args(argv, PROGRAMS, 20, "train_torch.py")
    torch.set_num_threads(threads)
    for name, make in PROGRAMS.items():
        if names and name not in names:
            continue
        torch.manual_seed(0)
        eager = make()
        torch.manual_seed(0)
        comp = make()
        step = torch.compile(comp.step)
        first = 0.0
        for k in range(2):
            start = time.perf_counter()
            step(comp.x, comp.y)
            first += (time.perf_counter() - start) * 1e3
        e = median_ms(lambda: eager.step(eager.x, eager.y), reps)
        c = median_ms(lambda: step(comp.x, comp.y), reps)
        print(f"torch {name:16s} eager {e:9.3f} ms  compiled {c:9.3f} ms  first {first:8.1f} ms", flush=True)
        if eager.loss is not None:
            # the forward alone under torch.compile, backward and the update after it
            torch.manual_seed(0)
            fwd = make()
            fwd.loss = torch.compile(fwd.loss)
            f = median_ms(lambda: fwd.step(fwd.x, fwd.y), reps)
            print(f"torch {name:16s} forward compiled, backward and step after the call {f:9.3f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
