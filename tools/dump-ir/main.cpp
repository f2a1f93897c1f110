// dump-ir: shows the graphs kiln traces, and loads, checks, prints and runs saved ones.
//
//   dump-ir --list                                   the workloads, with their inputs
//   dump-ir softmax                                  the graph traced for a workload (text form)
//   dump-ir layernorm --size bench --format dot      at another size tier, as Graphviz
//   dump-ir add_sin_cos --input a=4096:f16 --input b=4096:f16
//   dump-ir branch_sign --explain                    breaks, guards, both paths of the trace tree
//   dump-ir saved.ir --format json                   load (text or JSON), verify, convert
//   dump-ir saved.json --run                         ... and run it on random inputs
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
//   dump-ir saved.ir -O --run                        the kernel program (passes::ProgramRunner) vs
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
#include <kiln/codegen/cpu.h>
#include <kiln/codegen/cuda.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dot.h"
#include "workloads.h"

namespace {

using namespace kiln;
namespace wl = kiln::workloads;
using nlohmann::json;

constexpr int kErrorExit = 1, kUsageExit = 2;
constexpr int kMismatchExit = 3;  // --run with the optimizer: the kernel program's outputs differ

// A failure the tool reports as one line; `code` is the exit status.
struct Failure : std::runtime_error {
  int code;
  explicit Failure(const std::string& what, int c = kErrorExit) : std::runtime_error(what), code(c) {}
};

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

// ---------------------------------------------------------------- input specs

DType dtype_or_fail(const std::string& s, const std::string& context) {
  if (auto d = wl::parse_dtype(s)) return *d;
  throw Failure(context + "unknown dtype '" + s + "' (one of b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64)");
}

// The registry's errors (a bad --input, an override naming no input) as the tool's one line.
[[noreturn]] void workload_failure(const Error& e) {
  std::string m = e.what();
  const std::string prefix = "[workloads] ";
  throw Failure(m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m);
}

std::string shape_str(IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// ---------------------------------------------------------------- output helpers

// Prefixes every line with "// " (a comment in kiln's text form and in DOT).
std::string commented(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += (line.empty() ? "//" : "// " + line) + "\n";
  return out;
}

constexpr int64_t kTinyOutput = 16;  // outputs with at most this many elements are printed in full

std::string describe_output(size_t i, const ir::Slot& s) {
  std::ostringstream o;
  o << "output " << i << ": ";
  if (s.is_scalar) {
    const Scalar& v = s.scalar;
    o << "number ";
    if (v.is_bool()) o << (v.to_bool() ? "true" : "false");
    else if (v.is_integral()) o << v.to_int();
    else o << v.to_double();
    return o.str();
  }
  const Tensor& t = s.tensor;
  o << ir::short_name(t.dtype()) << shape_str(t.sizes());
  if (t.numel() <= kTinyOutput) o << " = " << t;
  return o.str();
}

json output_json(const ir::Slot& s) {
  if (s.is_scalar) {
    const Scalar& v = s.scalar;
    if (v.is_bool()) return {{"kind", "number"}, {"value", v.to_bool()}};
    if (v.is_integral()) return {{"kind", "number"}, {"value", v.to_int()}};
    return {{"kind", "number"}, {"value", v.to_double()}};
  }
  const Tensor& t = s.tensor;
  json j = {{"kind", "tensor"}, {"dtype", std::string(ir::short_name(t.dtype()))}, {"sizes", t.sizes().vec()}};
  if (t.numel() <= kTinyOutput) {
    std::vector<double> values = t.to_vector<double>();
    json arr = json::array();
    for (double v : values) {
      if (std::isnan(v)) arr.push_back("nan");
      else if (std::isinf(v)) arr.push_back(v > 0 ? "inf" : "-inf");
      else arr.push_back(v);
    }
    j["values"] = arr;
  }
  return j;
}

std::vector<ir::Slot> to_slots(const std::vector<Tensor>& ts) {
  std::vector<ir::Slot> out(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) out[i].tensor = ts[i];
  return out;
}

// The outputs, as comment lines (text, dot) or a JSON array.
void print_outputs(const std::vector<ir::Slot>& outs, const std::string& format, json* doc) {
  if (format == "json") {
    json arr = json::array();
    for (const auto& s : outs) arr.push_back(output_json(s));
    (*doc)["outputs"] = arr;
    return;
  }
  std::string text;
  for (size_t i = 0; i < outs.size(); ++i) text += describe_output(i, outs[i]) + "\n";
  std::cout << commented(text);
}

// Random values for one graph input: a number, or a tensor with the type's sizes and strides
// (a view over a random buffer large enough for them).
ir::Slot random_input(const ir::Value& v, uint64_t seed, size_t index) {
  manual_seed(seed + index);
  const ir::Type& t = v.type;
  ir::Slot s;
  KILN_CHECK(t.device.is_cpu(), "run", "input %", v.name, " is on ", t.device.str(), "; --run runs on the CPU only");
  if (t.is_scalar() || t.wrapped) {
    s.is_scalar = true;
    if (t.dtype == kBool) s.scalar = Scalar(true);
    else if (is_floating(t.dtype)) s.scalar = Scalar(randn({}, kFloat64).item<double>());
    else s.scalar = Scalar(randint(1, 11, {}, kInt64).item<int64_t>());
    return s;
  }
  int64_t extent = 1;
  bool empty = false;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] == 0) empty = true;
    extent += (t.sizes[d] - 1) * std::max<int64_t>(t.strides[d], 0);
  }
  if (empty) {
    s.tensor = empty_strided(t.sizes, t.strides, t.dtype);
    return s;
  }
  wl::InputSpec spec{v.name, t.dtype, {extent}};
  s.tensor = wl::make_tensor(spec, wl::Init::Normal).as_strided(t.sizes, t.strides, 0);
  return s;
}

