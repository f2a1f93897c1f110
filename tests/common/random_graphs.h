// Random graphs for the property tests: random C++ tensor programs traced by kiln::compile
// into one graph each, so they are valid by construction (the eager ops ran on them while they
// were recorded). tests/passes/test_properties.cpp checks the optimizer on them against the
// reference executor; tests/codegen checks the compiled backends (LLVM on the CPU, CUDA) on
// the same graphs.
//
// A program is a seed-determined list of steps over a pool of live tensors: elementwise chains
// with broadcasting, wrapped numbers and dtype mixes (f32, f64, i32, bool from comparisons;
// int8, uint8, int16 and int64 from casts and index reductions; float16 and bfloat16 as
// outputs), where and masked_fill, casts,
// views (transpose, permute, slice with a step, select, unsqueeze, expand, view/reshape,
// squeeze, diagonal), reductions over one or several dims or all of them, keepdim or not, over
// views and broadcast operands, softmax and log_softmax, normalisations (x - x.mean(d,
// keepdim), layer norm), pairwise interactions along a short leading dim (n-body's shape: what
// the CPU backend's row groups unroll), index reductions (argmax/argmin, max/min with a dim), cumsum,
// logsumexp, any/all, integer division and remainders (floor, trunc, fmod, bitwise ops), float
// remainders, cat, index_select and gather with indices computed in the program, matmul/mm
// with epilogues, in-place writes (add_, sub_, mul_, copy_ with dtype conversion and
// broadcasting, fill_, relu_) into inputs, intermediates and views of them, views taken before
// a write and read after it, repeated steps (duplicated subexpressions, repeated writes), and
// several outputs (inputs, views of inputs, the same value twice). One graph in four has an
// input turned into a tensor constant (work for fold).
// Inputs are 0-d to 4-d with sizes 1..6, some with transposed or gapped layouts.
//
// KILN_PROPERTY_GRAPHS=N gives N seeds instead of a test's default count (a longer hunt; from
// KILN_TEST_SEED_BASE + 1, seeds.h), KILN_PROPERTY_SEED=S seed S alone (to reproduce a failure).
#pragma once
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "seeds.h"

namespace kiln::testing::property {

// ---------------------------------------------------------------------------------------------
// The random program.

enum Kind : int {
  kUnary,        // a unary op (transcendental, activation, rounding)
  kBinary,       // tensor op tensor, broadcasting
  kWrapped,      // tensor op number (a wrapped Python-style scalar)
  kCompare,      // comparisons, where, masked_fill, logical ops, bool casts
  kCast,         // .to(dtype)
  kView,         // a view (transpose, permute, slice with step, select, unsqueeze, expand,
                 // view/reshape/flatten, squeeze, diagonal) feeding an elementwise op, or kept
  kReduce,       // sum/mean/amax/amin/var/norm/prod over dims, keepdim or not, or over all
  kSoftmax,      // softmax/log_softmax over the last or another dim
  kNormalize,    // reductions read back by elementwise consumers: x - x.mean(d, true), ...
  kMatmul,       // matmul/mm and an elementwise epilogue
  kInplace,      // add_/sub_/mul_/copy_/fill_/relu_ into a live tensor (inputs included)
  kInplaceView,  // the same through a view of a live tensor
  kRepeat,       // a previous step again, on the same operands
  kKeepView,     // a view of a live tensor kept alive (read after later writes)
  kIndexReduce,  // argmax/argmin, max/min with a dim (values and indices), cumsum, logsumexp, any/all
  kIntegerOps,   // integer division (floor, trunc), remainder, fmod, bitwise ops; float remainders
  kIndexing,     // cat, index_select and gather with indices computed in the program
  kHalf,         // a value cast to float16 or bfloat16 and an op or two on it, kept as an output
  kFactory,      // arange, linspace or eye made in the program (ops over iota), maybe viewed or
                 // written in place, combined with a live tensor
  kNumKinds
};
constexpr int kWeights[kNumKinds] = {3, 4, 2, 2, 1, 3, 3, 1, 2, 2, 2, 2, 2, 1, 2, 2, 1, 1, 1};

struct Step {
  int kind;
  uint32_t a, b, c, d;
};

struct InputSpec {
  std::vector<int64_t> sizes;
  DType dtype = kFloat32;
  int layout = 0;  // 0: row-major, 1: first two dims transposed in memory, 2: a gap in the last dim
};

struct Program {
  std::vector<int64_t> shape;  // the shape most values broadcast to
  std::vector<InputSpec> inputs;
  std::vector<Step> steps;
  std::vector<uint32_t> outputs;
  int64_t max_value = 0;  // Shapes::max_value
};

// How large the programs' shapes are. The optimizer's tests keep them small (the reference
// executor runs every graph many times); the backends' tests also take larger ones, where
// vector loops and their remainders, tiles, row caches and split reductions come in.
struct Shapes {
  int64_t max_dim = 6;      // sizes 1..max_dim
  int64_t max_numel = 240;  // the shape is shrunk to at most this many elements
  int64_t max_value = 0;    // no broadcast or expand makes a value of more elements (0: no cap)
  bool operator<(const Shapes& o) const {
    return std::tuple(max_dim, max_numel, max_value) < std::tuple(o.max_dim, o.max_numel, o.max_value);
  }
};
inline constexpr Shapes kSmallShapes{};
inline constexpr Shapes kLargeShapes{300, 40000, 160000};

inline Program make_program(uint32_t seed, Shapes shapes = kSmallShapes) {
  std::mt19937 rng(seed * 2654435761u + 12345u);
  Program p;
  p.max_value = shapes.max_value;
  size_t rank = 1 + rng() % 4;
  for (size_t d = 0; d < rank; ++d)
    p.shape.push_back(rng() % 5 == 0 ? 1 : 1 + int64_t(rng() % uint32_t(shapes.max_dim)));
  while (std::accumulate(p.shape.begin(), p.shape.end(), int64_t(1), std::multiplies<>()) > shapes.max_numel)
    for (auto& s : p.shape) s = std::max<int64_t>(1, s - 1 - s / 8);
  int ninputs = 1 + int(rng() % 3);
  for (int i = 0; i < ninputs; ++i) {
    InputSpec in;
    // the first input has the full shape; the others broadcast to it (fewer dims, size-1 dims)
    size_t drop = i == 0 ? 0 : rng() % (p.shape.size() + 1);
    if (drop == p.shape.size() && rng() % 2) drop = 0;
    for (size_t d = drop; d < p.shape.size(); ++d) in.sizes.push_back(i > 0 && rng() % 4 == 0 ? 1 : p.shape[d]);
    uint32_t dt = rng() % 8;
    in.dtype = dt < 5 ? kFloat32 : dt < 7 ? kFloat64 : (i == 0 ? kFloat64 : kInt32);
    uint32_t lay = rng() % 6;
    in.layout = lay == 0 && in.sizes.size() >= 2 ? 1 : lay == 1 && !in.sizes.empty() ? 2 : 0;
    p.inputs.push_back(in);
  }
  int total = 0;
  for (int w : kWeights) total += w;
  int n = 4 + int(rng() % 15);
  for (int i = 0; i < n; ++i) {
    int r = int(rng() % uint32_t(total)), k = 0;
    while (r >= kWeights[k]) r -= kWeights[k++];
    if (k == kRepeat && p.steps.empty()) k = kBinary;
    p.steps.push_back({k, uint32_t(rng()), uint32_t(rng()), uint32_t(rng()), uint32_t(rng())});
  }
  int nout = 1 + int(rng() % 4);
  for (int i = 0; i < nout; ++i) p.outputs.push_back(uint32_t(rng()));
  return p;
}

inline std::vector<Tensor> make_inputs(const Program& p, uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> in;
  for (const InputSpec& s : p.inputs) {
    Tensor t = s.dtype == kInt32 ? randint(-20, 20, s.sizes).to(kInt32) : randn(s.sizes).to(s.dtype);
    if (s.layout == 1) {
      t = t.transpose(0, 1).contiguous().transpose(0, 1);
    } else if (s.layout == 2) {
      std::vector<int64_t> wide = s.sizes;
      wide.back() *= 2;
      Tensor w = zeros(wide, TensorOptions(s.dtype));
      Tensor v = w.slice(-1, 0, std::nullopt, 2);
      v.copy_(t);
      t = v;
    }
    in.push_back(t);
  }
  return in;
}

// What the program knows about each live tensor.
struct Val {
  Tensor t;
  double bound = 1;      // every element's magnitude is at most this (never NaN or infinite)
  bool exact = true;     // the same bits whatever the kernel: safe to compare and to truncate
  bool writable = true;  // no two elements share memory (not an expanded view)
  bool terminal = false; // a 16-bit float value: an output only, never read by a later step
};

inline std::optional<std::vector<int64_t>> broadcast(IntArrayRef a, IntArrayRef b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}
inline bool fits(IntArrayRef from, IntArrayRef to) {
  auto s = broadcast(from, to);
  return s && *s == to.vec();
}
inline bool is_float(const Tensor& t) { return is_floating(t.dtype()); }

class Runner {
 public:
  Runner(const Program& p, const std::vector<Tensor>& inputs) : p_(p) {
    for (const Tensor& t : inputs)
      live_.push_back({t, t.dtype() == kInt32 ? 20.0 : 6.0, true, true});
  }

