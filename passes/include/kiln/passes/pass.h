// The pass manager: named passes over a module, run as a pipeline that can be printed, timed
// and verified pass by pass.
//
// A module is what the optimizer works on: the graph, and once the `fuse` pass has grouped its
// nodes, the kernel program built from it (kiln/passes/kernel.h). Graph passes (canonicalization)
// rewrite the graph; kernel passes (fuse, layout, memplan) build and refine the kernel program.
// A graph pass never runs after the kernel program exists: the pipeline refuses that order.
//
// Every pass counts the rewrites it made (nodes dropped, merged or folded, rules fired, kernels
// and buffers changed), so `--print-after` can say "unchanged", `--time-passes` lists the
// counts, and tests can check idempotence (a second run of any pass makes none). With `verify_each` the
// graph verifier (ir::verify) and the kernel-program verifier run after every pass and a
// failure names the pass that broke the module.
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::passes {

struct KernelProgram;

struct Module {
  ir::Graph graph;
  std::shared_ptr<KernelProgram> program;  // null until a kernel pass has run

  explicit Module(ir::Graph g);
  Module(Module&&) noexcept;
  Module& operator=(Module&&) noexcept;
  ~Module();
};

enum class Stage : uint8_t { Graph, Kernels };

struct PassInfo {
  std::string name;
  std::string summary;  // one line, for --list-passes and docs/passes.md
  Stage stage;
  std::function<int(Module&)> run;  // returns the number of rewrites it made (0: unchanged)
};

// Every registered pass, in the order of the default pipeline's first use. Built-in passes are
// registered on first use; register_pass adds one (a name already taken is an error).
const std::vector<PassInfo>& all_passes();
const PassInfo* find_pass(std::string_view name);
void register_pass(PassInfo info);
// The pipeline optimize() runs when none is given.
std::vector<std::string> default_pipeline();

struct PipelineOptions {
  std::vector<std::string> passes;      // empty: default_pipeline()
  std::vector<std::string> disabled;    // skipped wherever they appear
  bool print_after_all = false;
  std::vector<std::string> print_after;  // print the module after these passes
  bool time_passes = false;             // a timing table at the end
#ifdef NDEBUG
  bool verify_each = false;
#else
  bool verify_each = true;  // debug builds verify after every pass
#endif
  std::ostream* log = nullptr;  // prints and timings go here (default: std::cerr)
};

struct PassRun {
  std::string name;
  int rewrites = 0;
  double ms = 0;
  bool changed() const { return rewrites > 0; }
};
struct PipelineReport {
  std::vector<PassRun> runs;
  std::string timing_table() const;
};

// Runs the pipeline over the module. If the pipeline ends with no kernel program and `lower`
// is set, an unfused one (one kernel per node) is built so the module can always run. Errors:
// an unknown pass name ("[passes] unknown pass 'x' (known: ...)"), a graph pass after a kernel
// pass, a verifier failure ("[passes] after 'cse': node 3 ...").
PipelineReport run_pipeline(Module& m, const PipelineOptions& opts = {});

// Copies `g` into a module and runs the pipeline, always ending with a kernel program.
Module optimize(const ir::Graph& g, const PipelineOptions& opts = {});

// The module as text: the graph, then the kernel program when there is one.
std::string print(const Module& m);

// A deep copy of a graph (regions included).
ir::Graph clone(const ir::Graph& g);

}  // namespace kiln::passes