// ---------------------------------------------------------------- the optimizer

// The pipeline the flags ask for: --passes (with `default` expanded), or the default pipeline
// for -O and for the flags that only observe it (--print-after*, --time-passes, --stats).
passes::PipelineOptions pipeline_options(const Options& o, std::ostream* log) {
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

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
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
  passes::Module m(passes::clone(g));
  passes::run_pipeline(m, po);
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

// --run with the optimizer: the kernel program against the reference executor, per output.
struct Tolerance {
  double rtol = 0, atol = 0;
};
Tolerance tolerance(DType d) {
  switch (d) {
    case kFloat32: return {1e-4, 1e-5};
    case kFloat64: return {1e-10, 1e-10};
    case kFloat16: case kBFloat16: return {1e-2, 1e-2};
    default: return {0, 0};  // integers and bool: exact
  }
}

struct Check {
  std::string where;      // "output 1" or "graph 2 output 1"
  std::string what;       // "f32[64, 128]"
  double max_diff = 0;    // NaN where one side is NaN and the other is not
  Tolerance tol;
  bool ok = true;
  std::string problem;    // dtype or size mismatch, missing output
  // "f32[64, 128] max abs diff 1.19e-07 (rtol 0.0001, atol 1e-05)"
  std::string result() const {
    if (!problem.empty()) return what + ": " + problem;
    std::ostringstream s;
    s << what << " max abs diff " << std::setprecision(3) << max_diff;
    if (tol.rtol == 0 && tol.atol == 0) s << " (exact)";
    else s << " (rtol " << tol.rtol << ", atol " << tol.atol << ")";
    return s.str();
  }
  // "check output 0: f32[64, 128] max abs diff 0 (rtol 0.0001, atol 1e-05): ok"
  std::string str() const { return "check " + where + ": " + result() + (ok ? ": ok" : ": MISMATCH"); }
  json to_json() const {
    json j = {{"where", where}, {"what", what}, {"ok", ok}, {"rtol", tol.rtol}, {"atol", tol.atol}};
    if (!problem.empty()) j["problem"] = problem;
    else if (std::isnan(max_diff)) j["max_abs_diff"] = "nan";
    else if (std::isinf(max_diff)) j["max_abs_diff"] = "inf";
    else j["max_abs_diff"] = max_diff;
    return j;
  }
};

// Compares the program's output `got` with the reference's `want` (allclose-style:
// |got - want| <= atol + rtol * |want|; NaN equals NaN; ints and bool exactly).
Check compare(std::string where, const ir::Slot& want, const Tensor& got) {
  Check c;
  c.where = std::move(where);
  if (want.is_scalar) {
    c.what = "number";
    if (got.numel() != 1) {
      c.ok = false;
      c.problem = "the program returned " + std::string(ir::short_name(got.dtype())) + shape_str(got.sizes()) +
                  " for a number";
      return c;
    }
    c.tol = tolerance(got.dtype());
    double a = got.to_vector<double>()[0], b = want.scalar.to_double();
    c.max_diff = (a == b || (std::isnan(a) && std::isnan(b))) ? 0 : std::fabs(a - b);
    c.ok = !std::isnan(c.max_diff) && c.max_diff <= c.tol.atol + c.tol.rtol * std::fabs(b);
    return c;
  }
  const Tensor& ref = want.tensor;
  c.what = std::string(ir::short_name(ref.dtype())) + shape_str(ref.sizes());
  if (got.dtype() != ref.dtype() || got.sizes().vec() != ref.sizes().vec()) {
    c.ok = false;
    c.problem = "the program returned " + std::string(ir::short_name(got.dtype())) + shape_str(got.sizes());
    return c;
  }
  c.tol = tolerance(ref.dtype());
  if (!is_floating(ref.dtype())) {
    std::vector<int64_t> a = got.to_vector<int64_t>(), b = ref.to_vector<int64_t>();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) {
        c.ok = false;
        c.max_diff = std::max(c.max_diff, std::fabs(double(a[i]) - double(b[i])));
      }
    return c;
  }
  std::vector<double> a = got.to_vector<double>(), b = ref.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    double d = std::fabs(a[i] - b[i]);  // NaN when one side is NaN, inf when one is infinite
    if (std::isnan(d) || !(d <= c.tol.atol + c.tol.rtol * std::fabs(b[i]))) c.ok = false;
    if (std::isnan(d) || std::isnan(c.max_diff)) c.max_diff = std::numeric_limits<double>::quiet_NaN();
    else c.max_diff = std::max(c.max_diff, d);
  }
  return c;
}

