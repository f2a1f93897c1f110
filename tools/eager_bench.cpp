// kiln-eager-bench: times kiln's eager CPU ops on the seed workloads (the shared workload list, workloads.md,
// at their `bench` sizes) so they can be compared with PyTorch eager (tools/bench_torch_eager.py runs
// the identical programs; tools/compare_eager.py interleaves the two and prints ratios).
//
// Per workload: fresh random inputs, `--warmup` untimed runs (these also fill the caching
// allocator), then at least `--reps` timed runs (more for short workloads: enough to fill
// `--min-time` seconds, judged from the last warmup run); each result is dropped after its
// clock stops. The reported median and min are over the timed runs. One line
// per workload, JSON with --json. inplace_chain re-copies its input from a pristine source
// before every run, outside the timed region, so each run starts from the same data.
//
// Besides the seed workloads there are references, run only when named in --filter:
// stream_copy (kiln's y.copy_(x), 64 MiB float32) and stream_triad (a plain OpenMP loop
// a = b + s*c over 64 MiB float32 arrays) for the achieved memory bandwidth of this run, and
// op_* single ops (op_clamp_, op_pow3, op_sin_bf16, ...) that explain the slow seed workloads.
#include <kiln/kiln.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace kiln;

namespace {

constexpr int64_t kMi = int64_t(1) << 20;

// One workload at its bench size: `prepare` makes fresh inputs and returns the timed program;
// `before` (optional) runs before each rep outside the timed region.
struct Prepared {
  std::function<Tensor()> run;
  std::function<void()> before;
};
struct Workload {
  std::string name;
  std::string shape;        // for the human-readable report
  double bytes;             // compulsory traffic: every input read once, every output written once
  double eager_bytes;       // traffic of the program run op by op (each op reads its inputs, writes its output)
  double flops;             // for the matmul workloads; 0 elsewhere
  bool reference = false;   // not a seed workload: runs only when --filter names it
  std::function<Prepared()> prepare;
};

std::vector<Workload> workloads() {
  std::vector<Workload> w;
  const int64_t N16 = 16 * kMi, N1 = kMi;
  const double f4 = 4.0;
  const double sm = 4096.0 * 1024;

  w.push_back({"add_sin_cos", "a, b: [16M]", 3 * N16 * f4, 13 * N16 * f4, 0, false, [=] {
    Tensor a = randn({N16}), b = randn({N16});
    return Prepared{[=] { return (a + b) + sin(a) * cos(b); }, nullptr};
  }});
  w.push_back({"poly", "x: [16M]", 2 * N16 * f4, 7 * N16 * f4, 0, false, [=] {
    Tensor x = randn({N16});
    return Prepared{[=] { return pow(x, 2) + x * 3; }, nullptr};
  }});
  // where: compare (4 B in, 1 B out), x*2, x/2 (8 B each), select (1 + 12 B)
  w.push_back({"where_scale", "x: [4096, 4096]", 2 * N16 * f4, 34.0 * N16, 0, false, [=] {
    Tensor x = rand({4096, 4096});
    return Prepared{[=] { return where(x > 0.5, x * 2, x / 2); }, nullptr};
  }});
  w.push_back({"broadcast_bias", "m: [8192, 4096], bias: [4096]", (2.0 * 8192 * 4096 + 4096) * f4,
               (2.0 * 8192 * 4096 + 4096) * f4, 0, false, [=] {
    Tensor m = randn({8192, 4096}), bias = randn({4096});
    return Prepared{[=] { return m + bias; }, nullptr};
  }});
  w.push_back({"transpose_add", "x, y: [4096, 4096]", 3 * N16 * f4, 3 * N16 * f4, 0, false, [=] {
    Tensor x = randn({4096, 4096}), y = randn({4096, 4096});
    return Prepared{[=] { return x.t() + y; }, nullptr};
  }});
  w.push_back({"unrolled_loop", "x, y: [16M]", 3 * N16 * f4, 16 * 5 * N16 * f4, 0, false, [=] {
    Tensor x0 = randn({N16}), y = randn({N16});
    return Prepared{[=] {
      Tensor x = x0;
      for (int i = 0; i < 16; ++i) x = x * 0.5 + y;
      return x;
    }, nullptr};
  }});
  w.push_back({"inplace_chain", "x: [16M]", 2 * N16 * f4, 4 * 2 * N16 * f4, 0, false, [=] {
    Tensor src = randn({N16}) * 4;
    Tensor x = empty({N16});
    return Prepared{[=]() mutable {
      x.add_(1);
      x.relu_();
      x.clamp_(0, 6);
      x.mul_(0.5);
      return x;
    }, [=]() mutable { x.copy_(src); }};
  }});
  // op by op: pow, *c, +x, *c, tanh, 1+, 0.5*x, * = 7 two-operand passes + 2 three-operand ones
  w.push_back({"gelu_tanh", "x: [16M]", 2 * N16 * f4, 18 * N16 * f4, 0, false, [=] {
    Tensor x = randn({N16});
    return Prepared{[=] { return 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * pow(x, 3)))); },
                    nullptr};
  }});
  w.push_back({"sum_f64", "t: float64 [1M]", N1 * 8.0, N1 * 8.0, 0, false, [=] {
    Tensor t = randn({N1}, kFloat64);
    return Prepared{[=] { return t.sum(); }, nullptr};
  }});
  w.push_back({"row_sum", "x: [4096, 4096]", (N16 + 4096) * f4, (N16 + 4096) * f4, 0, false, [=] {
    Tensor x = randn({4096, 4096});
    return Prepared{[=] { return x.sum({1}); }, nullptr};
  }});
  w.push_back({"softmax", "x: [4096, 1024]", 2 * sm * f4, 2 * sm * f4, 0, false, [=] {
    Tensor x = randn({4096, 1024});
    return Prepared{[=] { return softmax(x, -1); }, nullptr};
  }});
  w.push_back({"log_softmax", "x: [4096, 1024]", 2 * sm * f4, 2 * sm * f4, 0, false, [=] {
    Tensor x = randn({4096, 1024});
    return Prepared{[=] { return log_softmax(x, -1); }, nullptr};
  }});
  // op by op: mean (1), var (1), x - mean (2), / (2), * w (2), + b (2)
  w.push_back({"layernorm", "x: [4096, 1024], w, b: [1024]", (2 * sm + 2048) * f4, 10 * sm * f4, 0, false, [=] {
    Tensor x = randn({4096, 1024}), lw = randn({1024}), lb = randn({1024});
    return Prepared{[=] {
      Tensor mean = x.mean({-1}, true), var = x.var({-1}, 0, true);
      return (x - mean) / sqrt(var + 1e-5) * lw + lb;
    }, nullptr};
  }});
  {
    const int64_t N = 2500;
    const double nn = double(N) * N;
    // op by op over [2, N, N] and [N, N] float32 temporaries
    double eager = (2 * nn + nn) + (2 * nn + nn + 2 * nn) + (nn * 5) + (2 * nn * 2 + 2 * nn) + (2 * nn + 2 * N);
    w.push_back({"nbody_forces", "N = 2500 (pos: [2, N], mass: [N])", 5.0 * N * f4, eager * f4, 0, false, [=] {
      Tensor pos = randn({2, N}), mass = rand({N});
      return Prepared{[=] {
        const double G = 6.67e-11;
        Tensor diff = pos.unsqueeze(1) - pos.unsqueeze(2);
        Tensor dist = diff.norm(2, {0});
        Tensor direction = diff / dist;
        Tensor forces = G * mass.unsqueeze(1) * mass.unsqueeze(0) / pow(dist, 2);
        return (direction * forces.unsqueeze(0)).nansum({2});
      }, nullptr};
    }});
  }
  {
    const double n = 1024;
    w.push_back({"bias_relu", "x, W: [1024, 1024], b: [1024]", (3 * n * n + n) * f4, (3 * n * n + n + 4 * n * n) * f4,
                 2 * n * n * n, false, [=] {
      Tensor x = randn({1024, 1024}), W = randn({1024, 1024}), b = randn({1024});
      return Prepared{[=] { return relu(matmul(x, W) + b); }, nullptr};
    }});
  }
  {
    const double B = 32 * 8, Q = 100, D = 64;
    w.push_back({"attention_scores", "q, k: [32, 8, 100, 64]", (2 * B * Q * D + B * Q * Q) * f4,
                 (2 * B * Q * D + 5 * B * Q * Q) * f4, 2 * B * Q * Q * D, false, [=] {
      Tensor q = randn({32, 8, 100, 64}), k = randn({32, 8, 100, 64});
      return Prepared{[=] { return softmax(einsum("bhqd,bhkd->bhqk", {q, k}) / std::sqrt(64.0), -1); }, nullptr};
    }});
  }
  w.push_back({"branch_sign", "x: [1M]", 2 * N1 * f4, 3 * N1 * f4, 0, false, [=] {
    Tensor x = randn({N1});
    return Prepared{[=] { return bool(x.sum() > 0) ? x * 2 : x * -2; }, nullptr};
  }});
  w.push_back({"add_sin_cos_bf16", "a, b: bfloat16 [16M]", 3 * N16 * 2.0, 13 * N16 * 2.0, 0, false, [=] {
    Tensor a = randn({N16}, kBFloat16), b = randn({N16}, kBFloat16);
    return Prepared{[=] { return (a + b) + sin(a) * cos(b); }, nullptr};
  }});

  // ---- bandwidth references (not seed workloads) ----
  w.push_back({"stream_copy", "y.copy_(x), x, y: [16M]", 2 * N16 * f4, 2 * N16 * f4, 0, true, [=] {
    Tensor x = randn({N16}), y = empty({N16});
    return Prepared{[=]() mutable { y.copy_(x); return y; }, nullptr};
  }});
  w.push_back({"stream_triad", "a = b + s*c (OpenMP loop), [16M]", 3 * N16 * f4, 3 * N16 * f4, 0, true, [=] {
    Tensor a = empty({N16}), b = randn({N16}), c = randn({N16});
    return Prepared{[=] {
      float* pa = a.data_ptr<float>();
      const float* pb = b.data_ptr<float>();
      const float* pc = c.data_ptr<float>();
      const float s = 3.0f;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < N16; ++i) pa[i] = pb[i] + s * pc[i];
      return a;
    }, nullptr};
  }});
  // ---- single ops behind the slow seed workloads (diagnostics, docs/perf-journal.md) ----
  w.push_back({"op_clamp_", "x.clamp_(0, 6), x: [16M]", 2 * N16 * f4, 2 * N16 * f4, 0, true, [=] {
    Tensor src = randn({N16}) * 4;
    Tensor x = empty({N16});
    return Prepared{[=]() mutable { x.clamp_(0, 6); return x; }, [=]() mutable { x.copy_(src); }};
  }});
  w.push_back({"op_add_", "x.add_(1), x: [16M]", 2 * N16 * f4, 2 * N16 * f4, 0, true, [=] {
    Tensor src = randn({N16}) * 4;
    Tensor x = empty({N16});
    return Prepared{[=]() mutable { x.add_(1); return x; }, [=]() mutable { x.copy_(src); }};
  }});
  w.push_back({"op_pow3", "pow(x, 3), x: [16M]", 2 * N16 * f4, 2 * N16 * f4, 0, true, [=] {
    Tensor x = randn({N16});
    return Prepared{[=] { return pow(x, 3); }, nullptr};
  }});
  w.push_back({"op_sin_bf16", "sin(a), a: bfloat16 [16M]", 2 * N16 * 2.0, 2 * N16 * 2.0, 0, true, [=] {
    Tensor a = randn({N16}, kBFloat16);
    return Prepared{[=] { return sin(a); }, nullptr};
  }});
  w.push_back({"op_sin_f32", "sin(a), a: [16M]", 2 * N16 * f4, 2 * N16 * f4, 0, true, [=] {
    Tensor a = randn({N16});
    return Prepared{[=] { return sin(a); }, nullptr};
  }});
  w.push_back({"op_amax_rows", "x.amax(-1), x: [4096, 1024]", (sm + 4096) * f4, (sm + 4096) * f4, 0, true, [=] {
    Tensor x = randn({4096, 1024});
    return Prepared{[=] { return x.amax({-1}); }, nullptr};
  }});
  // index_select with random indices: rows of 64 floats out of 2^17, and 1M single floats
  w.push_back({"op_index_select_rows", "index_select(x, 0, i), x: [131072, 64], i: 131072 random", 2.0 * 131072 * 64 * f4 + 131072 * 8.0,
               2.0 * 131072 * 64 * f4 + 131072 * 8.0, 0, true, [=] {
    Tensor x = randn({131072, 64}), i = randint(0, 131072, {131072});
    return Prepared{[=] { return index_select(x, 0, i); }, nullptr};
  }});
  w.push_back({"op_index_select_1d", "index_select(x, 0, i), x: [1M], i: 1M random", N1 * (2 * f4 + 8.0),
               N1 * (2 * f4 + 8.0), 0, true, [=] {
    Tensor x = randn({N1}), i = randint(0, N1, {N1});
    return Prepared{[=] { return index_select(x, 0, i); }, nullptr};
  }});
  {
    const double B = 32 * 8, Q = 100, D = 64;
    w.push_back({"op_einsum_attn", "einsum(bhqd,bhkd->bhqk), q, k: [32, 8, 100, 64]", (2 * B * Q * D + B * Q * Q) * f4,
                 (2 * B * Q * D + B * Q * Q) * f4, 2 * B * Q * Q * D, true, [=] {
      Tensor q = randn({32, 8, 100, 64}), k = randn({32, 8, 100, 64});
      return Prepared{[=] { return einsum("bhqd,bhkd->bhqk", {q, k}); }, nullptr};
    }});
    // float32 products from 16^3 to 1024^3, the second operand transposed as einsum's is: the
    // sizes around which OpenBLAS and oneDNN trade places (KILN_CPU_BLAS; docs/perf-journal.md,
    // "Float32 products through oneDNN")
    for (int64_t n : {16, 64, 128, 256, 1024}) {
      const double nn = double(n) * double(n);
      w.push_back({"op_mm_" + std::to_string(n), "mm(a, b.t()), a, b: [" + std::to_string(n) + ", " + std::to_string(n) + "]",
                   3 * nn * f4, 3 * nn * f4, 2 * nn * double(n), true, [=] {
        Tensor a = randn({n, n}), b = randn({n, n});
        return Prepared{[=] { return mm(a, b.t()); }, nullptr};
      }});
    }
    w.push_back({"op_softmax_attn", "softmax(s, -1), s: [32, 8, 100, 100]", 2 * B * Q * Q * f4, 2 * B * Q * Q * f4, 0,
                 true, [=] {
      Tensor sc = randn({32, 8, 100, 100});
      return Prepared{[=] { return softmax(sc, -1); }, nullptr};
    }});
  }
  return w;
}

