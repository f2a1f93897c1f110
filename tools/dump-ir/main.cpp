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
// Every failure is one line on stderr, "dump-ir: error: ...", with exit status 1 (2 for a
// command line it cannot make sense of); files report FILE:LINE:COL.
#include <CLI/CLI.hpp>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
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
};

// ---------------------------------------------------------------- input specs

std::optional<DType> parse_dtype(const std::string& s) {
  if (auto d = ir::dtype_from_short_name(s)) return d;
  try {
    return dtype_from_name(s);  // the long names: float32, bfloat16, ...
  } catch (const Error&) {
    return std::nullopt;
  }
}

DType dtype_or_fail(const std::string& s, const std::string& context) {
  if (auto d = parse_dtype(s)) return *d;
  throw Failure(context + "unknown dtype '" + s + "' (one of b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64)");
}

// SIZES: 1024x1024, [1024,1024], 1000, [] or scalar (0-d).
std::vector<int64_t> parse_sizes(std::string s, const std::string& context) {
  if (s == "scalar" || s == "[]") return {};
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (true) {
    size_t end = s.find_first_of("x,", start);
    std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    int64_t v = -1;
    auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || r.ec != std::errc() || r.ptr != part.data() + part.size() || v < 0)
      throw Failure(context + "bad size '" + part + "' (sizes are non-negative integers: 1024x1024, [] for 0-d)");
    sizes.push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return sizes;
}

// NAME=SIZES[:DTYPE] or NAME=:DTYPE.
wl::InputOverride parse_input(const std::string& spec) {
  const std::string context = "--input '" + spec + "': ";
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw Failure(context + "expected NAME=SIZES[:DTYPE], e.g. a=1024x1024:f32");
  wl::InputOverride o;
  o.name = spec.substr(0, eq);
  std::string rest = spec.substr(eq + 1);
  size_t colon = rest.find(':');
  std::string shape = rest.substr(0, colon);
  if (colon != std::string::npos) {
    std::string dt = rest.substr(colon + 1);
    if (dt.empty()) throw Failure(context + "missing dtype after ':'");
    o.dtype = dtype_or_fail(dt, context);
  }
  if (!shape.empty()) o.sizes = parse_sizes(shape, context);
  return o;
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
  for (const std::string& spec : o.inputs) overrides.push_back(parse_input(spec));
  std::vector<wl::InputSpec> specs;
  try {
    specs = w.input_specs(tier, dtype, overrides);
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string prefix = "[workloads] ";
    throw Failure(m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m);
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
  // (the passes will hook in here: the traced graphs go through them before printing)

  std::string inputs_line;
  for (const wl::InputSpec& s : specs) inputs_line += (inputs_line.empty() ? "" : ", ") + s.str();
  std::string header = "workload " + w.name + " (" + o.size + "): " + w.description + "\ninputs: " + inputs_line +
                       (sets.size() > 1 ? "\nrun on " + std::to_string(sets.size()) + " input sets, one per path" : "") +
                       "\n";

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
    json graphs = json::array();
    for (const auto& g : ex.graphs) graphs.push_back(json::parse(ir::to_json(ir::parse(g.text))));
    doc["graphs"] = graphs;
    if (o.explain) doc["explain"] = explanation_json(ex);
    if (o.run) print_outputs(to_slots(first_outputs), o.format, &doc);
    std::cout << doc.dump(2) << "\n";
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
      if (ex.graphs.size() > 1) title += " (graph " + std::to_string(i) + " of " + std::to_string(ex.graphs.size()) + ")";
      std::cout << tools::to_dot(ir::parse(ex.graphs[i].text), title);
    }
    if (o.run) print_outputs(to_slots(first_outputs), o.format, nullptr);
    return 0;
  }
  std::cout << commented(header);
  if (o.explain) {
    std::cout << ex.str();
  } else {
    for (size_t i = 0; i < ex.graphs.size(); ++i) {
      if (ex.graphs.size() > 1)
        std::cout << "// graph " << i << " of " << ex.graphs.size() << " (" << ex.graphs[i].ops << " ops)\n";
      std::cout << ex.graphs[i].text;
    }
    if (!ex.eager_reason.empty()) std::cout << commented("runs eagerly: " + ex.eager_reason);
  }
  if (o.run) print_outputs(to_slots(first_outputs), o.format, nullptr);
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
  // (the passes will hook in here)

  std::vector<ir::Slot> outs;
  if (o.run) {
    try {
      std::vector<ir::Slot> ins;
      for (size_t i = 0; i < g.inputs().size(); ++i) ins.push_back(random_input(*g.inputs()[i], o.seed, i));
      ir::Executable exe(g);
      outs = exe.run_slots(ins);
    } catch (const Error& e) {
      throw Failure(path + ": --run: " + e.what());
    }
  }
  std::string summary = path + ": graph @" + g.name() + ", " + std::to_string(g.inputs().size()) + " inputs, " +
                        std::to_string(g.nodes().size()) + " nodes, " + std::to_string(g.outputs().size()) +
                        " outputs; verifies; hash " + [&] {
                          std::ostringstream h;
                          h << std::hex << ir::hash(g);
                          return h.str();
                        }() + "\n";
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
               "Files run on random inputs of the graph's input types with the reference executor");
  app.add_option("--seed", o.seed, "Seed of the random inputs (kiln::manual_seed)")
      ->check([](const std::string& v) -> std::string {
        return !v.empty() && v[0] == '-' ? "the seed is a non-negative integer, got " + v : "";
      })
      ->capture_default_str();
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
      "\n"
      "Text output is a graph file: header lines are comments (//). A workload whose trace has graph breaks\n"
      "prints one graph per piece of its trace tree. branch_sign is run on inputs of both signs so that\n"
      "both paths are traced.\n"
      "\n"
      "Exit status: 0 on success; 1 for an error (unknown workload or input, bad size or dtype, a graph file\n"
      "that does not parse or verify: FILE:LINE:COL: message, a kiln error while tracing or running);\n"
      "2 for a command line that does not parse. Errors are one line on stderr.");

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
