// Per-call overhead of a compiled function's cache hit, against calling the eager op
// directly, on a tiny tensor (docs/perf.md). Interleaves the two for several rounds and
// reports the median nanoseconds per call of each and their difference. Then the cost of a new
// size once a dim is dynamic: the first call at each new size (its program built from
// size-generic kernels found in the kernel cache) against the call that compiled them.
//
//   kiln-compile-overhead [--rounds N] [--calls N] [--size N]
#include <kiln/kiln.h>

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

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, calls = 20000;
  int64_t size = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--calls") calls = std::atoi(argv[i + 1]);
    else if (a == "--size") size = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--calls N] [--size N]\n", argv[0]);
      return 2;
    }
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
  return 0;
}