struct Options {
  std::vector<std::string> filter;  // empty: every seed workload
  int reps = 10;
  int warmup = 2;
  double min_time = 0.2;
  bool json = false;
  bool list = false;
};

// The rep policy (the same in tools/bench_torch_eager.py): at least --reps timed runs, more for
// short workloads so the timed runs add up to about --min-time seconds (at most 2000 runs).
int reps_for(const Options& o, double warm_seconds) {
  if (warm_seconds <= 0) return o.reps;
  double want = std::ceil(o.min_time / warm_seconds);
  return int(std::clamp(want, double(o.reps), std::max(2000.0, double(o.reps))));
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void usage(int code) {
  std::cerr << "usage: kiln-eager-bench [--filter NAME[,NAME...]] [--reps N] [--warmup N] [--min-time S] [--json] [--list]\n"
               "  Times kiln's eager CPU ops on the seed workloads at bench size.\n"
               "  --filter  only these workloads (exact names); stream_copy and stream_triad run only when named\n"
               "  --reps    timed runs per workload (default 10)\n"
               "  --warmup  untimed runs before them (default 2)\n"
               "  --min-time  more timed runs for short workloads, to about S seconds in all (default 0.2)\n"
               "  --json    one JSON object per line instead of a table\n"
               "  --list    print the workload names and exit\n"
               "  Threads: KILN_NUM_THREADS / OMP_NUM_THREADS.\n";
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--filter") o.filter = split_commas(value());
    else if (a == "--reps") o.reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--warmup") o.warmup = std::max(0, std::atoi(value().c_str()));
    else if (a == "--min-time") o.min_time = std::atof(value().c_str());
    else if (a == "--json") o.json = true;
    else if (a == "--list") o.list = true;
    else if (a == "-h" || a == "--help") usage(0);
    else {
      std::cerr << "kiln-eager-bench: unknown argument '" << a << "'\n";
      usage(2);
    }
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  std::vector<Workload> all = workloads();
  if (opt.list) {
    for (const Workload& w : all) std::cout << w.name << (w.reference ? "  (reference)" : "") << "\n";
    return 0;
  }
  for (const std::string& f : opt.filter) {
    bool known = std::any_of(all.begin(), all.end(), [&](const Workload& w) { return w.name == f; });
    if (!known) {
      std::cerr << "kiln-eager-bench: no workload named '" << f << "' (see --list)\n";
      return 2;
    }
  }
  const char* kt = std::getenv("KILN_NUM_THREADS");
  const int threads = kt && std::atoi(kt) > 0 ? std::atoi(kt) : omp_get_max_threads();
  if (!opt.json)
    std::printf("%-18s %12s %12s %5s %10s %10s  %s\n", "workload", "median ms", "min ms", "reps", "GB/s compl",
                "GB/s opbyop", "inputs");
  try {
    manual_seed(12345);
    for (const Workload& w : all) {
      bool selected = opt.filter.empty()
                          ? !w.reference
                          : std::find(opt.filter.begin(), opt.filter.end(), w.name) != opt.filter.end();
      if (!selected) continue;
      Prepared p = w.prepare();
      using clock = std::chrono::steady_clock;
      std::vector<double> times;
      auto once = [&] {
        if (p.before) p.before();
        Tensor out;
        auto t0 = clock::now();
        out = p.run();
        auto t1 = clock::now();
        out = Tensor();  // freed after the clock stopped, as in the Python harness
        return std::chrono::duration<double>(t1 - t0).count();
      };
      double last = 0;
      for (int r = 0; r < opt.warmup; ++r) last = once();
      int reps = reps_for(opt, last);
      for (int r = 0; r < reps; ++r) times.push_back(once());
      double med = median(times), mn = *std::min_element(times.begin(), times.end());
      if (opt.json) {
        std::printf("{\"impl\": \"kiln\", \"name\": \"%s\", \"median_s\": %.9g, \"min_s\": %.9g, \"reps\": %d, "
                    "\"warmup\": %d, \"bytes\": %.0f, \"eager_bytes\": %.0f, \"flops\": %.0f, \"threads\": %d, "
                    "\"times\": [",
                    w.name.c_str(), med, mn, int(times.size()), opt.warmup, w.bytes, w.eager_bytes, w.flops, threads);
        for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.9g", i ? ", " : "", times[i]);
        std::printf("]}\n");
      } else {
        std::printf("%-18s %12.3f %12.3f %5d %10.1f %10.1f  %s\n", w.name.c_str(), med * 1e3, mn * 1e3, int(times.size()),
                    w.bytes / med / 1e9, w.eager_bytes / med / 1e9, w.shape.c_str());
      }
      std::fflush(stdout);
    }
  } catch (const kiln::Error& e) {
    std::cerr << "kiln error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