  std::vector<Tensor> run() {
    std::vector<size_t> nlive_at;  // per step: the live values it picked from, and the focus
    std::vector<int> focus_at;
    for (size_t i = 0; i < p_.steps.size(); ++i) {
      const Step& s = p_.steps[i];
      nlive_at.push_back(live_.size());
      focus_at.push_back(focus_);
      if (s.kind == kRepeat) {
        // an earlier step again on the same operands: a duplicated subexpression (or write)
        size_t j = s.a % i;
        while (j > 0 && p_.steps[j].kind == kRepeat) --j;
        if (p_.steps[j].kind == kRepeat) continue;
        int focus = focus_;
        focus_ = focus_at[j];
        apply(p_.steps[j], nlive_at[j]);
        if (p_.steps[j].kind != kInplace && p_.steps[j].kind != kInplaceView) focus_ = focus;
      } else {
        apply(s, live_.size());
      }
    }
    std::vector<Tensor> out;
    size_t n = live_.size();
    out.push_back(live_.back().t);
    for (uint32_t r : p_.outputs) {
      switch (r % 5) {
        case 0: out.push_back(live_[r / 5 % p_.inputs.size()].t); break;  // an input (maybe written)
        case 1: out.push_back(out.back()); break;                        // the same value twice
        case 2: {                                                          // a view of an input
          bool w = true;
          out.push_back(view_of(live_[r / 5 % p_.inputs.size()].t, r / 7, w));
          break;
        }
        default: out.push_back(live_[r / 5 % n].t); break;
      }
    }
    return out;
  }

 private:
  const Program& p_;
  std::vector<Val> live_;
  int focus_ = -1;  // the tensor last written in place: read again soon after

