// The workload registry: the programs of the project's workload list over kiln ops, with their
// inputs per size tier. See workloads.h.
#include "workloads.h"

#include <kiln/ir/graph.h>

#include <charconv>
#include <cmath>
#include <utility>

namespace kiln::workloads {

namespace {

constexpr int64_t M = int64_t(1) << 20;

using Sizes = std::vector<int64_t>;

InputDesc input(std::string name, Sizes small, Sizes bench, Sizes gpu, Init init = Init::Normal,
                DType dt = kFloat32) {
  InputDesc d;
  d.name = std::move(name);
  d.dtype = dt;
  d.sizes[0] = std::move(small);
  d.sizes[1] = std::move(bench);
  d.sizes[2] = std::move(gpu);
  d.init = init;
  return d;
}

std::vector<Workload> build() {
  std::vector<Workload> ws;
  auto add = [&](std::string name, std::string description, std::vector<InputDesc> inputs, RunFn run) -> Workload& {
    Workload w;
    w.name = std::move(name);
    w.description = std::move(description);
    w.inputs = std::move(inputs);
    w.run = std::move(run);
    ws.push_back(std::move(w));
    return ws.back();
  };
  const Sizes s1k{1000}, s16M{16 * M}, s100M{100 * M};

  add("add_sin_cos", "(a + b) + sin(a) * cos(b)",
      {input("a", s1k, s16M, s100M), input("b", s1k, s16M, s100M)},
      [](const std::vector<Tensor>& in) {
        const Tensor &a = in.at(0), &b = in.at(1);
        return std::vector<Tensor>{(a + b) + sin(a) * cos(b)};
      });

  add("poly", "pow(x, 2) + x * 3", {input("x", {10000}, s16M, s100M)}, [](const std::vector<Tensor>& in) {
    const Tensor& x = in.at(0);
    return std::vector<Tensor>{pow(x, 2) + x * 3};
  });

  add("where_scale", "where(x > 0.5, x * 2, x / 2)",
      {input("x", {1000, 1000}, {4096, 4096}, {16384, 16384}, Init::Uniform)}, [](const std::vector<Tensor>& in) {
        const Tensor& x = in.at(0);
        return std::vector<Tensor>{where(x > 0.5, x * 2, x / 2)};
      });

  add("broadcast_bias", "m + bias",
      {input("m", {1000, 512}, {8192, 4096}, {65536, 4096}), input("bias", {512}, {4096}, {4096})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in.at(0) + in.at(1)}; });

  add("transpose_add", "x.t() + y",
      {input("x", {64, 64}, {4096, 4096}, {16384, 16384}), input("y", {64, 64}, {4096, 4096}, {16384, 16384})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in.at(0).t() + in.at(1)}; });

  add("unrolled_loop", "for (i = 0; i < 16; ++i) x = x * 0.5 + y;",
      {input("x", s1k, s16M, s100M), input("y", s1k, s16M, s100M)}, [](const std::vector<Tensor>& in) {
        Tensor x = in.at(0);
        const Tensor& y = in.at(1);
        for (int i = 0; i < 16; ++i) x = x * 0.5 + y;
        return std::vector<Tensor>{x};
      });

  add("inplace_chain", "x.add_(1); x.relu_(); x.clamp_(0, 6); x.mul_(0.5); return x  (x: the input)",
      {input("x", s1k, s16M, s100M, Init::Wide)}, [](const std::vector<Tensor>& in) {
        Tensor x = in.at(0);  // a handle on the caller's tensor: the writes reach it
        x.add_(1);
        x.relu_();
        x.clamp_(0, 6);
        x.mul_(0.5);
        return std::vector<Tensor>{x};
      }).mutates_inputs = true;

