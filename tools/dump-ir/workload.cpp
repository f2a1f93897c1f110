// dump-ir on a workload: traced with kiln::compile on the tier's inputs (one set per path), each
// graph of the trace tree printed, optimized and run as the flags ask; and --list.
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "dot.h"
#include "workloads.h"

#include "dump_ir.h"

namespace kiln::dump_ir {

namespace wl = kiln::workloads;

static DType dtype_or_fail(const std::string& s, const std::string& context) {
  if (auto d = wl::parse_dtype(s)) return *d;
  throw Failure(context + "unknown dtype '" + s + "' (one of b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64)");
}

// The registry's errors (a bad --input, an override naming no input) as the tool's one line.
[[noreturn]] static void workload_failure(const Error& e) {
  std::string m = e.what();
  const std::string prefix = "[workloads] ";
  throw Failure(m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m);
}

// The inputs of one traced graph for --run: an input named %a<k> is the workload's k-th
// argument (a copy of the first input set's, when its type matches); any other input (a value
// crossing a graph break) gets random values of its type, as for graph files.
static std::vector<ir::Slot> workload_graph_inputs(const ir::Graph& g, const std::vector<Tensor>& args, uint64_t seed) {
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

static json explanation_json(const Explanation& ex) {
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

// The explanation as part of a graph file: every line commented but the graphs' own text, so
// that the output loads back with the graphs of the trace tree (`explain()`'s layout kept).
static std::string explanation_text(const Explanation& ex) {
  const std::string s = ex.str();
  std::string out;
  size_t pos = 0;
  for (const auto& g : ex.graphs) {
    size_t at = g.text.empty() ? std::string::npos : s.find(g.text, pos);
    if (at == std::string::npos) continue;
    out += commented(s.substr(pos, at - pos)) + g.text;
    pos = at + g.text.size();
  }
  return out + commented(s.substr(pos));
}

static std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
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
  // (with -O the optimized graphs follow, so the traced ones in the explanation are comments)
  if (o.explain) std::cout << (o.optimize ? commented(ex.str()) : explanation_text(ex));
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

}  // namespace kiln::dump_ir
