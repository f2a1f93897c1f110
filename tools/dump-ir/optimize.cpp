// dump-ir's optimizer: the pass pipeline the flags ask for (kiln/passes/pass.h), and what an
// optimized module prints as: its graph and kernel program, or a backend's code (--emit).
#include <kiln/codegen/cpu.h>
#include <kiln/codegen/cuda.h>
#include <kiln/passes/kernel.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "dump_ir.h"

namespace kiln::dump_ir {

// The pipeline the flags ask for: --passes (with `default` expanded), or the default pipeline
// for -O and for the flags that only observe it (--print-after*, --time-passes, --stats).
static passes::PipelineOptions pipeline_options(const Options& o, std::ostream* log) {
  passes::PipelineOptions po;
  for (const std::string& name : o.passes) {
    if (name == "default") {
      for (const std::string& d : passes::default_pipeline()) po.passes.push_back(d);
    } else {
      po.passes.push_back(name);
    }
  }
  po.disabled = o.disabled;
  po.print_after_all = o.print_after_all;
  po.print_after = o.print_after;
  po.time_passes = o.time_passes;
  if (o.verify_each) po.verify_each = true;  // otherwise the build's default
  po.log = log;
  return po;
}

// The passes that will run, in order (disabled ones left out), for the output's header.
std::vector<std::string> effective_pipeline(const Options& o) {
  passes::PipelineOptions po = pipeline_options(o, nullptr);
  std::vector<std::string> out;
  for (const std::string& n : po.passes.empty() ? passes::default_pipeline() : po.passes) {
    bool disabled = false;
    for (const std::string& d : po.disabled) disabled = disabled || d == n;
    if (!disabled) out.push_back(n);
  }
  return out;
}

// Builds a module from `g` and runs the pipeline over it; prints and timings go to `log`. When
// the pipeline ends without a kernel program and one is needed (--stats, --run), the unfused
// program is built the way passes::optimize does (one kernel per node).
passes::Module optimize_graph(const ir::Graph& g, const Options& o, std::ostream& log) {
  passes::PipelineOptions po = pipeline_options(o, &log);
  // The timing table is written here, as comments, so that the output stays a graph file that
  // dump-ir reads back.
  po.time_passes = false;
  passes::Module m(passes::clone(g));
  passes::PipelineReport report = passes::run_pipeline(m, po);
  if (o.time_passes) log << commented(report.timing_table());
  if (!m.program && (o.stats || o.run)) {
    // An empty plan (its one pass disabled): optimize() only lowers the graph as it is.
    passes::PipelineOptions lower;
    const std::string any = passes::all_passes().front().name;
    lower.passes = {any};
    lower.disabled = {any};
    lower.verify_each = po.verify_each;
    lower.log = &log;
    m = passes::optimize(m.graph, lower);
    if (po.verify_each && m.program)
      if (auto e = passes::verify_program(*m.program)) throw Failure("unfused kernel program: " + *e);
  }
  return m;
}

// The optimized module as text: the graph and its kernel program, or with --emit what a backend
// makes of each kernel (the kernel code, LLVM IR before or after O3, assembly, CUDA C++, PTX).
std::string module_text(const passes::Module& m, const Options& o) {
  if (o.emit.empty() || !m.program) return passes::print(m);
  if (o.emit == "cuda" || o.emit == "ptx")
    return codegen::emit_cuda(*m.program, o.emit == "cuda" ? codegen::CudaEmit::Source : codegen::CudaEmit::Ptx, o.arch,
                             o.size_generic);
  codegen::CpuEmit what = o.emit == "code"       ? codegen::CpuEmit::Code
                          : o.emit == "llvm-raw" ? codegen::CpuEmit::LlvmRaw
                          : o.emit == "llvm"     ? codegen::CpuEmit::Llvm
                                                 : codegen::CpuEmit::Asm;
  return codegen::emit_cpu(*m.program, what, o.size_generic);
}

// After an optimized module in text or DOT form: --stats and the --run checks, as comments.
void print_module_extras(const passes::Module& m, const std::vector<Check>& checks, const Options& o) {
  if (o.stats && m.program) std::cout << commented("kernel program stats:\n" + passes::stats(*m.program));
  std::string lines;
  for (const Check& c : checks) lines += c.str() + "\n";
  std::cout << commented(lines);
}

// The same in JSON: the kernel program's text, the pipeline's log, the stats and the checks.
void add_module_json(json& j, const passes::Module& m, const std::string& log, const std::vector<Check>& checks,
                     const Options& o) {
  j["kernels"] = m.program ? json(passes::print(*m.program)) : json(nullptr);
  if (!log.empty()) j["log"] = log;
  if (o.stats && m.program) j["stats"] = passes::stats(*m.program);
  if (o.run) {
    json arr = json::array();
    for (const Check& c : checks) arr.push_back(c.to_json());
    j["checks"] = arr;
  }
}

// --list-passes: every pass with its stage and summary, then the default pipeline.
int list_passes() {
  size_t width = 0;
  for (const passes::PassInfo& p : passes::all_passes()) width = std::max(width, p.name.size());
  for (const passes::PassInfo& p : passes::all_passes())
    std::cout << p.name << std::string(width + 2 - p.name.size(), ' ')
              << (p.stage == passes::Stage::Graph ? "[graph]   " : "[kernels] ") << p.summary << "\n";
  std::string d;
  for (const std::string& n : passes::default_pipeline()) d += (d.empty() ? "" : ",") + n;
  std::cout << "\ndefault pipeline (-O, --passes=default): " << d << "\n";
  return 0;
}

}  // namespace kiln::dump_ir