  size_t pick(uint32_t r, size_t nlive) const {
    if (focus_ >= 0 && size_t(focus_) < nlive && r % 3 == 0) return size_t(focus_);
    r /= 3;
    size_t i = r % 2 ? nlive - 1 - (r / 2) % std::min<size_t>(3, nlive)  // recent values: deep chains
                     : (r / 2) % nlive;
    while (live_[i].terminal) --i;  // (the inputs come first and are not)
    return i;
  }
  // The broadcast shape of a and b, where they broadcast into a value of at most
  // p.max_value elements. (Within the class this hides the free function.)
  std::optional<std::vector<int64_t>> broadcast(IntArrayRef a, IntArrayRef b) const {
    auto s = property::broadcast(a, b);
    if (s && p_.max_value && std::accumulate(s->begin(), s->end(), int64_t(1), std::multiplies<>()) > p_.max_value)
      return std::nullopt;
    return s;
  }
  // An operand that broadcasts with x (to anything) and, with `into`, broadcasts into x's shape.
  size_t partner(size_t x, uint32_t r, size_t nlive, bool into) const {
    for (size_t k = 0; k < nlive; ++k) {
      size_t j = (pick(r, nlive) + k) % nlive;
      if (live_[j].terminal) continue;
      const Tensor& y = live_[j].t;
      if (into ? fits(y.sizes(), live_[x].t.sizes()) : broadcast(y.sizes(), live_[x].t.sizes()).has_value())
        return j;
    }
    return x;
  }
  void push(Tensor t, double bound, bool exact, bool writable = true) {
    live_.push_back({std::move(t), bound, exact, writable});
  }
  // A float version of v (casts ints and bools).
  Val floated(const Val& v, DType like = kFloat32) const {
    if (is_float(v.t)) return v;
    return {v.t.to(like), v.bound, v.exact, true};
  }
  // A float32 value that may differ in its last bit between kernels (a transcendental's vector
  // and scalar paths round differently). Promoted into a float64 result, that bit would be
  // compared with float64's tolerance; so such mixes compute in float32.
  static bool noisy32(const Val& v) { return v.t.dtype() == kFloat32 && !v.exact; }
  static void same_precision(Val& a, Val& b) {
    if (noisy32(a) && b.t.dtype() == kFloat64) b.t = b.t.to(kFloat32);
    if (noisy32(b) && a.t.dtype() == kFloat64) a.t = a.t.to(kFloat32);
  }
  // Writes into `target` (a view of live_[k]'s memory or live_[k] itself) change every alias.
  void wrote(const Tensor& target, double bound, bool exact) {
    for (Val& v : live_)
      if (v.t.is_alias_of(target)) {
        v.bound = std::max(v.bound, bound);
        v.exact = v.exact && exact;
      }
  }

  // An interaction between every two of n points of c = 2..4 components (x's elements as [c, n];
  // n-body's shape): the differences d [c, n, n], a weight of each pair shared by the components
  // (1 / (1 + the sum over them of d^2): a reduction over the components), and each component's
  // sum or maximum of d * w over the other points. The CPU backend unrolls the components' loop
  // of the last kernel and computes w once per pair for all of them (row groups). False: x's
  // elements do not split into 2 to 4 components, or [c, n, n] would be too large.
  bool pairwise(const Val& x, const Step& s) {
    const Tensor& t = x.t;
    if (!is_float(t) || t.numel() < 2) return false;
    int64_t c = 0;
    for (int64_t k = 0; k < 3 && !c; ++k) {
      int64_t want = 2 + (int64_t(s.b % 3) + k) % 3;
      if (t.numel() % want == 0) c = want;
    }
    if (!c) return false;
    const int64_t n = t.numel() / c;
    if (c * n * n > (p_.max_value ? p_.max_value : 4096)) return false;
    Tensor pts = t.reshape({c, n});
    Tensor d = pts.unsqueeze(1) - pts.unsqueeze(2);
    Tensor w = 1.0 / ((d * d).sum({0}) + 1.0);
    Tensor dw = d * w.unsqueeze(0);
    if (s.c % 2) push(dw.sum({2}), 2 * x.bound * double(n), false);
    else push(dw.amax({2}), 2 * x.bound, false);
    return true;
  }

  // t expanded: size-1 dims to p.shape's sizes, and maybe a new leading dim.
  Tensor expand_of(const Tensor& t, uint32_t r) const {
    std::vector<int64_t> to = t.sizes().vec();
    for (size_t i = 0; i < to.size(); ++i) {
      size_t from_end = to.size() - i;
      if (to[i] == 1 && from_end <= p_.shape.size()) to[i] = p_.shape[p_.shape.size() - from_end];
    }
    if (r % 2 || to == t.sizes().vec()) to.insert(to.begin(), 2 + int64_t(r / 2 % 3));
    if (p_.max_value && std::accumulate(to.begin(), to.end(), int64_t(1), std::multiplies<>()) > p_.max_value)
      return t.expand(t.sizes());
    return t.expand(to);
  }

  // A random view of t; `writable` is cleared for expands.
  Tensor view_of(const Tensor& t, uint32_t r, bool& writable, bool for_write = false) const {
    int64_t n = t.dim();
    uint32_t choice = r % (for_write ? 6 : 10);
    r /= 10;
    auto dim = [&](uint32_t x) { return int64_t(x % uint32_t(std::max<int64_t>(n, 1))); };
    if (n == 0) return t.unsqueeze(0);
    switch (choice) {
      case 0: return n >= 2 ? t.transpose(dim(r), dim(r / 7)) : t.unsqueeze(0);
      case 1: {  // slice with a step (or a narrower range)
        int64_t d = dim(r), size = t.size(d);
        int64_t step = 1 + (r / 7) % 3, start = size > 1 ? (r / 31) % 2 : 0;
        return t.slice(d, start, std::nullopt, step);
      }
      case 2: return t.select(dim(r), int64_t((r / 7) % uint32_t(t.size(dim(r)))));
      case 3: return t.unsqueeze(int64_t(r % uint32_t(n + 1)));
      case 4: {
        std::vector<int64_t> perm(static_cast<size_t>(n));
        std::iota(perm.begin(), perm.end(), 0);
        std::mt19937 g(r);
        std::shuffle(perm.begin(), perm.end(), g);
        return t.permute(perm);
      }
      case 5: {
        if (n >= 2 && t.size(0) == t.size(1)) return t.diagonal(0, 0, 1);
        return t.slice(dim(r), 0, std::max<int64_t>(1, t.size(dim(r)) - 1));
      }
      case 6: writable = false; return expand_of(t, r);
      case 7:  // view/reshape: of a contiguous value only (a reshape would copy otherwise)
        if (t.is_contiguous()) {
          if (r % 3 == 0) return t.view({t.numel()});
          if (r % 3 == 1 && n >= 2) {
            std::vector<int64_t> s = t.sizes().vec();
            s[0] *= s[1];
            s.erase(s.begin() + 1);
            return t.reshape(s);
          }
          std::vector<int64_t> s = t.sizes().vec();
          s.push_back(1);
          return t.view(s);
        }
        return t.unsqueeze(-1);
      case 8: return t.squeeze();
      default: return t.is_contiguous() ? t.flatten(0, -1) : t.transpose(0, -1);
    }
  }

