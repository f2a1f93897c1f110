// Per-call overhead of a compiled function's cache hit, against calling the eager op
// directly, on a tiny tensor (docs/perf.md). Interleaves the two for several rounds and
// reports the median nanoseconds per call of each and their difference. Then the cost of a new
// size once a dim is dynamic: the first call at each new size (its program built from
// size-generic kernels found in the kernel cache) against the call that compiled them.
//
// --cuda-new-sizes: what a new size of a GPU op costs the host before anything reaches a GPU
// (parsing the graph's text, the passes, the CUDA source, its CUBIN), with kernels specialised on each size (NVRTC every
// time) and with size-generic ones (NVRTC for the first size; later sizes render the same
// source and find its CUBIN in memory). NVRTC runs on the host, so this needs no GPU; the disk
// cache is off, so that every specialised size really compiles. Loading the module on a GPU
// (once per kernel either way) is not included.
//
//   kiln-compile-overhead [--rounds N] [--calls N] [--size N]
//   kiln-compile-overhead --cuda-new-sizes [--sizes N]
#include <kiln/codegen/cuda.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace kiln;

namespace {

template <typename F>
double ns_per_call(F&& f, int calls) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One op of --cuda-new-sizes: a graph with {N} for the size that varies.
struct GpuOp {
  const char* name;
  const char* text;
};

std::string with_n(std::string text, int64_t n) {
  for (size_t at = text.find("{N}"); at != std::string::npos; at = text.find("{N}", at)) text.replace(at, 3, std::to_string(n));
  return text;
}

// Milliseconds from the graph's text at size n to a CUBIN for every kernel (sm_90): the parse,
// the passes, the render and the CUBIN (NVRTC or the memory cache).
double cubins_ms(const GpuOp& op, int64_t n, bool generic) {
  auto t0 = std::chrono::steady_clock::now();
  ir::Graph g = ir::parse(with_n(op.text, n));
  passes::Module m = passes::optimize(g);
  for (const codegen::CudaRender& r : codegen::render_cuda(*m.program, "kiln_k", generic))
    if (r.kernel) codegen::cuda_cubin(*r.kernel, 90);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int cuda_new_sizes(int sizes) {
  if (!cuda::nvrtc_is_available()) {
    std::fprintf(stderr, "kiln-compile-overhead: NVRTC is not available: %s\n", cuda::nvrtc_unavailable_reason().c_str());
    return 1;
  }
  const GpuOp ops[] = {
      {"broadcast add f32[n, 96] + f32[96]",
       "graph @g(%x: f32[{N},96]{96,1}, %b: f32[96]{1}) {\n  %0 = add(%x, %b) {alpha=1} : f32[{N},96]{96,1}\n  return %0\n}\n"},
      {"softmax rows f32[n, 300]",
       "graph @g(%x: f32[{N},300]{300,1}) {\n  %0 = softmax(%x) {dim=1} : f32[{N},300]{300,1}\n  return %0\n}\n"},
      {"column sums f32[n, 64].sum(0)",
       "graph @g(%x: f32[{N},64]{64,1}) {\n  %0 = sum(%x) {dims=[0], keepdim=false} : f32[64]{1}\n  return %0\n}\n"},
      {"transposed copy f32[48, n] -> [n, 48]",
       "graph @g(%x: f32[{N},48]{1,{N}}) {\n  %0 = contiguous(%x) : f32[{N},48]{48,1}\n  return %0\n}\n"},
  };
  std::printf("a new size of a GPU op, host side to a CUBIN (sm_90), %d sizes per op, disk cache off; ms\n", sizes);
  std::printf("%-40s %12s %14s %14s %8s\n", "op", "specialised", "generic first", "generic later", "ratio");
  for (const GpuOp& op : ops) {
    std::vector<double> fixed, later;
    double first = 0;
    for (int i = 0; i < sizes; ++i) {
      const int64_t n = 40 + 7 * i;  // (new sizes, one structure: every n > 1 and below 2^31)
      fixed.push_back(cubins_ms(op, n + 1000, false));
      double t = cubins_ms(op, n, true);
      if (i == 0) first = t;
      else later.push_back(t);
    }
    std::printf("%-40s %12.2f %14.2f %14.3f %7.0fx\n", op.name, median(fixed), first, median(later),
                median(fixed) / median(later));
  }
  return 0;
}

// --interleaved ROWS: an eager and a compiled softmax over [ROWS, 1024] called in turn, as
// kiln-bench times them, each call timed: the mean and the slowest of each. Run it with other
// processes keeping the cores busy to see whether kiln's threads hold up under contention
// (docs/perf.md, "Threads under contention").
int interleaved(int64_t rows, int calls) {
  auto f = compile([](const Tensor& x) { return x.softmax(-1); });
  Tensor x = randn({rows, 1024});
  for (int i = 0; i < 10; ++i) {
    f(x);
    x.softmax(-1);
  }
  calls = std::max(1, std::min(calls, 2000));
  double te = 0, tc = 0, worst_e = 0, worst_c = 0;
  for (int i = 0; i < calls; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor a = x.softmax(-1);
    auto t1 = std::chrono::steady_clock::now();
    Tensor b = f(x);
    auto t2 = std::chrono::steady_clock::now();
    const double e = std::chrono::duration<double, std::micro>(t1 - t0).count();
    const double c = std::chrono::duration<double, std::micro>(t2 - t1).count();
    te += e, tc += c, worst_e = std::max(worst_e, e), worst_c = std::max(worst_c, c);
  }
  std::printf("softmax f32[%lld, 1024], %d calls each, interleaved: eager mean %.1f us (slowest %.0f), compiled mean "
              "%.1f us (slowest %.0f)\n",
              (long long)rows, calls, te / calls, worst_e, tc / calls, worst_c);
  return 0;
}

// --curve MAX: the first call (trace, passes, compile) of two traced host loops, at 1024 ops
// and doubling up to MAX ops, each a fresh function with the disk cache off (docs/perf.md,
// "Compile time against trace length"): a chain `x = x * 0.5 + y` (two ops a step), and an
// in-place row update of a [64, 64] grid (a Gauss-Seidel sweep: row i = (row i-1 + row i+1) *
// 0.5, read and written through views: about five ops a row).
int curve(int64_t max_ops) {
  std::printf("%-34s %10s %12s %12s\n", "program", "ops", "first call ms", "ms per 1k ops");
  for (int64_t ops = 1024; ops <= max_ops; ops *= 2) {
    auto chain = compile([ops](const Tensor& x0, const Tensor& y) {
      Tensor x = x0;
      for (int64_t i = 0; i < ops / 2; ++i) x = x * 0.5 + y;
      return x;
    });
    Tensor x = randn({1000}), y = randn({1000});
    auto t0 = std::chrono::steady_clock::now();
    chain(x, y);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-34s %10lld %12.0f %12.2f\n", "chain x = x * 0.5 + y", (long long)ops, ms, ms / double(ops) * 1024);
    std::fflush(stdout);
  }
  for (int64_t ops = 1024; ops <= max_ops; ops *= 2) {
    const int64_t rows = 64, sweeps = std::max<int64_t>(1, ops / (5 * (rows - 2)));
    auto sweep = compile([rows, sweeps](Tensor g) {
      for (int64_t s = 0; s < sweeps; ++s)
        for (int64_t i = 1; i + 1 < rows; ++i) g.select(0, i).copy_((g.select(0, i - 1) + g.select(0, i + 1)) * 0.5);
    });
    Tensor g = randn({rows, 64});
    auto t0 = std::chrono::steady_clock::now();
    sweep(g);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int64_t n = sweeps * (rows - 2) * 5;
    std::printf("%-34s %10lld %12.0f %12.2f\n", "in-place row updates of [64, 64]", (long long)n, ms,
                ms / double(n) * 1024);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, calls = 20000, sizes = 8;
  int64_t size = 4;
  bool gpu_sizes = false;
  int64_t interleaved_rows = 0, curve_ops = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cuda-new-sizes") {
      gpu_sizes = true;
      continue;
    }
    if (a == "--curve" && i + 1 < argc) {
      curve_ops = std::atoll(argv[++i]);
      continue;
    }
    if (a == "--interleaved" && i + 1 < argc) {
      interleaved_rows = std::atoll(argv[++i]);
      continue;
    }
    if (i + 1 >= argc) a = "?";
    if (a == "--rounds") rounds = std::atoi(argv[++i]);
    else if (a == "--calls") calls = std::atoi(argv[++i]);
    else if (a == "--size") size = std::atoll(argv[++i]);
    else if (a == "--sizes") sizes = std::max(2, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--calls N] [--size N] | --cuda-new-sizes [--sizes N] | --interleaved ROWS | --curve MAX_OPS\n",
                   argv[0]);
      return 2;
    }
  }
  if (gpu_sizes) {
    setenv("KILN_DISABLE_CACHE", "1", 1);  // (before the disk cache is first used)
    return cuda_new_sizes(sizes);
  }
  if (interleaved_rows > 0) return interleaved(interleaved_rows, calls);
  if (curve_ops > 0) {
    setenv("KILN_DISABLE_CACHE", "1", 1);  // (before the disk cache is first used)
    return curve(curve_ops);
  }
  Tensor x = randn({size}), y = randn({size});
  auto one = compile([](const Tensor& a, const Tensor& b) { return a + b; });
  auto three = compile([](const Tensor& a, const Tensor& b) { return (a + b).relu() * 2; });
  one(x, y);
  three(x, y);
  std::vector<double> eager1, comp1, eager3, comp3;
  for (int r = 0; r < rounds; ++r) {
    eager1.push_back(ns_per_call([&] { Tensor z = x + y; }, calls));
    comp1.push_back(ns_per_call([&] { Tensor z = one(x, y); }, calls));
    eager3.push_back(ns_per_call([&] { Tensor z = (x + y).relu() * 2; }, calls));
    comp3.push_back(ns_per_call([&] { Tensor z = three(x, y); }, calls));
  }
  auto s1 = one.stats(), s3 = three.stats();
  std::printf("tiny tensors: f32[%lld], %d rounds x %d calls, medians in ns per call\n", (long long)size, rounds, calls);
  // The overhead is the median over rounds of (compiled - eager) measured back to back, which
  // cancels most of the machine's drift between rounds.
  auto diff = [](const std::vector<double>& c, const std::vector<double>& e) {
    std::vector<double> d;
    for (size_t i = 0; i < c.size(); ++i) d.push_back(c[i] - e[i]);
    return median(d);
  };
  std::printf("%-24s %10s %10s %10s\n", "program", "eager", "compiled", "overhead");
  std::printf("%-24s %10.0f %10.0f %10.0f\n", "a + b (1 op)", median(eager1), median(comp1), diff(comp1, eager1));
  std::printf("%-24s %10.0f %10.0f %10.0f\n", "(a + b).relu() * 2 (3)", median(eager3), median(comp3),
              diff(comp3, eager3));
  std::printf("cache: %llu hits, %llu compiles (1-op); %llu hits, %llu compiles (3-op)\n",
              (unsigned long long)s1.hits, (unsigned long long)s1.compiles, (unsigned long long)s3.hits,
              (unsigned long long)s3.compiles);

  // A new size of a dynamic dim: rows of a row-wise softmax and a scale, 77 columns. Two sizes
  // trace and compile exactly; the third marks the rows dynamic (recompile_limit 2) and traces
  // once more; every later size builds a program of size-generic kernels: the first compiles
  // them (LLVM), the others find them in the kernel cache and rerun only the passes.
  CompileOptions dyn;
  dyn.recompile_limit = 2;
  auto rows = compile([](const Tensor& a) { return (a.softmax(-1) * 2).sum(0); }, dyn);
  auto first_call_ms = [&](int64_t n) {
    Tensor a = randn({n, 77});
    auto t0 = std::chrono::steady_clock::now();
    Tensor z = rows(a);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int64_t n : {3, 5, 7}) first_call_ms(n);  // exact, exact, marks the dim dynamic
  double generic_compile = first_call_ms(9);   // the first size on size-generic kernels
  std::vector<double> later;
  for (int64_t n = 10; n < 10 + 2 * rounds; ++n) later.push_back(first_call_ms(n));
  std::vector<double> hit;
  for (int r = 0; r < rounds; ++r) hit.push_back(ns_per_call([&] { Tensor z = rows(randn({10, 77})); }, 100) / 1e6);
  std::printf("dynamic rows, f32[n, 77] -> softmax * 2 -> sum(0): first call at a new size %.2f ms (median of %d sizes); "
              "the size that compiled the size-generic kernels %.2f ms; a repeated size %.3f ms (with its randn)\n",
              median(later), int(later.size()), generic_compile, median(hit));

  // The per-call cost of the paths a hit may take, on tiny tensors, each against the eager ops
  // run back to back: a hit at the traced sizes; a hit at another size of a dynamic dim (its
  // program of size-generic kernels, found by the inputs' sizes); the same with a size guard
  // (x.sym_size(0) > 2 checked first); a call past the recompile budget (a new number argument
  // each call: the signature misses and the function runs eagerly); and the same function with
  // the number as a SymFloat (a new value each call, one trace: the fix the budget names).
  CompileOptions d2;
  d2.recompile_limit = 2;
  auto generic = compile([](const Tensor& a) { return (a + 1).relu() * 2; }, d2);
  auto guarded = compile(
      [](const Tensor& a) {
        if (a.sym_size(0) > 2) return (a + 1).relu() * 2;
        return a * 0;
      },
      d2);
  auto spent = compile([](const Tensor& a, double k) { return (a + k).relu() * 2; }, d2);
  auto symbolic = compile([](const Tensor& a, const SymFloat& k) { return (a + k).relu() * 2; }, d2);
  for (int64_t n : {3, 4, 5, 6}) {
    generic(randn({n}));
    guarded(randn({n}));
  }
  for (int k = 0; k < 4; ++k) spent(x, double(k));
  Tensor g = randn({size});  // a size the dynamic graphs were not traced at (they were at 5)
  double next_k = 100;
  std::vector<double> e3, hit3, gen3, guard3, spent3, sym3;
  for (int r = 0; r < rounds; ++r) {
    e3.push_back(ns_per_call([&] { Tensor z = (g + 1).relu() * 2; }, calls / 4));
    hit3.push_back(ns_per_call([&] { Tensor z = three(x, y); }, calls / 4));
    gen3.push_back(ns_per_call([&] { Tensor z = generic(g); }, calls / 4));
    guard3.push_back(ns_per_call([&] { Tensor z = guarded(g); }, calls / 4));
    spent3.push_back(ns_per_call([&] { Tensor z = spent(g, next_k++); }, calls / 4));
    sym3.push_back(ns_per_call([&] { Tensor z = symbolic(g, next_k++); }, calls / 4));
  }
  std::printf("%-44s %10s %10s\n", "a 3-op call's path (f32[size])", "ns", "vs eager");
  std::printf("%-44s %10.0f %10s\n", "eager", median(e3), "");
  std::printf("%-44s %10.0f %10.0f\n", "hit at the traced sizes", median(hit3), diff(hit3, e3));
  std::printf("%-44s %10.0f %10.0f\n", "hit at another size of a dynamic dim", median(gen3), diff(gen3, e3));
  std::printf("%-44s %10.0f %10.0f\n", "the same behind a size guard", median(guard3), diff(guard3, e3));
  std::printf("%-44s %10.0f %10.0f\n", "past the recompile budget (runs eagerly)", median(spent3), diff(spent3, e3));
  std::printf("%-44s %10.0f %10.0f\n", "a new SymFloat value each call (replays)", median(sym3), diff(sym3, e3));
  std::printf("(traces: generic %llu, guarded %llu, spent %llu with %llu calls past the budget, symbolic %llu)\n",
              (unsigned long long)generic.stats().compiles, (unsigned long long)guarded.stats().compiles,
              (unsigned long long)spent.stats().compiles, (unsigned long long)spent.stats().budget_eager_calls,
              (unsigned long long)symbolic.stats().compiles);
  return 0;
}
