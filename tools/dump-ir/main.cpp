// dump-ir: shows the graphs kiln traces, and loads, checks, prints and runs saved ones.
//
//   dump-ir --list                                   the workloads, with their inputs
//   dump-ir softmax                                  the graph traced for a workload (text form)
//   dump-ir layernorm --size bench --format dot      at another size tier, as Graphviz
//   dump-ir add_sin_cos --input a=4096:f16 --input b=4096:f16
//   dump-ir branch_sign --explain                    breaks, guards, both paths of the trace tree
//   dump-ir saved.ir --format json                   load (text or JSON), verify, convert
//   dump-ir saved.json --run                         ... and run it on random inputs
//   dump-ir branch_sign > three.ir && dump-ir three.ir   whatever dump-ir writes as text or JSON
//                                                    loads back, every graph in it
//
// The optimizer (kiln/passes/pass.h), for workloads and files alike; each graph (every graph of
// a workload's trace tree) becomes a passes::Module and goes through passes::run_pipeline, and
// the result prints as passes::print(module): the graph, then its kernel program.
//
//   dump-ir --list-passes                            every pass with its summary; the default pipeline
//   dump-ir softmax -O                               the default pipeline (= --passes=default)
//   dump-ir softmax --passes=dce,cse,fuse            these passes in this order (`default` expands)
//   dump-ir softmax -O --disable-pass=fold,cse       skip passes wherever they appear (repeatable)
//   dump-ir softmax --passes=dce,cse --print-after-all     the module after each pass ("unchanged")
//   dump-ir softmax -O --print-after=fuse --print-after memplan
//   dump-ir softmax -O --time-passes                 a timing table after each graph's pipeline
//   dump-ir softmax -O --verify-each                 the verifiers after every pass (debug: always)
//   dump-ir layernorm -O --stats                     kernels, bytes read/written per kernel, peak
//   dump-ir saved.ir -O --run                        the kernel program (exec::ProgramRunner) vs
//                                                    the reference executor on the unoptimized graph
//
// Any of --passes, -O, --disable-pass, --print-after(-all), --time-passes, --stats turns the
// optimizer on (--verify-each alone is a usage error). The pipeline's prints and timings go to
// stdout, in order with the rest (in JSON: an "optimized" entry per graph with "log", "kernels",
// "stats", "checks"; in DOT: comments). --stats and --run need a kernel program: if the
// pipeline built none (no kernel pass in it), the graph is lowered unfused, one kernel per node,
// as passes::optimize does. --run checks each output with |got - want| <= atol + rtol * |want|:
// float32 rtol 1e-4 atol 1e-5, float64 1e-10, f16/bf16 1e-2, integers and bool exactly. A
// workload's graph gets the workload's inputs for its %a<k> inputs, random ones for values
// crossing a graph break; a file's graph gets random inputs, the same for both runs.
//
// Every failure is one line on stderr, "dump-ir: error: ...", with exit status 1 (2 for a
// command line it cannot make sense of; 3 when --run finds the optimized kernel program's
// outputs differ from the reference executor's); files report FILE:LINE:COL.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <new>
#include <string>

#include "dump_ir.h"
#include "workloads.h"

namespace {

using namespace kiln::dump_ir;
namespace wl = kiln::workloads;

// One line: newlines inside a message become "; ".
std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "; ";
    else if (c != '\r') out += c;
  }
  return out;
}

int report(const std::string& message, int code) {
  std::cout.flush();
  std::cerr << "dump-ir: error: " << one_line(message) << "\n";
  return code;
}

