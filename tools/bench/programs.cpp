// kiln-programs: small whole programs that use a capability kiln gained (tensors made inside a
// compiled function, ...), each timed eager and compiled, against tools/bench/programs_torch.py
// (the same programs in PyTorch, eager and under torch.compile, timed the same way). The 18
// workloads of kiln-bench measure the compiler on what it was built around; these measure what
// users could not write before, as each capability lands.
//
// Usage: kiln-programs [--reps N] [NAME...]     (no name: every program)
//        kiln-programs --list
// Prints "kiln NAME eager E ms compiled C ms" per program: the median of N calls (default 30)
// after 3 untimed ones (the first compiled call traces and compiles). The compiled result is
// checked against eager's first (float32 tolerances); a mismatch exits with status 1.
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"

using namespace kiln;
using bench::median_ms;

namespace {

struct Program {
  const char* name;
  const char* what;
  std::function<std::vector<Tensor>()> inputs;
  std::function<Tensor(const Tensor&)> run;
};

const std::vector<Program>& programs() {
  static const std::vector<Program> list = {
      {"arange_scale", "x * arange(n) + 1, x f32[4M]", [] { return std::vector<Tensor>{randn({1 << 22})}; },
       [](const Tensor& x) { return x * arange(0, x.size(0), 1, TensorOptions(kFloat32)) + 1.0; }},
      {"linspace_scale", "x * linspace(0, 1, n), x f32[4M]", [] { return std::vector<Tensor>{randn({1 << 22})}; },
       [](const Tensor& x) { return x * linspace(0, 1, x.size(0)); }},
      {"eye_mask", "x * eye(n, n) + x.t(), x f32[2048, 2048]", [] { return std::vector<Tensor>{randn({2048, 2048})}; },
       [](const Tensor& x) { return x * eye(x.size(0), x.size(1)) + x.t(); }},
      {"tan_16k", "x.tan() + 1, x f32[16384] (a math call the CPU backend costs as one)",
       [] { return std::vector<Tensor>{rand({16384}) + 0.5}; }, [](const Tensor& x) { return x.tan() + 1; }},
      {"atan2_16k", "atan2(x, x * 0.5 + 1) + 1, x f32[16384]", [] { return std::vector<Tensor>{rand({16384}) + 0.5}; },
       [](const Tensor& x) { return atan2(x, x * 0.5 + 1) + 1; }},
      {"hypot_1m", "hypot(x, x * 0.5 + 1) + 1, x f32[1M]", [] { return std::vector<Tensor>{randn({1 << 20})}; },
       [](const Tensor& x) { return hypot(x, x * 0.5 + 1) + 1; }},
      {"logaddexp_1m", "logaddexp(x, -x) - |x| (softplus-like), x f32[1M]",
       [] { return std::vector<Tensor>{randn({1 << 20}) * 10}; },
       [](const Tensor& x) { return logaddexp(x, -x) - x.abs(); }},
      {"minmax_scale", "each row scaled to [0, 1] by its aminmax, x f32[4096, 1024]",
       [] { return std::vector<Tensor>{randn({4096, 1024})}; },
       [](const Tensor& x) {
         auto [lo, hi] = aminmax(x, 1, true);
         return (x - lo) / (hi - lo);
       }},
      {"sinusoidal_pe", "x + sinusoidal positions (arange, exp, sin, cos, cat), x f32[4096, 512]",
       [] { return std::vector<Tensor>{randn({4096, 512})}; },
       [](const Tensor& x) {
         const int64_t t = x.size(0), d = x.size(1);
         Tensor pos = arange(0, t, 1, TensorOptions(kFloat32)).unsqueeze(1);
         Tensor freq = (arange(0, d, 2, TensorOptions(kFloat32)) * (-std::log(10000.0) / double(d))).exp();
         Tensor angle = pos * freq;
         return x + cat({angle.sin(), angle.cos()}, 1);
       }},
  };
  return list;
}

}  // namespace

int main(int argc, char** argv) {
  bench::ProgramArgs args;
  args.reps = 30;
  std::vector<std::pair<std::string, std::string>> known;
  for (const Program& p : programs()) known.push_back({p.name, p.what});
  if (int status = bench::parse_program_args(argc, argv, "kiln-programs", known, args); status >= 0) return status;
  const int reps = args.reps;
  for (const Program& p : programs()) {
    if (!args.wanted(p.name)) continue;
    manual_seed(0);
    const std::vector<Tensor> in = p.inputs();
    auto compiled = compile(p.run);
    // (the compiled result is checked against eager's first: a time of a wrong result is no time)
    const Tensor want = p.run(in[0]), got = compiled(in[0]);
    const bool same = got.sizes() == want.sizes() && got.dtype() == want.dtype() &&
                      (got - want).abs().le(want.abs() * 1e-4 + 1e-5).all().item<bool>();
    if (!same) {
      std::fprintf(stderr, "kiln-programs: %s: the compiled result differs from eager's\n", p.name);
      return 1;
    }
    const double eager = median_ms([&] { p.run(in[0]); }, reps);
    const double comp = median_ms([&] { compiled(in[0]); }, reps);
    std::printf("kiln %-16s eager %9.4f ms  compiled %9.4f ms\n", p.name, eager, comp);
  }
  return 0;
}
