// kiln-bench's libtorch peer (built only when CMake finds Debian's libtorch-dev): the workloads
// of the registry written with libtorch's C++ API (ATen), run in kiln-bench's process on
// byte-for-byte copies of kiln's inputs, checked against kiln eager and timed interleaved with
// kiln's variants. The programs are the registry's (tools/workloads/workloads.cpp), op for op.
// Tensors are allocated by libtorch's CPU allocator, i.e. this process's malloc.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "bench.h"

namespace kiln::bench::libtorch {

namespace {

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

at::ScalarType to_aten(DType d) {
  switch (d) {
    case DType::Bool: return at::kBool;
    case DType::UInt8: return at::kByte;
    case DType::Int8: return at::kChar;
    case DType::Int16: return at::kShort;
    case DType::Int32: return at::kInt;
    case DType::Int64: return at::kLong;
    case DType::Float16: return at::kHalf;
    case DType::BFloat16: return at::kBFloat16;
    case DType::Float32: return at::kFloat;
    case DType::Float64: return at::kDouble;
  }
  KILN_FAIL("bench", "libtorch: unknown dtype");
}

DType to_kiln(at::ScalarType s) {
  for (DType d : {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::Float16,
                  DType::BFloat16, DType::Float32, DType::Float64})
    if (to_aten(d) == s) return d;
  KILN_FAIL("bench", "libtorch: no kiln dtype for ", c10::toString(s));
}

// A libtorch tensor with the same sizes, dtype and values as `t` (a dense copy of its bytes).
at::Tensor copy_to_aten(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  at::Tensor a = at::empty(sizes, at::TensorOptions().dtype(to_aten(c.dtype())));
  if (c.nbytes() > 0) std::memcpy(a.data_ptr(), c.data_ptr(), size_t(c.nbytes()));
  return a;
}

Tensor copy_to_kiln(const at::Tensor& a) {
  at::Tensor c = a.contiguous();
  std::vector<int64_t> sizes = c.sizes().vec();
  Tensor t = empty(sizes, to_kiln(c.scalar_type()));
  if (t.nbytes() > 0) std::memcpy(t.data_ptr(), c.data_ptr(), size_t(t.nbytes()));
  return t;
}

at::Tensor add_sin_cos(const std::vector<at::Tensor>& in) {
  const at::Tensor &a = in.at(0), &b = in.at(1);
  return (a + b) + at::sin(a) * at::cos(b);
}

const std::map<std::string, Fn>& programs() {
  static const std::map<std::string, Fn> p = {
      {"add_sin_cos", add_sin_cos},
      {"poly", [](const std::vector<at::Tensor>& in) { return at::pow(in.at(0), 2) + in.at(0) * 3; }},
      {"where_scale",
       [](const std::vector<at::Tensor>& in) {
         const at::Tensor& x = in.at(0);
         return at::where(x > 0.5, x * 2, x / 2);
       }},
      {"broadcast_bias", [](const std::vector<at::Tensor>& in) { return in.at(0) + in.at(1); }},
      {"transpose_add", [](const std::vector<at::Tensor>& in) { return in.at(0).t() + in.at(1); }},
      {"unrolled_loop",
       [](const std::vector<at::Tensor>& in) {
         at::Tensor x = in.at(0);
         const at::Tensor& y = in.at(1);
         for (int i = 0; i < 16; ++i) x = x * 0.5 + y;
         return x;
       }},
      {"inplace_chain",
       [](const std::vector<at::Tensor>& in) {
         at::Tensor x = in.at(0);  // writes into the input, as the registry's program does
         x.add_(1);
         x.relu_();
         x.clamp_(0, 6);
         x.mul_(0.5);
         return x;
       }},
      {"gelu_tanh",
       [](const std::vector<at::Tensor>& in) {
         const at::Tensor& x = in.at(0);
         return 0.5 * x * (1 + at::tanh(0.7978845608 * (x + 0.044715 * at::pow(x, 3))));
       }},
      {"sum_f64", [](const std::vector<at::Tensor>& in) { return in.at(0).sum(); }},
      {"row_sum", [](const std::vector<at::Tensor>& in) { return in.at(0).sum(std::vector<int64_t>{1}); }},
      {"softmax", [](const std::vector<at::Tensor>& in) { return at::softmax(in.at(0), -1); }},
      {"log_softmax", [](const std::vector<at::Tensor>& in) { return at::log_softmax(in.at(0), -1); }},
      {"layernorm",
       [](const std::vector<at::Tensor>& in) {
         const at::Tensor &x = in.at(0), &w = in.at(1), &b = in.at(2);
         const std::vector<int64_t> last{-1};
         at::Tensor mean = x.mean(last, /*keepdim=*/true);
         at::Tensor var = x.var(at::IntArrayRef(last), /*unbiased=*/false, /*keepdim=*/true);
         return (x - mean) / at::sqrt(var + 1e-5) * w + b;
       }},
      {"nbody_forces",
       [](const std::vector<at::Tensor>& in) {
         const double G = 6.67e-11;
         const at::Tensor &pos = in.at(0), &mass = in.at(1);
         at::Tensor diff = pos.unsqueeze(1) - pos.unsqueeze(2);
         at::Tensor dist = diff.norm(c10::optional<at::Scalar>(2), std::vector<int64_t>{0});
         at::Tensor direction = diff / dist;
         at::Tensor forces = G * mass.unsqueeze(1) * mass.unsqueeze(0) / at::pow(dist, 2);
         return at::nansum(direction * forces.unsqueeze(0), std::vector<int64_t>{2});
       }},
      {"bias_relu",
       [](const std::vector<at::Tensor>& in) { return at::relu(at::matmul(in.at(0), in.at(1)) + in.at(2)); }},
      {"attention_scores",
       [](const std::vector<at::Tensor>& in) {
         return at::softmax(at::einsum("bhqd,bhkd->bhqk", {in.at(0), in.at(1)}) / std::sqrt(64.0), -1);
       }},
      {"branch_sign",
       [](const std::vector<at::Tensor>& in) {
         const at::Tensor& x = in.at(0);
         if ((x.sum() > 0).item<bool>()) return x * 2;  // the host reads the sum, as in kiln
         return x * -2;
       }},
      {"add_sin_cos_bf16", add_sin_cos},
  };
  return p;
}

struct State {
  Fn fn;
  bool mutates = false;
  std::vector<std::vector<at::Tensor>> pristine, sets;
  at::Tensor out;
  void restore(size_t path) {
    if (!mutates) return;
    for (size_t i = 0; i < sets[path].size(); ++i) sets[path][i].copy_(pristine[path][i]);
  }
};

}  // namespace

std::string version() { return TORCH_VERSION; }

void set_threads(int n) { at::set_num_threads(n); }

int threads() { return at::get_num_threads(); }

bool has_program(const std::string& workload) { return programs().count(workload) > 0; }

Program make(const std::string& workload, const std::vector<std::vector<Tensor>>& path_inputs, bool mutates) {
  auto it = programs().find(workload);
  KILN_CHECK(it != programs().end(), "bench", "libtorch has no program for '", workload, "'");
  auto st = std::make_shared<State>();
  st->fn = it->second;
  st->mutates = mutates;
  for (const auto& set : path_inputs) {
    std::vector<at::Tensor> p, s;
    for (const Tensor& t : set) {
      p.push_back(copy_to_aten(t));
      s.push_back(mutates ? p.back().clone() : p.back());
    }
    st->pristine.push_back(std::move(p));
    st->sets.push_back(std::move(s));
  }
  const size_t paths = std::max<size_t>(st->sets.size(), 1);
  Program prog;
  prog.timed.name = "libtorch";
  prog.timed.before = [st, paths](int call) { st->restore(size_t(call) % paths); };
  prog.timed.run = [st, paths](int call) {
    at::NoGradGuard no_grad;
    st->out = st->fn(st->sets[size_t(call) % paths]);
  };
  prog.timed.drop = [st] { st->out.reset(); };
  prog.outputs = [st](int path) {
    st->restore(size_t(path));
    at::NoGradGuard no_grad;
    return std::vector<Tensor>{copy_to_kiln(st->fn(st->sets[size_t(path)]))};
  };
  return prog;
}

}  // namespace kiln::bench::libtorch
