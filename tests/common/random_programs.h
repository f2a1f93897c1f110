// Random programs for the differential tests (tests/frontend/test_differential.cpp on the CPU,
// tests/codegen/test_cuda_compile.cpp on a GPU): op sequences over random shapes, with
// broadcasting, views, in-place writes into inputs and through views, and data-dependent
// branches. A seed gives one program and one input signature; `call` gives fresh values.
#pragma once
#include <kiln/kiln.h>

#include <cstdint>
#include <random>
#include <vector>

#include "seeds.h"

namespace kiln::testing {

// A program is a list of steps, each a few random numbers; interpreting them against the
// live tensors gives the same op sequence every time (eager, traced, replayed).
struct Step {
  int kind;
  uint32_t a, b, c;
};

struct Program {
  std::vector<int64_t> shape;  // every live tensor broadcasts to it
  std::vector<Step> steps;
  int inputs = 2;
};

inline std::vector<int64_t> broadcastable(const std::vector<int64_t>& s, std::mt19937& rng) {
  std::vector<int64_t> out;
  size_t drop = rng() % (s.size() + 1) == 0 ? 1 : 0;  // sometimes fewer leading dims
  for (size_t d = drop; d < s.size(); ++d) out.push_back(rng() % 4 == 0 ? 1 : s[d]);
  return out;
}

inline Program make_program(uint32_t seed) {
  std::mt19937 rng(seed);
  Program p;
  size_t rank = 1 + rng() % 3;
  for (size_t d = 0; d < rank; ++d) p.shape.push_back(2 + int64_t(rng() % 4));
  p.inputs = 1 + int(rng() % 3);
  int n = 4 + int(rng() % 12);
  for (int i = 0; i < n; ++i) p.steps.push_back({int(rng() % 12), uint32_t(rng()), uint32_t(rng()), uint32_t(rng())});
  return p;
}

// Shapes, dtypes and layouts come from the program's seed (one signature); values from `call`.
inline std::vector<Tensor> make_inputs(const Program& p, uint32_t seed, uint32_t call) {
  std::mt19937 rng(seed * 7919u + 1);
  manual_seed(seed * 3 + call);
  std::vector<Tensor> in;
  for (int i = 0; i < p.inputs; ++i) {
    Tensor t = randn(broadcastable(p.shape, rng), rng() % 3 == 0 ? kFloat64 : kFloat32);
    in.push_back(rng() % 4 == 0 && t.dim() >= 2 ? t.transpose(0, 1).contiguous().transpose(0, 1) : t);
  }
  return in;
}

// Runs the program on `inputs` (which it may write into) and returns every live tensor.
inline std::vector<Tensor> run(const Program& p, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> live(inputs.begin(), inputs.end());
  std::vector<bool> writable(live.size(), true);  // not a broadcast view
  auto pick = [&](uint32_t r) -> size_t { return r % live.size(); };
  for (const Step& s : p.steps) {
    Tensor x = live[pick(s.a)];
    Tensor y = live[pick(s.b)];
    Tensor out;
    bool out_writable = true;
    switch (s.kind) {
      case 0: out = s.c % 3 == 0 ? exp(x * 0.1) : s.c % 3 == 1 ? sin(x) : relu(x); break;
      case 1: out = s.c % 2 ? x + y : x * y; break;
      case 2: out = s.c % 2 ? x - 1.5 : 2.0 * x; break;
      case 3: out = where(x > 0, x, y); break;
      case 4: out = maximum(x, y) / (abs(y) + 1); break;
      case 5:
        if (x.dim() >= 2) out = x.transpose(0, x.dim() - 1).tanh().transpose(0, x.dim() - 1);
        else out = x.unsqueeze(0).sigmoid().squeeze(0);
        break;
      case 6: out = x.expand(p.shape); out_writable = false; break;
      case 7:
        if (x.dim() == 0) { out = x.clone(); break; }
        out = s.c % 2 ? x.sum({int64_t(s.c % x.dim())}, true) : x.amax({int64_t(s.c % x.dim())}, true);
        break;
      case 8: {  // in place into a live tensor (maybe an input), when the shapes allow it
        size_t k = pick(s.a);
        if (writable[k] && broadcast_shapes(live[k].sizes(), y.sizes()) == live[k].sizes().vec()) {
          if (s.c % 2) live[k].add_(y); else live[k].mul_(0.5);
        }
        continue;
      }
      case 9: {  // in place through a view of a live tensor
        size_t k = pick(s.a);
        if (writable[k] && live[k].dim() >= 1 && live[k].size(0) >= 2) {
          if (s.c % 2) live[k].select(0, 1).fill_(0.25); else live[k].slice(0, 0, 1).sub_(1.0);
        }
        continue;
      }
      case 10:  // a data-dependent branch: a graph break
        out = x.sum().item<double>() > 0 ? x * 3 : x - 3;
        break;
      default: out = (x.dim() ? x.mean({-1}, true) : x) + y; break;
    }
    live.push_back(out);
    writable.push_back(out_writable);
  }
  return live;
}

}  // namespace kiln::testing
