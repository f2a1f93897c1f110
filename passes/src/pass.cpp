// The pass manager (see pass.h): the registry of passes and the pipeline runner.
#include "kiln/passes/pass.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>

#include "passes.h"

namespace kiln::passes {

Module::Module(ir::Graph g) : graph(std::move(g)) {}
Module::Module(Module&&) noexcept = default;
Module& Module::operator=(Module&&) noexcept = default;
Module::~Module() = default;

ir::Graph clone(const ir::Graph& g) { return ir::copy(g); }

namespace {

// Wraps a graph pass; graph passes never see a kernel program (run_pipeline refuses that order).
std::function<int(Module&)> on_graph(int (*f)(ir::Graph&)) {
  return [f](Module& m) { return f(m.graph); };
}

std::vector<PassInfo>& registry() {
  static std::vector<PassInfo> passes = {
      {"dce", "dead-code elimination: drops nodes whose results are unused and that write nothing", Stage::Graph,
       on_graph(dead_code)},
      {"cse", "common-subexpression elimination: equal op, attributes and operands are computed once",
       Stage::Graph, on_graph(common_subexpr)},
      {"fold", "constant folding: nodes whose operands are all constants become constants (small results only)",
       Stage::Graph, on_graph(fold_constants)},
      {"simplify", "algebraic identities that hold in IEEE arithmetic, no-op views and casts", Stage::Graph,
       on_graph(simplify)},
      {"writeback", "reads of a write-back read the value written; overwritten write-backs are dropped",
       Stage::Graph, on_graph(forward_writes)},
      {"fuse", "groups nodes into kernels (elementwise chains, reductions with their producers and row-wise "
               "epilogues, opaque ops with epilogues) and builds the kernel program",
       Stage::Kernels, [](Module& m) { return fuse(m, true); }},
      {"layout", "loop order, dimension coalescing, temporaries' layouts and operand stride classes",
       Stage::Kernels, layout},
      {"memplan", "liveness of temporaries, buffer reuse in one arena, peak-memory estimate", Stage::Kernels,
       plan_memory},
  };
  return passes;
}
std::mutex registry_mutex;

std::string known_names() {
  std::string s;
  for (const auto& p : registry()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x == s) return true;
  return false;
}

void verify_module(const Module& m, const std::string& after) {
  if (auto e = ir::verify(m.graph)) KILN_FAIL("passes", "after '", after, "': ", e->str());
  if (m.program)
    if (auto e = verify_program(*m.program)) KILN_FAIL("passes", "after '", after, "': kernel program: ", *e);
}

}  // namespace

const std::vector<PassInfo>& all_passes() { return registry(); }

const PassInfo* find_pass(std::string_view name) {
  for (const auto& p : registry())
    if (p.name == name) return &p;
  return nullptr;
}

void register_pass(PassInfo info) {
  std::lock_guard lock(registry_mutex);
  KILN_CHECK(!info.name.empty() && info.run, "passes", "register_pass: a pass needs a name and a function");
  KILN_CHECK(!find_pass(info.name), "passes", "register_pass: a pass named '", info.name, "' exists already");
  registry().push_back(std::move(info));
}

std::vector<std::string> default_pipeline() {
  return {"dce", "writeback", "fold", "simplify", "cse", "dce", "fuse", "layout", "memplan"};
}

std::string PipelineReport::timing_table() const {
  std::ostringstream os;
  double total = 0;
  for (const auto& r : runs) total += r.ms;
  os << "===-------------------------------------------------===\n";
  os << "  pass timing (total " << total << " ms)\n";
  char line[160];
  for (const auto& r : runs) {
    std::string what = r.rewrites ? std::to_string(r.rewrites) + (r.rewrites == 1 ? " rewrite" : " rewrites") : "(unchanged)";
    std::snprintf(line, sizeof line, "  %9.3f ms  %5.1f%%  %-10s %s\n", r.ms, total > 0 ? 100.0 * r.ms / total : 0.0,
                  r.name.c_str(), what.c_str());
    os << line;
  }
  return os.str();
}

PipelineReport run_pipeline(Module& m, const PipelineOptions& opts) {
  std::vector<std::string> names = opts.passes.empty() ? default_pipeline() : opts.passes;
  std::vector<const PassInfo*> plan;
  for (const auto& n : opts.disabled)
    KILN_CHECK(find_pass(n), "passes", "--disable-pass: unknown pass '", n, "' (known: ", known_names(), ")");
  for (const auto& n : opts.print_after)
    KILN_CHECK(find_pass(n), "passes", "--print-after: unknown pass '", n, "' (known: ", known_names(), ")");
  bool kernels = m.program != nullptr;
  for (const auto& n : names) {
    const PassInfo* p = find_pass(n);
    KILN_CHECK(p, "passes", "unknown pass '", n, "' (known: ", known_names(), ")");
    if (contains(opts.disabled, n)) continue;
    KILN_CHECK(!(kernels && p->stage == Stage::Graph), "passes", "graph pass '", n,
               "' cannot run after the kernel program is built (put it before fuse/layout/memplan)");
    kernels = kernels || p->stage == Stage::Kernels;
    plan.push_back(p);
  }
  std::ostream& log = opts.log ? *opts.log : std::cerr;
  PipelineReport report;
  for (const PassInfo* p : plan) {
    // A kernel pass with no kernel program yet (fuse left out or disabled) starts from the
    // unfused program: one kernel per node.
    if (p->stage == Stage::Kernels && !m.program && p->name != "fuse") fuse(m, false);
    auto t0 = std::chrono::steady_clock::now();
    const int rewrites = p->run(m);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    report.runs.push_back({p->name, rewrites, ms});
    if (opts.verify_each) verify_module(m, p->name);
    if (opts.print_after_all || contains(opts.print_after, p->name)) {
      if (rewrites)
        log << "// -----// IR after " << p->name << " //----- //\n" << print(m) << "\n";
      else
        log << "// -----// IR after " << p->name << ": unchanged //----- //\n";
    }
  }
  if (opts.time_passes) log << report.timing_table();
  return report;
}

Module optimize(const ir::Graph& g, const PipelineOptions& opts) {
  Module m(clone(g));
  run_pipeline(m, opts);
  if (!m.program) fuse(m, false);
  return m;
}

std::string print(const Module& m) {
  std::string s = ir::print(m.graph);
  if (m.program) s += print(*m.program);
  return s;
}

}  // namespace kiln::passes
