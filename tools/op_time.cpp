// kiln-op-time: the median time of one eager op on a [rows, cols] input, for comparing single ops
// with PyTorch's (tools/op_time_torch.py times the same op on the same shape and dtype and
// prints the same line). Each op runs in a fresh process per call of this program, so that
// runs of different builds (a before and an after tree) can be interleaved.
//
// Usage: kiln-op-time OP ROWS COLS [float32|float64|float16|bfloat16] [--reps N]
//        kiln-op-time --list
// Prints "kiln OP [ROWS,COLS] DTYPE MEDIAN ms"; the input is randn, a second operand (add, mul,
// where) its copy. 10 untimed calls first; each result is dropped after its clock stops.
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

using namespace kiln;

namespace {

const std::map<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>& ops() {
  static const std::map<std::string, std::function<Tensor(const Tensor&, const Tensor&)>> table = {
      {"sum_rows", [](const Tensor& x, const Tensor&) { return x.sum({1}); }},
      {"sum_cols", [](const Tensor& x, const Tensor&) { return x.sum({0}); }},
      {"mean_cols", [](const Tensor& x, const Tensor&) { return x.mean({0}); }},
      {"amax_cols", [](const Tensor& x, const Tensor&) { return x.amax({0}); }},
      {"mean_rows", [](const Tensor& x, const Tensor&) { return x.mean({1}); }},
      {"amax_rows", [](const Tensor& x, const Tensor&) { return x.amax({1}); }},
      {"argmax_rows", [](const Tensor& x, const Tensor&) { return x.argmax(1); }},
      {"var_rows", [](const Tensor& x, const Tensor&) { return x.var({1}); }},
      {"softmax_rows", [](const Tensor& x, const Tensor&) { return softmax(x, 1); }},
      {"relu", [](const Tensor& x, const Tensor&) { return relu(x); }},
      {"exp", [](const Tensor& x, const Tensor&) { return exp(x); }},
      {"tanh", [](const Tensor& x, const Tensor&) { return tanh(x); }},
      {"gelu", [](const Tensor& x, const Tensor&) { return gelu(x); }},
      {"add", [](const Tensor& x, const Tensor& y) { return x + y; }},
      {"mul", [](const Tensor& x, const Tensor& y) { return x * y; }},
      {"add_scalar", [](const Tensor& x, const Tensor&) { return x + 1.5; }},
      {"clamp", [](const Tensor& x, const Tensor&) { return clamp(x, -0.5, 0.5); }},
      {"where", [](const Tensor& x, const Tensor& y) { return where(x > 0, x, y); }},
      {"to_float32", [](const Tensor& x, const Tensor&) { return x.to(kFloat32); }},
      {"to_float16", [](const Tensor& x, const Tensor&) { return x.to(kFloat16); }},
      {"to_bfloat16", [](const Tensor& x, const Tensor&) { return x.to(kBFloat16); }},
      {"transpose_copy", [](const Tensor& x, const Tensor&) { return x.t().contiguous(); }},
      {"sub", [](const Tensor& x, const Tensor& y) { return x - y; }},
      {"div", [](const Tensor& x, const Tensor& y) { return x / y; }},
      {"floor_divide", [](const Tensor& x, const Tensor& y) { return floor_divide(x, y); }},
      {"remainder", [](const Tensor& x, const Tensor& y) { return remainder(x, y); }},
      {"pow_scalar", [](const Tensor& x, const Tensor&) { return pow(x, 2.5); }},
      {"pow", [](const Tensor& x, const Tensor& y) { return pow(x, y); }},
      {"maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }},
      {"lt", [](const Tensor& x, const Tensor& y) { return x < y; }},
      {"masked_fill", [](const Tensor& x, const Tensor& y) { return masked_fill(x, y > 0, 0.0); }},
      {"sigmoid", [](const Tensor& x, const Tensor&) { return sigmoid(x); }},
      {"silu", [](const Tensor& x, const Tensor&) { return silu(x); }},
      {"sqrt", [](const Tensor& x, const Tensor&) { return sqrt(x); }},
      {"log", [](const Tensor& x, const Tensor&) { return log(x); }},
      {"sin", [](const Tensor& x, const Tensor&) { return sin(x); }},
      {"abs", [](const Tensor& x, const Tensor&) { return abs(x); }},
      {"floor", [](const Tensor& x, const Tensor&) { return floor(x); }},
      {"sum_all", [](const Tensor& x, const Tensor&) { return x.sum(); }},
      {"prod_rows", [](const Tensor& x, const Tensor&) { return x.prod({1}); }},
      {"min_rows", [](const Tensor& x, const Tensor&) { return std::get<0>(x.min(1)); }},
      {"std_rows", [](const Tensor& x, const Tensor&) { return x.std({1}); }},
      {"norm_rows", [](const Tensor& x, const Tensor&) { return x.norm(2, {1}); }},
      {"logsumexp_rows", [](const Tensor& x, const Tensor&) { return x.logsumexp({1}); }},
      {"log_softmax_rows", [](const Tensor& x, const Tensor&) { return log_softmax(x, 1); }},
      {"cumsum_rows", [](const Tensor& x, const Tensor&) { return x.cumsum(1); }},
      {"cat_rows", [](const Tensor& x, const Tensor& y) { return cat({x, y}, 0); }},
      {"cat_cols", [](const Tensor& x, const Tensor& y) { return cat({x, y}, 1); }},
      {"index_select_rows", [](const Tensor& x, const Tensor&) {
         static Tensor idx = randint(0, x.sizes()[0], {x.sizes()[0]});
         return index_select(x, 0, idx);
       }},
  };
  return table;
}

int usage() {
  std::fprintf(stderr, "usage: kiln-op-time OP ROWS COLS [float32|float64|float16|bfloat16] [--reps N] | --list\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& [name, f] : ops()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc < 4) return usage();
  const std::string op = argv[1];
  const int64_t rows = std::atoll(argv[2]), cols = std::atoll(argv[3]);
  std::string dtype = "float32";
  int reps = 50;
  for (int i = 4; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else dtype = argv[i];
  }
  const auto it = ops().find(op);
  if (it == ops().end() || rows <= 0 || cols <= 0) return usage();
  const std::map<std::string, DType> dtypes = {
      {"float32", kFloat32}, {"float64", kFloat64}, {"float16", kFloat16}, {"bfloat16", kBFloat16}};
  if (!dtypes.count(dtype)) return usage();
  try {
    const Tensor x = randn({rows, cols}).to(dtypes.at(dtype)), y = x.clone();
    std::vector<double> ms;
    for (int i = 0; i < 10 + reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Tensor r = it->second(x, y);
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= 10) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::nth_element(ms.begin(), ms.begin() + long(ms.size() / 2), ms.end());
    std::printf("kiln %s [%lld,%lld] %s %.4f ms\n", op.c_str(), static_cast<long long>(rows),
                static_cast<long long>(cols), dtype.c_str(), ms[ms.size() / 2]);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