// Runs the module's kernel program and the unoptimized graph `reference` on the same inputs
// (`make_inputs` is called once per run: fresh inputs, since a graph may write into them) and
// compares every output. Returns the program's outputs.
std::vector<Tensor> run_and_check(const passes::Module& m, const ir::Graph& reference,
                                  const std::function<std::vector<ir::Slot>()>& make_inputs,
                                  const std::string& prefix, std::vector<Check>& checks) {
  KILN_CHECK(m.program != nullptr, "run", "the pipeline built no kernel program");
  std::vector<ir::Slot> ref_in = make_inputs();
  std::vector<ir::Slot> want = ir::Executable(reference).run_slots(ref_in);
  std::vector<ir::Slot> prog_in = make_inputs();
  passes::ProgramRunner runner(*m.program);
  std::vector<Tensor> got = runner.run(std::span<const ir::Slot>(prog_in));
  for (size_t i = 0; i < std::max(want.size(), got.size()); ++i) {
    std::string where = prefix + "output " + std::to_string(i);
    if (i >= got.size() || i >= want.size()) {
      Check c;
      c.where = where;
      c.what = i < want.size() ? "reference output" : "program output";
      c.ok = false;
      c.problem = i < want.size() ? "missing from the program's outputs" : "not returned by the reference";
      checks.push_back(c);
      continue;
    }
    checks.push_back(compare(where, want[i], got[i]));
  }
  return got;
}

