// kiln-bench: kiln compiled against kiln eager (and libtorch, when built with it) on the
// workloads of the registry. The pieces shared by bench.cpp (the driver), measure.cpp (timing,
// checks, STREAM, compile time in child processes), svg.cpp (the chart) and peer_libtorch.cpp.
// docs/bench.md describes the tool.
#pragma once
#include <kiln/kiln.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::bench {

// ---- timing ----

// One timed implementation of a workload. `call` counts every call of this variant (warm-ups
// included), so a variant with several input sets (branch_sign's two paths) alternates them.
struct Timed {
  Timed() = default;
  Timed(std::string n, std::function<void(int)> b, std::function<void(int)> r, std::function<void()> d)
      : name(std::move(n)), before(std::move(b)), run(std::move(r)), drop(std::move(d)) {}
  std::string name;                   // "eager", "compiled", "libtorch"
  std::function<void(int call)> before;  // untimed, before each call (re-copy mutated inputs); may be empty
  std::function<void(int call)> run;     // timed: computes and keeps the result
  std::function<void()> drop;            // untimed: frees the result after the clock stopped
  std::vector<double> seconds;        // the timed reps
  int calls = 0;
};

struct RepPolicy {
  int warmup = 3;         // untimed calls of each variant first
  int reps = 20;          // at least this many timed calls of each variant
  double min_time = 0.5;  // and at least this many seconds of timed calls of each variant
  int max_reps = 10000;   // but never more calls than this
};

// Warms every variant up, then runs them interleaved (one call of each per round, the order
// rotating from round to round) until each has met the policy; a variant that has stops.
void time_interleaved(std::vector<Timed*> variants, const RepPolicy& policy);

double median(std::vector<double> v);
// The median of `reps` timed calls of f, in ms, after 3 untimed ones (kiln-programs, kiln-train).
double median_ms(const std::function<void()>& f, int reps);
// kiln-programs' and kiln-train's command line: [--reps N] [--explain] [--list] [NAME...], each
// NAME one of `known` (name, what), which --list prints. Returns the status to exit with, or -1
// to go on with `reps`, `explain` and `names` set.
struct ProgramArgs {
  int reps = 20;
  bool explain = false;
  std::vector<std::string> names;  // empty: every program
  bool wanted(const std::string& name) const;
};
int parse_program_args(int argc, char** argv, const char* tool,
                       const std::vector<std::pair<std::string, std::string>>& known, ProgramArgs& args);

// ---- checks ----

struct Tolerance {
  double rtol = 0, atol = 0;  // atol is relative to the largest magnitude of the reference
};
// The tolerance for a dtype; `loose` for long transcendental chains and reductions.
Tolerance tolerance_for(DType dt, bool loose);

struct CheckResult {
  bool ok = true;
  std::string message;  // why not, with the largest error
};
// Compares `got` with the reference `want` output by output: the same count, dtypes and
// sizes; bool and integers exactly; floating point |got - want| <= atol * max|want| + rtol * |want|
// elementwise with NaN in the same places and infinities equal.
CheckResult compare_outputs(const std::vector<Tensor>& want, const std::vector<Tensor>& got, bool loose);

// ---- the machine ----

// A STREAM-like copy b[i] = a[i] over two float32 arrays of 128 MiB each with `threads`
// OpenMP threads, warmed first; the median of `reps` runs in GB/s (bytes read + written).
double stream_copy_gbps(int threads, int reps = 10);
// The same on the GPU: a device-to-device copy of `bytes` timed with CUDA events (GB/s read +
// written).
double cuda_copy_gbps(size_t bytes, int reps = 10);
std::string cpu_model();  // /proc/cpuinfo's first "model name"
// The malloc this process runs under: "glibc malloc", or LD_PRELOAD's library (and MALLOC_CONF).
std::string malloc_name();

// ---- compile time in child processes ----

struct CompileTimes {
  std::optional<double> cold_ms, warm_ms;
  // The same first calls less an eager run of the program timed just before in the same child:
  // what tracing, the passes and codegen (cold) or the disk cache's load (warm) add to it.
  std::optional<double> cold_over_eager_ms, warm_over_eager_ms;
  std::string error;  // why they are missing
};
// Runs `self --first-call NAME <args>` twice with KILN_CACHE_DIR set to one fresh temporary
// directory (cold: empty; warm: what the first run left there), then removes the directory;
// each child also prints the time of an eager run just before its first call;
// three such pairs, and the median of each kind (a single child's first call includes the
// trace's first touch of fresh memory, whose cost on a shared host varies up to tenfold).
CompileTimes measure_compile_times(const std::string& workload, const std::vector<std::string>& args);

// ---- the chart ----

struct Series {
  std::string label;                          // "kiln compiled", "libtorch", ...
  std::vector<std::optional<double>> values;  // speedup over kiln eager, per workload
};
// A horizontal bar chart on a log scale: per workload one bar per series, from the 1x line
// (kiln eager) to the speedup; labels with the values. Self-contained SVG text.
std::string speedup_svg(const std::string& title, const std::vector<std::string>& workloads,
                        const std::vector<Series>& series);

// ---- the libtorch peer (peer_libtorch.cpp; only with KILN_BENCH_LIBTORCH) ----
#ifdef KILN_BENCH_LIBTORCH
namespace libtorch {
std::string version();
void set_threads(int n);
int threads();
// The workload's program in libtorch on byte-for-byte copies of `path_inputs` (one input set
// per path; call k uses set k % paths). Its `run` keeps the result; `outputs(path)` runs the
// program once more on that path's inputs (re-copied first when the program mutates them) and
// returns copies as kiln tensors, for the check. Throws kiln::Error for a workload it lacks.
struct Program {
  Timed timed;
  std::function<std::vector<Tensor>(int path)> outputs;
};
bool has_program(const std::string& workload);
Program make(const std::string& workload, const std::vector<std::vector<Tensor>>& path_inputs, bool mutates);
}  // namespace libtorch
#endif

}  // namespace kiln::bench