int run_main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "dump-ir: print the graphs kiln traces for a workload, or load, verify, print and run a saved graph.\n"
      "A TARGET that names a workload (see --list) is traced with kiln::compile on fresh random inputs; any\n"
      "other TARGET is a graph file in kiln's text form or JSON (JSON when it starts with '{').",
      "dump-ir"};
  app.add_option("target", o.target, "A workload name (see --list) or a graph file (.ir text form or .json)")
      ->type_name("TARGET");
  app.add_flag("-l,--list", o.list, "List the workloads with their programs and their inputs at --size");
  app.add_option("-s,--size", o.size, "Size tier of the workload's inputs")
      ->check(CLI::IsMember({"small", "bench", "gpu"}))
      ->capture_default_str();
  app.add_option("-i,--input", o.inputs,
                 "Override one input of the workload: NAME=SIZES[:DTYPE] or NAME=:DTYPE, SIZES as 1024x1024, "
                 "[1024,1024], or [] / scalar for 0-d; DTYPE one of b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64. "
                 "Repeatable")
      ->type_name("SPEC");
  app.add_option("--dtype", o.dtype, "Dtype for every floating-point input of the workload (e.g. f16, f64)")
      ->type_name("DTYPE");
  app.add_option("-f,--format", o.format, "Output: kiln's text form, JSON, or Graphviz DOT (one digraph per graph)")
      ->check(CLI::IsMember({"text", "json", "dot"}))
      ->capture_default_str();
  app.add_flag("-e,--explain", o.explain,
               "Workloads: the full explanation (graph breaks with source locations, guards with the values seen, "
               "every trace and why, call statistics). Files: a one-line summary");
  app.add_flag("-r,--run", o.run,
               "Run and print the outputs' dtypes and sizes (values too for outputs of at most 16 elements). "
               "Files run on random inputs of the graph's input types with the reference executor. "
               "Optimizing: also runs each kernel program on the kernel interpreter and, where kiln has its LLVM "
               "backend, compiled for the CPU, and checks both against the reference executor (exit status 3 when "
               "they differ)");
  app.add_option("--seed", o.seed, "Seed of the random inputs (kiln::manual_seed)")
      ->check([](const std::string& v) -> std::string {
        return !v.empty() && v[0] == '-' ? "the seed is a non-negative integer, got " + v : "";
      })
      ->capture_default_str();
  // The optimizer (kiln/passes/pass.h). The pass lists take one argument per occurrence
  // (`--passes dce softmax` leaves softmax as the TARGET), split at commas.
  app.add_flag("--list-passes", o.list_passes, "List the passes with their summaries, and the default pipeline");
  CLI::Option* passes_opt =
      app.add_option("--passes", o.passes,
                     "Optimize with these passes, in order (comma list; `default` is the default pipeline), "
                     "e.g. --passes=dce,cse or --passes=default")
          ->delimiter(',')
          ->allow_extra_args(false)
          ->type_name("PASS,...");
  app.add_flag("-O,--optimize", o.optimize_flag, "Optimize with the default pipeline (see --list-passes)")
      ->excludes(passes_opt);
  app.add_option("--disable-pass", o.disabled, "Skip this pass wherever it appears in the pipeline (repeatable, "
                                               "or a comma list)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->type_name("PASS");
  app.add_flag("--print-after-all", o.print_after_all, "Print the module after every pass (or that it is unchanged)");
  app.add_option("--print-after", o.print_after, "Print the module after this pass (repeatable, or a comma list)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->type_name("PASS");
  app.add_flag("--time-passes", o.time_passes, "Print a table of each pass's time after the pipeline");
  app.add_flag("--verify-each", o.verify_each,
               "Verify the graph and the kernel program after every pass (debug builds always do)");
  app.add_option("--emit", o.emit,
                 "Print what a backend makes of each kernel instead of the kernel program: its scalar "
                 "kernel code, the LLVM IR before (llvm-raw) or after O3 (llvm), the host assembly, the CUDA C++ "
                 "(cuda) or its PTX (ptx, compiled by NVRTC; no GPU needed). Implies -O")
      ->check(CLI::IsMember({"code", "llvm-raw", "llvm", "asm", "cuda", "ptx"}))
      ->type_name("WHAT");
  app.add_option("--arch", o.arch, "With --emit=ptx: the GPU architecture to compile for, as a number (90: sm_90)")
      ->check(CLI::Range(50, 999))
      ->type_name("SM");
  app.add_flag("--size-generic", o.size_generic,
               "With --emit: the size-generic kernels kiln compiles once a dim is dynamic, and for eager GPU ops (loop extents and "
               "strides read from the arguments) instead of kernels specialised on the sizes");
  app.add_flag("--stats", o.stats, "Print the kernel program's statistics: bytes read and written per kernel "
                                   "and its traffic (each buffer's distinct bytes), peak memory");
  app.footer(
      "Examples:\n"
      "  dump-ir --list\n"
      "  dump-ir softmax                                   the traced graph, text form\n"
      "  dump-ir layernorm --size bench --format dot | dot -Tsvg > layernorm.svg\n"
      "  dump-ir add_sin_cos --input a=4096:f16 --input b=4096:f16\n"
      "  dump-ir add_sin_cos_bf16 --dtype f16\n"
      "  dump-ir branch_sign --explain                     graph break, guard, both paths\n"
      "  dump-ir softmax > softmax.ir && dump-ir softmax.ir --run\n"
      "  dump-ir softmax.ir --format json > softmax.json && dump-ir softmax.json\n"
      "  dump-ir --list-passes\n"
      "  dump-ir layernorm -O --stats                      the kernel program and its memory traffic\n"
      "  dump-ir softmax --passes=dce,cse --print-after-all --time-passes\n"
      "  dump-ir saved.ir -O --disable-pass=fold --run     kernel program vs reference executor\n"
      "\n"
      "Optimizing: any of --passes, -O, --disable-pass, --print-after(-all), --time-passes, --stats runs each\n"
      "graph through the pass pipeline (the default one unless --passes says otherwise) and prints the result:\n"
      "the graph, then its kernel program. Prints and timings of the pipeline go to stdout. With --run the\n"
      "kernel program runs on the inputs and is checked against the reference executor on the unoptimized\n"
      "graph, output by output (float32: rtol 1e-4, atol 1e-5; float64: 1e-10; f16/bf16: 1e-2; exact\n"
      "otherwise).\n"
      "\n"
      "Text output is a graph file: header lines are comments (//). A workload whose trace has graph breaks\n"
      "prints one graph per piece of its trace tree. branch_sign is run on inputs of both signs so that\n"
      "both paths are traced. Whatever dump-ir writes as text or JSON loads back as a graph file, every graph\n"
      "in it (a kernel program after a graph, from -O, is skipped); DOT and --emit output are for other tools.\n"
      "\n"
      "Exit status: 0 on success; 1 for an error (unknown workload or input, bad size or dtype, a graph file\n"
      "that does not parse or verify: FILE:LINE:COL: message, a kiln error while tracing or running);\n"
      "2 for a command line that does not parse; 3 when --run finds the optimized kernel program's outputs\n"
      "differ from the reference executor's. Errors are one line on stderr.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    throw Failure(std::string(e.what()) + " (see --help)", kUsageExit);
  }
  o.size_given = app.count("--size") > 0;
  for (const auto* names : {&o.passes, &o.disabled, &o.print_after})
    for (const std::string& n : *names)
      if (n.empty()) throw Failure("empty pass name in a pass list (see --list-passes)", kUsageExit);
  o.optimize = o.optimize_flag || !o.emit.empty() || !o.passes.empty() || !o.disabled.empty() || o.print_after_all ||
               !o.print_after.empty() || o.time_passes || o.stats;
  if (o.verify_each && !o.optimize)
    throw Failure("--verify-each applies to the optimizer: give -O or --passes", kUsageExit);

  if (o.list_passes) {
    if (!o.target.empty() || o.list) throw Failure("--list-passes takes no TARGET", kUsageExit);
    return list_passes();
  }
  if (o.list) {
    if (!o.target.empty()) throw Failure("--list takes no TARGET", kUsageExit);
    return list_workloads(o);
  }
  if (o.target.empty()) throw Failure("give a workload name (see --list) or a graph file (see --help)", kUsageExit);
  if (const wl::Workload* w = wl::find_workload(o.target)) return dump_workload(*w, o);
  std::error_code ec;
  bool looks_like_file = std::filesystem::exists(o.target, ec) || o.target.find('/') != std::string::npos ||
                         o.target.find('.') != std::string::npos;
  if (looks_like_file) return dump_file(o.target, o);
  throw Failure("unknown workload '" + o.target + "' (see --list)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const Failure& e) {
    return report(e.what(), e.code);
  } catch (const kiln::Error& e) {
    return report(e.what(), kErrorExit);
  } catch (const std::bad_alloc&) {
    return report("out of memory (try a smaller --size)", kErrorExit);
  } catch (const std::exception& e) {
    return report(e.what(), kErrorExit);
  } catch (...) {
    return report("unknown exception", kErrorExit);
  }
}
