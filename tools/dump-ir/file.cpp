// dump-ir on a graph file (kiln's text form or JSON): loaded with FILE:LINE:COL errors, verified,
// printed or converted, optimized and run as the flags ask.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "dot.h"

#include "dump_ir.h"

namespace kiln::dump_ir {

static std::string read_file(const std::string& path) {
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
static std::string strip_location(const std::string& what) {
  const std::string prefix = "[parse] ";
  if (what.rfind(prefix, 0) != 0) return what;
  size_t sep = what.find(": ", prefix.size());
  return sep == std::string::npos ? what : what.substr(sep + 2);
}

static ir::Graph load_text(const std::string& path, const std::string& content) {
  try {
    return ir::parse(content);
  } catch (const ir::ParseError& e) {
    if (e.line > 0) throw Failure(path + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " + strip_location(e.what()));
    throw Failure(path + ": " + strip_location(e.what()));
  }
}

static ir::Graph load_json(const std::string& path, const std::string& content) {
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
static int optimize_file(const std::string& path, const ir::Graph& g, const std::string& summary,
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

}  // namespace kiln::dump_ir