  add("gelu_tanh", "0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * pow(x, 3))))",
      {input("x", s1k, s16M, s100M)}, [](const std::vector<Tensor>& in) {
        const Tensor& x = in.at(0);
        return std::vector<Tensor>{0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * pow(x, 3))))};
      });

  add("sum_f64", "t.sum()", {input("t", s1k, {M}, s100M, Init::Normal, kFloat64)},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in.at(0).sum()}; });

  add("row_sum", "x.sum(1)", {input("x", {64, 64}, {4096, 4096}, {16384, 16384})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in.at(0).sum({1})}; });

  add("softmax", "softmax(x, -1)", {input("x", {64, 128}, {4096, 1024}, {65536, 1024})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{softmax(in.at(0), -1)}; });

  add("log_softmax", "log_softmax(x, -1)", {input("x", {64, 128}, {4096, 1024}, {65536, 1024})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{log_softmax(in.at(0), -1)}; });

  add("layernorm", "(x - mean) / sqrt(var + 1e-5) * w + b  over the last dim (biased var)",
      {input("x", {64, 128}, {4096, 1024}, {65536, 1024}), input("w", {128}, {1024}, {1024}),
       input("b", {128}, {1024}, {1024})},
      [](const std::vector<Tensor>& in) {
        const Tensor &x = in.at(0), &w = in.at(1), &b = in.at(2);
        Tensor mean = x.mean({-1}, true);
        Tensor var = x.var({-1}, /*correction=*/0, true);
        return std::vector<Tensor>{(x - mean) / sqrt(var + 1e-5) * w + b};
      });

  add("nbody_forces",
      "diff = pos[:, None, :] - pos[:, :, None]; dist = diff.norm(dim=0); "
      "(diff / dist * (G * mass[:, None] * mass[None, :] / dist**2)[None]).nansum(dim=2), G = 6.67e-11",
      {input("pos", {2, 64}, {2, 2500}, {2, 10000}), input("mass", {64}, {2500}, {10000}, Init::Positive)},
      [](const std::vector<Tensor>& in) {
        const double G = 6.67e-11;
        const Tensor &pos = in.at(0), &mass = in.at(1);
        Tensor diff = pos.unsqueeze(1) - pos.unsqueeze(2);  // [2, N, N]
        Tensor dist = diff.norm(2, {0});                     // [N, N]
        Tensor direction = diff / dist;
        Tensor forces = G * mass.unsqueeze(1) * mass.unsqueeze(0) / pow(dist, 2);
        return std::vector<Tensor>{(direction * forces.unsqueeze(0)).nansum({2})};  // [2, N]
      });

  add("bias_relu", "relu(matmul(x, W) + b)",
      {input("x", {64, 64}, {1024, 1024}, {8192, 8192}), input("W", {64, 64}, {1024, 1024}, {8192, 8192}),
       input("b", {64}, {1024}, {8192})},
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{relu(matmul(in.at(0), in.at(1)) + in.at(2))};
      });

  add("attention_scores", "softmax(einsum(\"bhqd,bhkd->bhqk\", q, k) / sqrt(64), -1)",
      {input("q", {2, 2, 16, 64}, {32, 8, 100, 64}, {32, 8, 1024, 64}),
       input("k", {2, 2, 16, 64}, {32, 8, 100, 64}, {32, 8, 1024, 64})},
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{softmax(einsum("bhqd,bhkd->bhqk", {in.at(0), in.at(1)}) / std::sqrt(64.0), -1)};
      });

  {
    Workload& w = add("branch_sign", "if (x.sum() > 0) return x * 2; else return x * -2;",
                      {input("x", {100}, {M}, s100M)}, [](const std::vector<Tensor>& in) {
                        const Tensor& x = in.at(0);
                        if (x.sum() > 0)  // a data-dependent host branch: a graph break and a guard
                          return std::vector<Tensor>{x * 2};
                        return std::vector<Tensor>{x * -2};
                      });
    w.paths = 2;
    w.steer = [](std::vector<Tensor>& in, int path) {
      auto on_path = [&] {
        double s = in.at(0).sum().item<double>();
        return path == 0 ? s > 0 : !(s > 0);
      };
      if (on_path()) return;
      in.at(0) = -in.at(0);
      KILN_CHECK(on_path(), "workloads", "cannot make branch_sign inputs of dtype ", name(in.at(0).dtype()),
                 " take path ", path);
    };
  }

  add("add_sin_cos_bf16", "(a + b) + sin(a) * cos(b) in bfloat16 (float16 with a dtype override)",
      {input("a", s1k, s16M, s100M, Init::Normal, kBFloat16), input("b", s1k, s16M, s100M, Init::Normal, kBFloat16)},
      [](const std::vector<Tensor>& in) {
        const Tensor &a = in.at(0), &b = in.at(1);
        return std::vector<Tensor>{(a + b) + sin(a) * cos(b)};
      });
  return ws;
}

}  // namespace

std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::Small: return "small";
    case Tier::Bench: return "bench";
    case Tier::Gpu: return "gpu";
  }
  return "?";
}

std::optional<Tier> tier_from_name(std::string_view s) {
  if (s == "small") return Tier::Small;
  if (s == "bench") return Tier::Bench;
  if (s == "gpu") return Tier::Gpu;
  return std::nullopt;
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (auto d = ir::dtype_from_short_name(s)) return d;
  try {
    return dtype_from_name(s);  // the long names: float32, bfloat16, ...
  } catch (const Error&) {
    return std::nullopt;
  }
}

namespace {
std::vector<int64_t> parse_sizes(std::string s, const std::string& context) {
  if (s == "scalar" || s == "[]") return {};
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (true) {
    size_t end = s.find_first_of("x,", start);
    std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    int64_t v = -1;
    auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || r.ec != std::errc() || r.ptr != part.data() + part.size() || v < 0)
      KILN_FAIL("workloads", context, "bad size '", part, "' (sizes are non-negative integers: 1024x1024, [] for 0-d)");
    sizes.push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return sizes;
}
}  // namespace