  void apply(const Step& s, size_t nlive) {
    nlive = std::min(nlive, live_.size());
    size_t xi = pick(s.a, nlive);
    const Val x = live_[xi];
    if (x.bound > 1e6 && s.kind != kInplace && s.kind != kInplaceView) {
      // keep magnitudes small: cancellation in large values is rounding noise, not a bug
      push((is_float(x.t) ? x.t : x.t.to(kFloat32)).tanh(), 1, false);
      return;
    }
    switch (s.kind) {
      case kUnary: {
        if (x.t.dtype() == kBool) { push(x.t.logical_not(), 1, x.exact); return; }
        if (!is_float(x.t)) {
          if (s.c % 2) push(x.t.abs(), x.bound, x.exact);
          else push(-x.t, x.bound, x.exact);
          return;
        }
        const Tensor& t = x.t;
        switch (s.c % 14) {
          case 0: push(t.sin(), 1, false); return;
          case 1: push(t.cos(), 1, false); return;
          case 2: push(t.tanh(), 1, false); return;
          case 3: push(t.sigmoid(), 1, false); return;
          case 4: push(t.relu(), x.bound, x.exact); return;
          case 5: push(t.abs(), x.bound, x.exact); return;
          case 6: push(t.neg(), x.bound, x.exact); return;
          case 7:
            if (x.bound < 100) { push((t * 0.1).exp(), std::exp(x.bound * 0.1) + 1, false); return; }
            push(t.tanh(), 1, false);
            return;
          case 8: push(t.abs().sqrt(), std::sqrt(x.bound) + 1, false); return;
          case 9: push(t.abs().log1p(), std::log1p(x.bound) + 1, false); return;
          case 10: push(s.d % 2 ? t.gelu() : t.gelu("tanh"), x.bound + 1, false); return;
          case 11: push(t.silu(), x.bound + 1, false); return;
          case 12: push(t.erf(), 1, false); return;
          default:
            if (x.exact) { push(s.d % 2 ? t.floor() : t.round(), x.bound + 1, true); return; }
            push(t.atan(), 2, false);
            return;
        }
      }
      case kBinary: {
        size_t yi = partner(xi, s.b, nlive, false);
        Val y = live_[yi];
        Val a = x, b = y;
        if (a.t.dtype() == kBool) a = floated(a);
        if (b.t.dtype() == kBool) b = floated(b);
        same_precision(a, b);
        bool ints = !is_float(a.t) && !is_float(b.t);
        switch (s.c % 7) {
          case 0: push(a.t + b.t, a.bound + b.bound, a.exact && b.exact); return;
          case 1: push(a.t - b.t, a.bound + b.bound, a.exact && b.exact); return;
          case 2:
            if (a.bound * b.bound < 1e4) { push(a.t * b.t, a.bound * b.bound, a.exact && b.exact); return; }
            push(a.t.maximum(b.t), std::max(a.bound, b.bound), a.exact && b.exact);
            return;
          case 3:  // true division: ints become floats
            push(a.t / (b.t.abs() + 1), a.bound, a.exact && b.exact);
            return;
          case 4: push(a.t.maximum(b.t), std::max(a.bound, b.bound), a.exact && b.exact); return;
          case 5: push(a.t.minimum(b.t), std::max(a.bound, b.bound), a.exact && b.exact); return;
          default:
            if (ints) { push(a.t.sub(b.t, 2), a.bound + 2 * b.bound, true); return; }
            push(a.t.add(b.t, 0.5), a.bound + b.bound, a.exact && b.exact);
            return;
        }
      }
      case kWrapped: {
        Val a = x.t.dtype() == kBool ? floated(x) : x;
        const Tensor& t = a.t;
        bool f = is_float(t);
        switch (s.c % 7) {
          case 0: push(t * 2.5, a.bound * 2.5, a.exact); return;
          case 1: push(f ? t + 1.5 : t + 3, a.bound + 3, a.exact); return;  // ints stay ints
          case 2: push(2.0 - t, a.bound + 2, a.exact); return;
          case 3: push(t / 4.0, a.bound / 4 + 1, a.exact); return;
          case 4:
            if (a.bound < 100) { push(t.pow(2), a.bound * a.bound, a.exact); return; }
            push(t * 0.5, a.bound, a.exact);
            return;
          case 5: push(t * 2, a.bound * 2, a.exact); return;  // an int number: stays int for ints
          default: push(t.clamp(-1.0, 1.0), std::min(a.bound, 1.0), a.exact); return;
        }
      }
      case kCompare: {
        size_t yi = partner(xi, s.b, nlive, false);
        Val y = live_[yi];
        if (x.t.dtype() == kBool && y.t.dtype() == kBool) {
          push(s.c % 2 ? x.t.logical_and(y.t) : x.t.logical_xor(y.t), 1, x.exact && y.exact);
          return;
        }
        // compare exact values only: a rounding difference flips a comparison
        Tensor cond;
        bool cexact = true;
        if (x.exact && y.exact && x.t.dtype() != kBool && y.t.dtype() != kBool)
          cond = s.c % 3 == 0 ? x.t > y.t : s.c % 3 == 1 ? x.t <= y.t : x.t.ne(y.t);
        else if (x.t.dtype() == kBool)
          cond = x.t;
        else if (x.exact)
          cond = s.c % 2 ? x.t > 0.25 : x.t.le(-0.5);
        else
          cond = x.t.isfinite(), cexact = x.exact;
        switch (s.d % 5) {
          case 0: push(cond, 1, cexact); return;  // a bool value for later steps
          case 1: {
            Val a = floated(x), b = floated(y);
            same_precision(a, b);
            if (broadcast(cond.sizes(), a.t.sizes()) && broadcast(cond.sizes(), b.t.sizes()) &&
                broadcast(a.t.sizes(), b.t.sizes())) {
              push(where(cond, a.t, b.t), std::max(a.bound, b.bound), a.exact && b.exact);
              return;
            }
            push(where(cond, a.t, 0.0), a.bound, a.exact);
            return;
          }
          case 2: {
            Val a = floated(x);
            push(a.t.masked_fill(cond, 1.5), std::max(a.bound, 1.5), a.exact);
            return;
          }
          case 3: {
            Val a = floated(x, kFloat64);
            push(cond.to(a.t.dtype()) * a.t, a.bound, a.exact);
            return;
          }
          default: push(where(cond, 1.0, -2.0), 2, cexact); return;
        }
      }
      case kCast: {
        const Tensor& t = x.t;
        switch (s.c % 4) {
          case 0: push(t.to(t.dtype() == kFloat64 || noisy32(x) ? kFloat32 : kFloat64), x.bound, x.exact); return;
          case 1:
            if (x.exact && x.bound < 1e6) {  // to an integer type it fits (narrow ones wrap in later work)
              const uint32_t k = s.d % 5;
              if (k == 1 && x.bound < 100) { push(t.to(kInt8), x.bound, true); return; }
              if (k == 2 && x.bound < 200) {  // (abs has no bool form)
                push((t.dtype() == kBool ? t : t.abs()).to(kUInt8), x.bound, true);
                return;
              }
              if (k == 3 && x.bound < 30000) { push(t.to(kInt16), x.bound, true); return; }
              push(t.to(k == 4 ? kInt64 : kInt32), x.bound, true);
              return;
            }
            push(t.to(noisy32(x) ? kFloat32 : kFloat64), x.bound, x.exact);
            return;
          case 2: push(t.to(kFloat32), x.bound, x.exact); return;
          default:
            if (x.exact) { push(t.to(kBool), 1, true); return; }
            push(t.to(noisy32(x) ? kFloat32 : kFloat64), x.bound, x.exact);
            return;
        }
      }
      case kView: {
        bool w = x.writable;
        Tensor v = view_of(x.t, s.b, w);
        if (s.c % 3 == 0) { push(v, x.bound, x.exact, w); return; }  // a view as a value
        Val a = floated({v, x.bound, x.exact, w});
        if (s.c % 3 == 1) {
          push(s.d % 2 ? a.t * 3.0 : a.t.relu(), a.bound * 3, a.exact);
          return;
        }
        size_t yi = partner(xi, s.d, nlive, false);
        const Val& y = live_[yi];
        if (broadcast(v.sizes(), y.t.sizes())) {
          Val b = floated(y);
          same_precision(a, b);
          push(a.t + b.t, a.bound + b.bound, a.exact && b.exact);
        } else {
          push(a.t - 1.0, a.bound + 1, a.exact);
        }
        return;
      }
      case kReduce: {
        Val a = x.t.dtype() == kBool ? floated(x) : x;
        if (s.d % 5 == 4 && pairwise(a, s)) return;
        if (s.d % 5 == 0) {  // reduce a view: transposed, sliced, expanded, ...
          bool w = true;
          a.t = view_of(a.t, s.d / 5, w);
        } else if (s.d % 5 == 1) {  // a broadcast operand: reduced along dims it does not vary in
          a.t = expand_of(a.t, s.d / 5);
        }
        const Tensor& t = a.t;
        int64_t n = t.dim();
        std::vector<int64_t> dims;
        bool keep = s.c % 2;
        if (n > 0 && s.b % 4 != 0) {
          dims.push_back(int64_t(s.b % uint32_t(n)));
          if (n >= 2 && s.b % 3 == 0) {
            int64_t d2 = int64_t((s.b / 3) % uint32_t(n));
            if (d2 != dims[0]) dims.push_back(d2);
          }
          if (s.b % 5 == 0) dims[0] -= n;  // a negative dim
        }
        double numel = double(std::max<int64_t>(t.numel(), 1));
        bool f = is_float(t);
        switch ((s.c / 2) % 8) {
          case 0: push(t.sum(dims, keep), a.bound * numel, a.exact && !f); return;
          case 1:
            if (dims.empty() && s.d % 2) { push(t.sum(), a.bound * numel, a.exact && !f); return; }
            if (f) { push(t.mean(dims, keep), a.bound, false); return; }
            push(t.amax(dims, keep), a.bound, a.exact);
            return;
          case 2: push(t.amax(dims, keep), a.bound, a.exact); return;
          case 3: push(t.amin(dims, keep), a.bound, a.exact); return;
          case 4: {
            Val b = floated(a);
            push(b.t.var(dims, int64_t(s.d % 2), keep).nan_to_num(0.0, 1e6, -1e6), b.bound * b.bound * numel + 1e6,
                 false);
            return;
          }
          case 5: {
            Val b = floated(a);
            double p = s.d % 3 == 0 ? 1.0 : 2.0;
            push(b.t.norm(p, dims, keep), b.bound * numel, false);
            return;
          }
          case 6:
            if (f && a.bound < 3 && numel <= 8) { push(t.prod(dims, keep), std::pow(a.bound, numel) + 1, false); return; }
            push(t.sum(dims, keep), a.bound * numel, a.exact && !f);
            return;
          default:
            if (f) { push(t.mean(), a.bound, false); return; }
            push(t.amin(), a.bound, a.exact);
            return;
        }
      }
      case kSoftmax: {
        Val a = floated(x);
        if (a.t.dim() == 0) { push(a.t.sigmoid(), 1, false); return; }
        int64_t d = s.b % 2 ? -1 : int64_t(s.c % uint32_t(a.t.dim()));
        if (s.d % 2) push(a.t.softmax(d), 1, false);
        else push(a.t.log_softmax(d), a.bound * 2 + std::log(double(a.t.numel()) + 1) + 1, false);
        return;
      }
      case kNormalize: {
        Val a = floated(x);
        const Tensor& t = a.t;
        if (t.dim() == 0) { push(t - t.mean(), 2 * a.bound, false); return; }
        int64_t d = s.b % 2 ? -1 : int64_t(s.c % uint32_t(t.dim()));
        switch (s.d % 6) {
          case 0: push(t - t.mean({d}, true), 2 * a.bound, false); return;
          case 1: push(t / (t.abs().sum({d}, true) + 1), 1, false); return;
          case 2: {
            Tensor e = (t - t.amax({d}, true)).exp();
            push(e / e.sum({d}, true), 1, false);
            return;
          }
          case 3: {  // layer norm
            Tensor c = t - t.mean({d}, true);
            push(c / (c.pow(2).mean({d}, true) + 1e-5).sqrt(), 1e3 * a.bound, false);
            return;
          }
          case 4:  // a keepdim=false reduction, unsqueezed back
            push(t - t.amax({d}, false).unsqueeze(d < 0 ? t.dim() - 1 : d), 2 * a.bound, a.exact);
            return;
          default: push(t / (t.norm(2, {d}, true) + 1), 1, false); return;
        }
      }
      case kMatmul: {
        Val a = floated(x);
        const Tensor& t = a.t;
        Tensor out;
        double bound;
        if (t.dim() == 0) { push(t * 2.0, a.bound * 2, a.exact); return; }
        if (a.bound > 30) { push(t.tanh(), 1, false); return; }
        // a partner with a matching contraction dim, else t's own transpose
        Tensor other;
        double ob = a.bound;
        int64_t k = t.size(-1);
        for (size_t j = 0; j < nlive && !other.defined(); ++j) {
          const Val& y = live_[(pick(s.b, nlive) + j) % nlive];
          if (y.terminal) continue;
          if (noisy32(y) && t.dtype() == kFloat64) continue;
          if (y.t.dim() == 2 && y.t.size(0) == k && y.t.dtype() != kBool) other = y.t.to(t.dtype()), ob = y.bound;
          else if (y.t.dim() == 1 && y.t.size(0) == k && y.t.dtype() != kBool && s.c % 3 == 0)
            other = y.t.to(t.dtype()), ob = y.bound;
        }
        if (!other.defined()) other = t.dim() >= 2 ? t.transpose(-1, -2) : t;
        // (a flattened large value times its transpose would be huge: larger shapes only)
        if (t.numel() / std::max<int64_t>(k, 1) * (other.dim() >= 2 ? other.size(-1) : 1) > (int64_t(1) << 17)) {
          push(t.tanh(), 1, false);
          return;
        }
        if (t.dim() == 2 && other.dim() == 2 && s.c % 2) out = t.mm(other);
        else out = t.matmul(other);
        bound = a.bound * ob * double(k);
        // the epilogue
        switch (s.d % 5) {
          case 0: push(out.relu(), bound, false); return;
          case 1: {
            size_t yi = partner(xi, s.d / 5, nlive, false);
            const Val& y = live_[yi];
            if (fits(y.t.sizes(), out.sizes()) && y.t.dtype() != kBool) {
              Val o{out, bound, false, true}, b = y;
              same_precision(o, b);
              push((o.t + b.t).tanh(), 1, false);  // + bias, activation
              return;
            }
            push(out * 0.5 + 1.0, bound, false);
            return;
          }
          case 2: push(out * 0.125, bound, false); return;
          case 3: push(out, bound, false); return;
          default: push(out.sigmoid() * out, bound, false); return;
        }
      }
      case kInplace:
      case kInplaceView: {
        // the target: a writable tensor (not bool); through a view of it for kInplaceView
        size_t ti = xi;
        auto unfit = [&](size_t i) { return !live_[i].writable || live_[i].terminal || live_[i].t.dtype() == kBool; };
        for (size_t k = 0; k < nlive && unfit(ti); ++k) ti = (xi + k) % nlive;
        if (unfit(ti)) return;
        Val target = live_[ti];
        Tensor dst = target.t;
        if (s.kind == kInplaceView) {
          bool w = true;
          if (dst.dim() == 0) dst = dst.unsqueeze(0);
          else dst = view_of(dst, s.b, w, /*for_write=*/true);
          if (!w) return;
          if (s.c % 4 == 0) push(dst, target.bound, target.exact);  // the view, read after the write
        }
        bool f = is_float(dst);
        // the source: no memory shared with the target, unless it is the target itself
        size_t yi = partner(ti, s.d, nlive, true);
        Val y = live_[yi];
        bool same = y.t.is_same(target.t);
        bool src_ok = fits(y.t.sizes(), dst.sizes()) && (same ? dst.is_same(target.t) : !y.t.is_alias_of(dst)) &&
                      (f || !is_float(y.t)) && !(noisy32(y) && dst.dtype() == kFloat64);
        switch ((s.c / 4) % 6) {
          case 0:
            if (src_ok && y.t.dtype() != kBool && target.bound + y.bound < 1e6) {
              dst.add_(y.t);
              wrote(dst, target.bound + y.bound, target.exact && y.exact);
              break;
            }
            [[fallthrough]];
          case 1:
            if (f) dst.mul_(0.5); else dst.mul_(2);
            wrote(dst, target.bound * 2, target.exact);
            break;
          case 2:
            if (src_ok && y.t.dtype() != kBool && target.bound + y.bound < 1e6) {
              dst.sub_(y.t, 2);
              wrote(dst, target.bound + 2 * y.bound, target.exact && y.exact);
              break;
            }
            [[fallthrough]];
          case 3:
            dst.fill_(f ? Scalar(0.25) : Scalar(int64_t(7)));
            wrote(dst, 7, true);
            break;
          case 4: {
            // copy_ converts dtypes: floats truncated into ints only when exact and bounded;
            // sometimes a 0-d source (broadcast into the whole target)
            if (s.c % 3 == 0 && y.t.dtype() != kBool) y.t = y.t.amax();
            bool ok = fits(y.t.sizes(), dst.sizes()) && (same ? dst.is_same(target.t) : !y.t.is_alias_of(dst)) &&
                      (f || !is_float(y.t) || (y.exact && y.bound < 1e6)) &&
                      !(noisy32(y) && dst.dtype() == kFloat64);
            if (ok) {
              dst.copy_(y.t);
              wrote(dst, y.bound, y.exact);
              break;
            }
            dst.copy_(dst * 2);
            wrote(dst, target.bound * 2, target.exact);
            break;
          }
          default:
            if (f) { dst.relu_(); wrote(dst, target.bound, target.exact); }
            else { dst.clamp_(Scalar(int64_t(-5)), Scalar(int64_t(5))); wrote(dst, 5, target.exact); }
            break;
        }
        focus_ = int(ti);
        return;
      }
      case kIndexReduce: {
        Val a = x.t.dtype() == kBool ? floated(x) : x;
        const Tensor& t = a.t;
        const bool f = is_float(t);
        if (t.dim() == 0) { push(t * 3, a.bound * 3, a.exact); return; }
        int64_t d = int64_t(s.b % uint32_t(t.dim()));
        const double n = double(t.size(d));
        if (s.b % 7 == 0) d -= t.dim();  // a negative dim
        const bool keep = s.c % 2;
        switch ((s.c / 2) % 6) {
          case 0:
          case 1: {  // index reductions: ties go to the first index, so exact values only
            const bool mx = (s.c / 2) % 6 == 0;
            if (!a.exact) { push(mx ? t.amax({d}, keep) : t.amin({d}, keep), a.bound, false); return; }
            if (s.d % 3 == 0) { push(mx ? t.argmax() : t.argmin(), double(t.numel()), true); return; }
            if (s.d % 3 == 1) { push(mx ? t.argmax(d, keep) : t.argmin(d, keep), n, true); return; }
            auto [v, i] = mx ? t.max(d, keep) : t.min(d, keep);
            push(v, a.bound, true);
            push(i, n, true);
            return;
          }
          case 2:
          case 3: push(t.cumsum(d), a.bound * n, a.exact && !f); return;
          case 4: {
            Val b = floated(a);
            push(b.t.logsumexp({d}, keep), b.bound + std::log(n) + 1, false);
            return;
          }
          default: {  // any / all of a condition (of exact values only: rounding flips one)
            Tensor cond = a.exact ? t > 0 : t.isfinite();
            push(s.d % 2 ? cond.any({d}, keep) : cond.all({d}, keep), 1, true);
            return;
          }
        }
      }
      case kIntegerOps: {
        size_t yi = partner(xi, s.b, nlive, false);
        Val a = x.t.dtype() == kBool ? Val{x.t.to(kInt32), 1, x.exact, true} : x;
        Val b = live_[yi].t.dtype() == kBool ? Val{live_[yi].t.to(kInt32), 1, live_[yi].exact, true} : live_[yi];
        if (!a.exact || !b.exact) {  // a remainder of a rounded value jumps: exact operands only
          push(floated(a).t.clamp(-2.0, 2.0), 2, false);
          return;
        }
        if (!is_float(a.t) && !is_float(b.t)) {
          Tensor den = b.t.abs() + 1;  // never zero
          switch (s.c % 6) {
            case 0: push(a.t.div(den, "floor"), a.bound, true); return;
            case 1: push(a.t.div(den, "trunc"), a.bound, true); return;
            case 2: push(a.t.remainder(den), b.bound + 1, true); return;
            case 3: push(a.t.fmod(den), b.bound + 1, true); return;
            case 4: push(s.d % 2 ? a.t.bitwise_xor(b.t) : a.t.bitwise_and(b.t), 2 * (a.bound + b.bound) + 1, true); return;
            default: push(a.t.floor_divide(-3), a.bound / 3 + 1, true); return;
          }
        }
        Val fa = floated(a), fb = floated(b);
        same_precision(fa, fb);
        Tensor den = fb.t.abs() + 1;
        switch (s.c % 3) {
          case 0: push(fa.t.remainder(den), fb.bound + 1, true); return;
          case 1: push(fa.t.fmod(den), fb.bound + 1, true); return;
          default: push(fa.t.div(den, "floor"), fa.bound + 1, true); return;
        }
      }
      case kIndexing: {
        const Tensor& t = x.t;
        if (t.dim() == 0) { push(cat({t.unsqueeze(0), t.unsqueeze(0)}), x.bound, x.exact); return; }
        const int64_t d = int64_t(s.b % uint32_t(t.dim())), n = t.size(d);
        switch (s.c % 3) {
          case 0: {  // x and part of x (doubled) along d
            Tensor part = t.slice(d, 0, (n + 1) / 2);
            push(cat({t, t.dtype() == kBool ? part : part * 2}, d), x.bound * 2, x.exact);
            return;
          }
          case 1: {  // rows of x picked by an index computed in the program (repeats, any order)
            const int64_t m = 1 + int64_t(s.d % uint32_t(n + 2));
            Tensor idx = (arange(m, TensorOptions(kInt64)) * int64_t(1 + s.d % 5) + int64_t(s.c % 7)).remainder(n);
            push(t.index_select(d, idx), x.bound, x.exact);
            return;
          }
          default: {  // gather along d with an index of x's sizes
            Tensor idx = (arange(t.numel(), TensorOptions(kInt64)) * int64_t(1 + s.d % 3) + int64_t(s.c % 5))
                             .remainder(n)
                             .view(t.sizes());
            push(t.gather(d, idx), x.bound, x.exact);
            return;
          }
        }
      }
      case kFactory: {
        const Val a = x.t.dtype() == kBool ? floated(x) : x;
        const Tensor& t = a.t;
        const int64_t n = t.dim() ? t.size(-1) : 1;
        Tensor f;
        double most = 0;
        bool exact = a.exact;
        switch (s.c % 3) {
          case 0:  // integers, or floats from a float step
            f = s.d % 2 ? arange(int64_t(s.b % 5), int64_t(s.b % 5) + 2 * n, 2)
                        : arange(-0.5, -0.5 + 0.25 * double(n), 0.25, TensorOptions(kFloat32)).slice(0, 0, n);
            most = double(s.b % 5) + 2.0 * double(n);
            break;
          case 1:
            f = linspace(-2, 3, n, TensorOptions(s.d % 2 ? kFloat64 : kFloat32));
            most = 3;
            exact = false;
            break;
          default:  // rows of an identity (transposed when square), or a row of one
            f = t.dim() >= 2 ? eye(t.size(-2), n) : eye(1, n).squeeze(0);
            if (t.dim() >= 2 && t.size(-2) == n && s.d % 3 == 0) f = f.t();
            most = 1;
            break;
        }
        if (s.d % 4 == 1 && f.dim() >= 1 && f.size(0) > 1) {  // written through a view of it
          f.slice(0, 0, 1).mul_(3);
          most *= 3;
        } else if (s.d % 4 == 2) {
          f.add_(1);
          most += 1;
        }
        push(t + f, a.bound + most, exact);
        return;
      }
      case kHalf: {
        // Kernels compute 16-bit floats in float32 and round at the store, eager rounds after
        // every op: the two differ in the last bits of a chain, within float16's tolerance but
        // not float32's, so no later step reads the value (Val::terminal); it is an output.
        Val a = floated(x);
        if (a.bound > 1e4) a = {a.t.tanh(), 1, false, true};
        Tensor h = a.t.to(s.c % 2 ? kFloat16 : kBFloat16);
        const int64_t d = h.dim() ? -1 : 0;
        switch (s.d % 5) {
          case 0: h = h * 2 + 1; break;
          case 1: h = a.bound < 10 ? (h * 0.1).exp() : h.relu(); break;
          case 2: h = h.dim() ? h.sum({d}, bool(s.c / 2 % 2)) : h.neg(); break;
          case 3: h = h.dim() ? h.softmax(d) : h.sigmoid(); break;
          default: h = h.abs() - h; break;
        }
        live_.push_back({h, a.bound * 4 + 2, false, true, true});
        return;
      }
      case kKeepView: {
        bool w = x.writable;
        Tensor v = view_of(x.t, s.b, w);
        push(v, x.bound, x.exact, w);
        return;
      }
      default: return;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The graphs, traced once.

struct Case {
  uint32_t seed = 0;
  std::string text;  // the graph as traced
  ir::Graph graph;
  std::string error;  // the generator's program did not trace (a generator bug)
};

// Turns graph input k into a tensor constant with random data, keeping its name (the traced
// programs have no tensor constants: fold and constant buffers get work this way). Only a
// row-major input that nothing writes; nullopt otherwise.
inline std::optional<std::string> constify(const ir::Graph& g, size_t k, uint64_t seed) {
  const ir::Value* in = g.inputs()[k];
  const ir::Type& t = in->type;
  if (t.is_scalar() || t.strides != shape::contiguous_strides(t.sizes)) return std::nullopt;
  for (const auto& n : g.nodes())
    if (n->op == OpId::Copy && ir::alias_root(n->inputs[0]) == in) return std::nullopt;
  manual_seed(seed);
  Tensor data = t.dtype == kInt32 ? randint(-20, 20, t.sizes).to(kInt32) : randn(t.sizes).to(t.dtype);
  std::string text = ir::print(g);
  std::string head = "graph @" + g.name() + "(";
  for (const ir::Value* v : g.inputs())
    if (v != in) head += (head.back() == '(' ? "" : ", ") + ("%" + v->name) + ": " + v->type.str();
  head += ") {\n";
  head += "  %" + in->name + " = constant() {data=\"" + ir::bytes_to_hex(ir::encode_constant(data)) + "\"} : " + t.str() + "\n";
  return head + text.substr(text.find('\n') + 1);
}

inline Case trace_case(uint32_t seed, Shapes shapes = kSmallShapes) {
  Case c;
  c.seed = seed;
  Program p = make_program(seed, shapes);
  try {
    CompileOptions opts;
    opts.fullgraph = true;
    opts.name = "property seed " + std::to_string(seed);
    auto f = compile([&p](const std::vector<Tensor>& in) { return Runner(p, in).run(); }, opts);
    auto e = f.explain(make_inputs(p, seed));
    if (e.graphs.size() != 1) {
      c.error = "traced into " + std::to_string(e.graphs.size()) + " graphs";
      return c;
    }
    c.text = e.graphs[0].text;
    c.graph = ir::parse(c.text);
    // one graph in four: an input becomes a constant
    if (seed % 4 == 3 && c.graph.inputs().size() >= 2) {
      size_t k = seed / 4 % c.graph.inputs().size();
      if (auto text = constify(c.graph, k, seed)) {
        c.text = *text;
        c.graph = ir::parse(c.text);
      }
    }
  } catch (const std::exception& ex) {
    c.error = ex.what();
  }
  return c;
}

// The traced graphs of seeds 1..count (or as the environment says), traced once per process.
inline const std::vector<Case>& cases(uint32_t count, Shapes shapes = kSmallShapes) {
  static std::map<std::pair<uint32_t, Shapes>, std::vector<Case>> traced;
  std::vector<Case>& v = traced[{count, shapes}];
  if (!v.empty()) return v;
  auto [first, last] = seed_range(int(count), "KILN_PROPERTY_GRAPHS");
  if (const char* s = std::getenv("KILN_PROPERTY_SEED")) first = last = uint32_t(std::max(1, std::atoi(s)));
  for (uint32_t seed = first; seed <= last; ++seed) v.push_back(trace_case(seed, shapes));
  return v;
}

inline std::string header(const Case& c) { return "seed " + std::to_string(c.seed) + ", graph:\n" + c.text; }

}  // namespace kiln::testing::property
