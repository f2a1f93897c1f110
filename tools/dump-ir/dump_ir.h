// dump-ir's parts (main.cpp: the command line; workload.cpp, file.cpp: the two kinds of TARGET;
// optimize.cpp: the pass pipeline and what it prints; check.cpp: --run's inputs and checks;
// output.cpp: printing results). Internal to the tool.
#pragma once
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/pass.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::workloads {
struct Workload;
}

namespace kiln::dump_ir {

using nlohmann::json;

constexpr int kErrorExit = 1, kUsageExit = 2;
constexpr int kMismatchExit = 3;  // --run with the optimizer: the kernel program's outputs differ

// A failure the tool reports as one line; `code` is the exit status.
struct Failure : std::runtime_error {
  int code;
  explicit Failure(const std::string& what, int c = kErrorExit) : std::runtime_error(what), code(c) {}
};

struct Options {
  std::string target;
  bool list = false;
  std::string size = "small";
  std::vector<std::string> inputs;
  std::string dtype;
  std::string format = "text";
  bool explain = false;
  bool run = false;
  uint64_t seed = 0;
  bool size_given = false;
  // the optimizer (kiln/passes/pass.h)
  bool list_passes = false;
  std::vector<std::string> passes;  // --passes, `default` not yet expanded
  bool optimize_flag = false;       // -O
  std::vector<std::string> disabled;
  bool print_after_all = false;
  std::vector<std::string> print_after;
  bool time_passes = false;
  bool verify_each = false;
  bool stats = false;
  std::string emit;  // --emit: code, llvm-raw, llvm, asm (the CPU backend), cuda, ptx (the CUDA backend)
  int arch = 90;     // --arch: the GPU architecture --emit=ptx compiles for
  bool size_generic = false;  // --size-generic: emit the kernels with sizes as arguments
  bool optimize = false;  // any of the optimizer's flags: the graphs go through the pipeline
};

// ---------------------------------------------------------------- output.cpp

std::string shape_str(IntArrayRef sizes);
std::string join(const std::vector<std::string>& parts, const std::string& sep);
// Prefixes every line with "// " (a comment in kiln's text form and in DOT).
std::string commented(const std::string& text);
std::vector<ir::Slot> to_slots(const std::vector<Tensor>& ts);
// The outputs, as comment lines (text, dot) or a JSON array in (*doc)["outputs"].
void print_outputs(const std::vector<ir::Slot>& outs, const std::string& format, json* doc);

// ---------------------------------------------------------------- check.cpp

// --run with the optimizer: the kernel program against the reference executor, per output.
struct Tolerance {
  double rtol = 0, atol = 0;
};

struct Check {
  std::string where;      // "output 1" or "graph 2 output 1"
  std::string what;       // "f32[64, 128]"
  double max_diff = 0;    // NaN where one side is NaN and the other is not
  Tolerance tol;
  bool ok = true;
  std::string problem;    // dtype or size mismatch, missing output
  // "f32[64, 128] max abs diff 1.19e-07 (rtol 0.0001, atol 1e-05)"
  std::string result() const;
  // "check output 0: f32[64, 128] max abs diff 0 (rtol 0.0001, atol 1e-05): ok"
  std::string str() const;
  json to_json() const;
};

// Random values for one graph input: a number, or a tensor with the type's sizes and strides.
ir::Slot random_input(const ir::Value& v, uint64_t seed, size_t index);
// Runs the module's kernel program and the unoptimized graph `reference` on the same inputs
// and compares every output. Returns the program's outputs.
std::vector<Tensor> run_and_check(const passes::Module& m, const ir::Graph& reference,
                                  const std::function<std::vector<ir::Slot>()>& make_inputs,
                                  const std::string& prefix, std::vector<Check>& checks);
// The first failed check as the error of exit status 3 (after everything is printed), or nothing.
void fail_on_mismatch(const std::string& target, const std::vector<Check>& checks);

// ---------------------------------------------------------------- optimize.cpp

// The passes that will run, in order (disabled ones left out), for the output's header.
std::vector<std::string> effective_pipeline(const Options& o);
// Builds a module from `g` and runs the pipeline over it; prints and timings go to `log`.
passes::Module optimize_graph(const ir::Graph& g, const Options& o, std::ostream& log);
// The optimized module as text, or with --emit what a backend makes of each kernel.
std::string module_text(const passes::Module& m, const Options& o);
// After an optimized module in text or DOT form: --stats and the --run checks, as comments.
void print_module_extras(const passes::Module& m, const std::vector<Check>& checks, const Options& o);
// The same in JSON: the kernel program's text, the pipeline's log, the stats and the checks.
void add_module_json(json& j, const passes::Module& m, const std::string& log, const std::vector<Check>& checks,
                     const Options& o);
int list_passes();  // --list-passes

// ---------------------------------------------------------------- workload.cpp, file.cpp

int list_workloads(const Options& o);  // --list
int dump_workload(const workloads::Workload& w, const Options& o);
int dump_file(const std::string& path, const Options& o);

}  // namespace kiln::dump_ir