InputOverride parse_input_override(const std::string& spec) {
  const std::string context = "--input '" + spec + "': ";
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    KILN_FAIL("workloads", context, "expected NAME=SIZES[:DTYPE], e.g. a=1024x1024:f32");
  InputOverride o;
  o.name = spec.substr(0, eq);
  std::string rest = spec.substr(eq + 1);
  size_t colon = rest.find(':');
  std::string shape = rest.substr(0, colon);
  if (colon != std::string::npos) {
    std::string dt = rest.substr(colon + 1);
    if (dt.empty()) KILN_FAIL("workloads", context, "missing dtype after ':'");
    o.dtype = parse_dtype(dt);
    if (!o.dtype) KILN_FAIL("workloads", context, "unknown dtype '", dt, "' (one of b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64)");
  }
  if (!shape.empty()) o.sizes = parse_sizes(shape, context);
  return o;
}

std::string InputSpec::str() const {
  std::string s = name + ": " + std::string(ir::short_name(dtype)) + "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::vector<InputSpec> Workload::input_specs(Tier tier, std::optional<DType> dtype,
                                             const std::vector<InputOverride>& overrides) const {
  std::vector<InputSpec> specs;
  for (const InputDesc& d : inputs) {
    InputSpec s;
    s.name = d.name;
    s.dtype = dtype && is_floating(d.dtype) ? *dtype : d.dtype;
    s.sizes = d.sizes[int(tier)];
    specs.push_back(std::move(s));
  }
  for (const InputOverride& o : overrides) {
    InputSpec* target = nullptr;
    for (InputSpec& s : specs)
      if (s.name == o.name) target = &s;
    if (!target) {
      std::string names;
      for (const InputDesc& d : inputs) names += (names.empty() ? "" : ", ") + d.name;
      KILN_FAIL("workloads", "workload '", name, "' has no input '", o.name, "' (its inputs: ", names, ")");
    }
    if (o.dtype) target->dtype = *o.dtype;
    if (o.sizes) target->sizes = *o.sizes;
  }
  return specs;
}

Tensor make_tensor(const InputSpec& spec, Init init) {
  const DType dt = spec.dtype;
  if (dt == kBool) return rand(spec.sizes) > 0.5;
  if (!is_floating(dt)) {
    // nonzero integers: 1..10, with a random sign where the dtype has one
    Tensor mag = randint(1, 11, spec.sizes, dt);
    if (!is_signed(dt) || init == Init::Uniform || init == Init::Positive) return mag;
    Tensor sign = randint(0, 2, spec.sizes, dt) * 2 - 1;
    return mag * sign;
  }
  switch (init) {
    case Init::Normal: return randn(spec.sizes, dt);
    case Init::Uniform: return rand(spec.sizes, dt);
    case Init::Positive: return rand(spec.sizes, dt) + 0.1;
    case Init::Wide: return randn(spec.sizes, dt) * 4;
  }
  return randn(spec.sizes, dt);
}

std::vector<ir::Slot> graph_inputs(const ir::Graph& g, uint64_t seed) {
  std::vector<ir::Slot> ins;
  manual_seed(seed);
  for (const ir::Value* v : g.inputs()) {
    ir::Slot s;
    const ir::Type& t = v->type;
    if (t.is_scalar() || t.wrapped) {
      s.is_scalar = true;
      s.scalar = t.dtype == kBool ? Scalar(true) : is_floating(t.dtype) ? Scalar(1.5) : Scalar(int64_t(3));
    } else {
      int64_t extent = 1;
      for (size_t d = 0; d < t.sizes.size(); ++d) extent += (t.sizes[d] - 1) * std::max<int64_t>(t.strides[d], 0);
      Tensor base = make_tensor(InputSpec{v->name, t.dtype, {std::max<int64_t>(extent, 0)}}, Init::Normal);
      s.tensor = base.as_strided(t.sizes, t.strides, 0);
    }
    ins.push_back(std::move(s));
  }
  return ins;
}

std::vector<Tensor> Workload::make_inputs(Tier tier, uint64_t seed, std::optional<DType> dtype,
                                          const std::vector<InputOverride>& overrides) const {
  std::vector<InputSpec> specs = input_specs(tier, dtype, overrides);
  manual_seed(seed);
  std::vector<Tensor> out;
  out.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) out.push_back(make_tensor(specs[i], inputs[i].init));
  return out;
}

std::vector<std::vector<Tensor>> Workload::path_inputs(Tier tier, uint64_t seed, std::optional<DType> dtype,
                                                       const std::vector<InputOverride>& overrides) const {
  std::vector<std::vector<Tensor>> sets;
  for (int p = 0; p < paths; ++p) {
    std::vector<Tensor> in = make_inputs(tier, seed + uint64_t(p), dtype, overrides);
    if (steer) steer(in, p);
    sets.push_back(std::move(in));
  }
  return sets;
}

const std::vector<Workload>& all_workloads() {
  static const std::vector<Workload> ws = build();
  return ws;
}

const Workload* find_workload(std::string_view name) {
  for (const Workload& w : all_workloads())
    if (w.name == name) return &w;
  return nullptr;
}

}  // namespace kiln::workloads