// The first failed check as the error of exit status 3 (after everything is printed), or nothing.
void fail_on_mismatch(const std::string& target, const std::vector<Check>& checks) {
  for (const Check& c : checks)
    if (!c.ok)
      throw Failure(target + ": --run: " + c.where + " of the kernel program differs from the reference executor's: " +
                        c.result(),
                    kMismatchExit);
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

// The inputs of one traced graph for --run: an input named %a<k> is the workload's k-th
// argument (a copy of the first input set's, when its type matches); any other input (a value
// crossing a graph break) gets random values of its type, as for graph files.
std::vector<ir::Slot> workload_graph_inputs(const ir::Graph& g, const std::vector<Tensor>& args, uint64_t seed) {
  std::vector<ir::Slot> ins;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value& v = *g.inputs()[i];
    const std::string& n = v.name;
    size_t k = args.size();
    if (n.size() > 1 && n.size() < 10 && n[0] == 'a' && n.find_first_not_of("0123456789", 1) == std::string::npos)
      k = std::stoul(n.substr(1));
    if (k < args.size() && !v.type.is_scalar() && !v.type.wrapped && args[k].dtype() == v.type.dtype &&
        args[k].sizes().vec() == v.type.sizes) {
      ir::Slot s;
      s.tensor = args[k].clone();
      if (s.tensor.strides().vec() == v.type.strides) {
        ins.push_back(s);
        continue;
      }
    }
    ins.push_back(random_input(v, seed, i));
  }
  return ins;
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

// ---------------------------------------------------------------- --list

int list_workloads(const Options& o) {
  wl::Tier tier = *wl::tier_from_name(o.size);
  if (o.format == "json") {
    json arr = json::array();
    for (const wl::Workload& w : wl::all_workloads()) {
      json ins = json::array();
      for (const wl::InputDesc& d : w.inputs) {
        json sizes = json::object();
        for (int t = 0; t < wl::kNumTiers; ++t) sizes[std::string(wl::tier_name(wl::Tier(t)))] = d.sizes[t];
        ins.push_back({{"name", d.name}, {"dtype", std::string(ir::short_name(d.dtype))}, {"sizes", sizes}});
      }
      arr.push_back({{"name", w.name}, {"description", w.description}, {"inputs", ins}, {"paths", w.paths},
                     {"mutates_inputs", w.mutates_inputs}});
    }
    std::cout << arr.dump(2) << "\n";
    return 0;
  }
  size_t width = 0;
  for (const wl::Workload& w : wl::all_workloads()) width = std::max(width, w.name.size());
  for (const wl::Workload& w : wl::all_workloads()) {
    std::string ins;
    for (const wl::InputSpec& s : w.input_specs(tier)) ins += (ins.empty() ? "" : ", ") + s.str();
    std::cout << w.name << std::string(width + 2 - w.name.size(), ' ') << w.description << "\n"
              << std::string(width + 2, ' ') << "inputs (" << o.size << "): " << ins << "\n";
  }
  return 0;
}

// ---------------------------------------------------------------- workloads

json explanation_json(const Explanation& ex) {
  json breaks = json::array();
  for (const auto& b : ex.breaks) breaks.push_back({{"reason", b.reason}, {"where", b.where}});
  const CompileStats& s = ex.stats;
  return {{"breaks", breaks},
          {"guards", ex.guards},
          {"recompiles", ex.recompiles},
          {"eager_reason", ex.eager_reason},
          {"stats",
           {{"calls", s.calls},
            {"hits", s.hits},
            {"misses", s.misses},
            {"guard_failures", s.guard_failures},
            {"compiles", s.compiles},
            {"breaks", s.breaks},
            {"eager_calls", s.eager_calls}}}};
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

int dump_workload(const wl::Workload& w, const Options& o) {
  wl::Tier tier = *wl::tier_from_name(o.size);
  std::optional<DType> dtype;
  if (!o.dtype.empty()) dtype = dtype_or_fail(o.dtype, "--dtype: ");
  std::vector<wl::InputOverride> overrides;
  std::vector<wl::InputSpec> specs;
  try {
    for (const std::string& spec : o.inputs) overrides.push_back(wl::parse_input_override(spec));
    specs = w.input_specs(tier, dtype, overrides);
  } catch (const Error& e) {
    workload_failure(e);
  }

  // One input set per path of the program (branch_sign: a positive and a negative sum), so
  // the trace tree holds every path; the explanation is for the first set's signature.
  std::vector<std::vector<Tensor>> sets;
  std::vector<Tensor> first_outputs;
  Explanation ex;
  try {
    sets = w.path_inputs(tier, o.seed, dtype, overrides);
    CompileOptions copts;
    copts.name = w.name;
    auto f = compile([&w](const std::vector<Tensor>& in) { return w.run(in); }, copts);
    for (size_t i = 0; i < sets.size(); ++i) {
      std::vector<Tensor> in = w.mutates_inputs ? clone_all(sets[i]) : sets[i];
      std::vector<Tensor> out = f(in);
      if (i == 0) first_outputs = out;
    }
    std::vector<Tensor> in = w.mutates_inputs ? clone_all(sets[0]) : sets[0];
    ex = f.explain(in);
  } catch (const Error& e) {
    throw Failure(w.name + ": " + e.what());
  }
  std::string inputs_line;
  for (const wl::InputSpec& s : specs) inputs_line += (inputs_line.empty() ? "" : ", ") + s.str();
  std::string header = "workload " + w.name + " (" + o.size + "): " + w.description + "\ninputs: " + inputs_line +
                       (sets.size() > 1 ? "\nrun on " + std::to_string(sets.size()) + " input sets, one per path" : "") +
                       (o.optimize ? "\npipeline: " + join(effective_pipeline(o), ", ") : "") + "\n";

  // The optimizer: each graph of the trace tree goes through the pipeline (its prints and
  // timings go to `log`: stdout in text form, else the JSON or DOT document), and with --run
  // its kernel program is checked against the reference executor on the graph's inputs.
  const bool several = ex.graphs.size() > 1;
  std::vector<Check> all_checks;
  auto optimize_piece = [&](size_t i, std::ostream& log, std::vector<Check>& checks) {
    const std::string label = several ? "graph " + std::to_string(i) + " " : "";
    ir::Graph reference = ir::parse(ex.graphs[i].text);
    try {
      passes::Module m = optimize_graph(reference, o, log);
      if (o.run) {
        auto make = [&] { return workload_graph_inputs(reference, sets[0], o.seed); };
        run_and_check(m, reference, make, label, checks);
      }
      all_checks.insert(all_checks.end(), checks.begin(), checks.end());
      return m;
    } catch (const Error& e) {
      throw Failure(w.name + (several ? " graph " + std::to_string(i) : "") + ": " + e.what());
    }
  };

  if (o.format == "json") {
    json doc;
    doc["workload"] = w.name;
    doc["description"] = w.description;
    doc["size"] = o.size;
    json ins = json::array();
    for (const wl::InputSpec& s : specs)
      ins.push_back({{"name", s.name}, {"dtype", std::string(ir::short_name(s.dtype))}, {"sizes", s.sizes}});
    doc["inputs"] = ins;
    doc["signature"] = ex.signature;
    json graphs = json::array(), optimized = json::array();
    for (size_t i = 0; i < ex.graphs.size(); ++i) {
      if (!o.optimize) {
        graphs.push_back(json::parse(ir::to_json(ir::parse(ex.graphs[i].text))));
        continue;
      }
      std::ostringstream log;
      std::vector<Check> checks;
      passes::Module m = optimize_piece(i, log, checks);
      graphs.push_back(json::parse(ir::to_json(m.graph)));
      json piece = json::object();
      add_module_json(piece, m, log.str(), checks, o);
      optimized.push_back(piece);
    }
    doc["graphs"] = graphs;
    if (o.optimize) {
      doc["pipeline"] = effective_pipeline(o);
      doc["optimized"] = optimized;  // per graph: the kernel program, the pipeline's log, stats, checks
    }
    if (o.explain) doc["explain"] = explanation_json(ex);
    if (o.run) print_outputs(to_slots(first_outputs), o.format, &doc);
    std::cout << doc.dump(2) << "\n";
    fail_on_mismatch(w.name, all_checks);
    return 0;
  }
  if (o.format == "dot") {
    std::cout << commented(header);
    if (o.explain) {
      Explanation brief = ex;  // the graphs follow as digraphs
      brief.graphs.clear();
      std::cout << commented(brief.str());
    }
    for (size_t i = 0; i < ex.graphs.size(); ++i) {
      std::string title = w.name;
      if (several) title += " (graph " + std::to_string(i) + " of " + std::to_string(ex.graphs.size()) + ")";
      if (!o.optimize) {
        std::cout << tools::to_dot(ir::parse(ex.graphs[i].text), title);
        continue;
      }
      std::ostringstream log;
      std::vector<Check> checks;
      passes::Module m = optimize_piece(i, log, checks);
      std::cout << commented(log.str()) << tools::to_dot(m.graph, title);
      print_module_extras(m, checks, o);
    }
    if (o.run) print_outputs(to_slots(first_outputs), o.format, nullptr);
    fail_on_mismatch(w.name, all_checks);
    return 0;
  }
  std::cout << commented(header);
  if (o.explain) std::cout << ex.str();
  if (o.optimize) {
    for (size_t i = 0; i < ex.graphs.size(); ++i) {
      if (several) std::cout << "// graph " << i << " of " << ex.graphs.size() << " (" << ex.graphs[i].ops << " ops)\n";
      std::vector<Check> checks;
      passes::Module m = optimize_piece(i, std::cout, checks);
      std::cout << module_text(m, o);
      print_module_extras(m, checks, o);
    }
  } else if (!o.explain) {
    for (size_t i = 0; i < ex.graphs.size(); ++i) {
      if (several) std::cout << "// graph " << i << " of " << ex.graphs.size() << " (" << ex.graphs[i].ops << " ops)\n";
      std::cout << ex.graphs[i].text;
    }
  }
  if (!o.explain && !ex.eager_reason.empty()) std::cout << commented("runs eagerly: " + ex.eager_reason);
  if (o.run) print_outputs(to_slots(first_outputs), o.format, nullptr);
  fail_on_mismatch(w.name, all_checks);
  return 0;
}

// ---------------------------------------------------------------- graph files

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Failure(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw Failure(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Failure(path + ": cannot read");
  return s.str();
}

// "[parse] 3:7: what" -> "what"
std::string strip_location(const std::string& what) {
  const std::string prefix = "[parse] ";
  if (what.rfind(prefix, 0) != 0) return what;
  size_t sep = what.find(": ", prefix.size());
  return sep == std::string::npos ? what : what.substr(sep + 2);
}

ir::Graph load_text(const std::string& path, const std::string& content) {
  try {
    return ir::parse(content);
  } catch (const ir::ParseError& e) {
    if (e.line > 0) throw Failure(path + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " + strip_location(e.what()));
    throw Failure(path + ": " + strip_location(e.what()));
  }
}

ir::Graph load_json(const std::string& path, const std::string& content) {
  // The syntax first, for a line and column (nlohmann reports a byte offset).
  try {
    [[maybe_unused]] json syntax = json::parse(content);
  } catch (const json::parse_error& e) {
    size_t byte = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, content.size());
    int line = 1, col = 1;
    for (size_t i = 0; i < byte; ++i) {
      if (content[i] == '\n') ++line, col = 1;
      else ++col;
    }
    std::string what = e.what();
    size_t at = what.find("column ");
    size_t sep = at == std::string::npos ? std::string::npos : what.find(": ", at);
    std::string msg = sep == std::string::npos ? what : what.substr(sep + 2);
    throw Failure(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": malformed JSON: " + msg);
  }
  try {
    return ir::from_json(content);
  } catch (const ir::ParseError& e) {  // a type string in the JSON that does not parse
    throw Failure(path + ": " + strip_location(e.what()));
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string prefix = "[json] ";
    throw Failure(path + ": " + (m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m));
  }
}

// A graph file through the optimizer: the pipeline's prints and timings (stdout in text form),
// the optimized module (graph and kernel program), --stats, and with --run the kernel program's
// outputs checked against the reference executor on the same inputs.
int optimize_file(const std::string& path, const ir::Graph& g, const std::string& summary,
                  const std::function<std::vector<ir::Slot>()>& make_inputs, const Options& o) {
  const bool text = o.format == "text";
  const std::string pipeline = "pipeline: " + join(effective_pipeline(o), ", ") + "\n";
  std::ostringstream buffered;
  std::ostream& log = text ? std::cout : buffered;
  if (text) std::cout << commented((o.explain ? summary : "") + pipeline);
  std::optional<passes::Module> m;
  try {
    m.emplace(optimize_graph(g, o, log));
  } catch (const Error& e) {
    throw Failure(path + ": " + e.what());
  }
  std::vector<Check> checks;
  std::vector<ir::Slot> outs;
  if (o.run) {
    try {
      outs = to_slots(run_and_check(*m, g, make_inputs, "", checks));
    } catch (const Error& e) {
      throw Failure(path + ": --run: " + e.what());
    }
  }
  if (o.format == "json") {
    json doc;
    doc["graph"] = json::parse(ir::to_json(m->graph));
    doc["pipeline"] = effective_pipeline(o);
    add_module_json(doc, *m, buffered.str(), checks, o);
    if (o.run) print_outputs(outs, o.format, &doc);
    std::cout << doc.dump(2) << "\n";
  } else if (o.format == "dot") {
    std::cout << commented((o.explain ? summary : "") + pipeline + buffered.str()) << tools::to_dot(m->graph);
    print_module_extras(*m, checks, o);
    if (o.run) print_outputs(outs, o.format, nullptr);
  } else {
    std::cout << module_text(*m, o);
    print_module_extras(*m, checks, o);
    if (o.run) print_outputs(outs, o.format, nullptr);
  }
  fail_on_mismatch(path, checks);
  return 0;
}

int dump_file(const std::string& path, const Options& o) {
  if (!o.inputs.empty() || !o.dtype.empty() || o.size_given)
    throw Failure("--input, --dtype and --size apply to workloads, not to graph files", kUsageExit);
  std::string content = read_file(path);
  size_t first = content.find_first_not_of(" \t\r\n");
  bool is_json = first != std::string::npos && content[first] == '{';
  ir::Graph g = is_json ? load_json(path, content) : load_text(path, content);
  if (auto err = ir::verify(g)) {
    std::string where = err->loc.line > 0 ? std::to_string(err->loc.line) + ":" + std::to_string(err->loc.col) + ": " : "";
    throw Failure(path + ":" + (where.empty() ? " " : where) + err->message);
  }
  std::string summary = path + ": graph @" + g.name() + ", " + std::to_string(g.inputs().size()) + " inputs, " +
                        std::to_string(g.nodes().size()) + " nodes, " + std::to_string(g.outputs().size()) +
                        " outputs; verifies; hash " + [&] {
                          std::ostringstream h;
                          h << std::hex << ir::hash(g);
                          return h.str();
                        }() + "\n";
  // Random inputs of the graph's input types; the same ones on every call (each input is drawn
  // after manual_seed(seed + index)).
  auto make_inputs = [&] {
    std::vector<ir::Slot> ins;
    for (size_t i = 0; i < g.inputs().size(); ++i) ins.push_back(random_input(*g.inputs()[i], o.seed, i));
    return ins;
  };

  if (o.optimize) return optimize_file(path, g, summary, make_inputs, o);

  std::vector<ir::Slot> outs;
  if (o.run) {
    try {
      std::vector<ir::Slot> ins = make_inputs();
      ir::Executable exe(g);
      outs = exe.run_slots(ins);
    } catch (const Error& e) {
      throw Failure(path + ": --run: " + e.what());
    }
  }
  if (o.format == "json") {
    json doc = json::parse(ir::to_json(g));
    if (o.run) {
      json wrapper;
      wrapper["graph"] = doc;
      print_outputs(outs, o.format, &wrapper);
      doc = wrapper;
    }
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  if (o.explain) std::cout << commented(summary);
  std::cout << (o.format == "dot" ? tools::to_dot(g) : ir::print(g));
  if (o.run) print_outputs(outs, o.format, nullptr);
  return 0;
}

// ---------------------------------------------------------------- main

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
               "Optimizing: also runs each kernel program and checks it against the reference executor "
               "(exit status 3 when they differ)");
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
  app.add_flag("--stats", o.stats, "Print the kernel program's statistics: bytes read and written per kernel, "
                                   "peak memory");
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
      "both paths are traced.\n"
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
