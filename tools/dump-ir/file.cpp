// dump-ir on a graph file (kiln's text form or JSON, one graph or several: whatever dump-ir
// writes in either form): loaded with FILE:LINE:COL errors, verified, printed or converted,
// optimized and run as the flags ask.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

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

// A text file holds one graph or several (what dump-ir prints for a workload whose trace has
// graph breaks), each perhaps followed by its kernel program (`kernels N { ... }`, what -O
// prints: derived from the graph and rebuilt by -O, so skipped here). The pieces are found by
// their braces, outside comments, strings and a graph header's parentheses (whose types' strides
// are braces too); anything else is a piece for the parser to report.
struct Piece {
  size_t begin = 0, end = 0;
  bool graph = true;
};

static std::vector<Piece> pieces_of(const std::string& s) {
  std::vector<Piece> out;
  const size_t n = s.size();
  size_t i = 0;
  auto skip_comment = [&] {
    while (i < n && s[i] != '\n') ++i;
  };
  while (true) {
    while (i < n) {  // blanks and comments between pieces
      if (std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      else if (s.compare(i, 2, "//") == 0) skip_comment();
      else break;
    }
    if (i >= n) break;
    Piece p;
    p.begin = i;
    size_t w = i;
    while (w < n && (std::isalnum(static_cast<unsigned char>(s[w])) || s[w] == '_')) ++w;
    p.graph = s.compare(i, w - i, "kernels") != 0;
    int paren = 0, brace = 0;
    while (i < n) {
      const char c = s[i];
      if (c == '/' && i + 1 < n && s[i + 1] == '/') {
        skip_comment();
        continue;
      }
      ++i;
      if (c == '"') {  // to the closing quote (a string never spans lines)
        while (i < n && s[i] != '"' && s[i] != '\n') i += s[i] == '\\' ? 2 : 1;
        if (i < n && s[i] == '"') ++i;
      } else if (c == '(') {
        ++paren;
      } else if (c == ')') {
        --paren;
      } else if (c == '{') {
        ++brace;
      } else if (c == '}' && --brace <= 0 && paren <= 0) {
        break;
      }
    }
    p.end = std::min(i, n);
    out.push_back(p);
  }
  return out;
}

static std::vector<ir::Graph> load_text(const std::string& path, const std::string& content) {
  std::vector<ir::Graph> graphs;
  size_t line_start = 0, lines = 0, scanned = 0;  // (lines before `scanned`; where its line starts)
  for (const Piece& p : pieces_of(content)) {
    if (!p.graph) continue;
    for (; scanned < p.begin; ++scanned)
      if (content[scanned] == '\n') ++lines, line_start = scanned + 1;
    // Parsed where it stands in the file: the padding keeps every error's line and column.
    std::string text(lines, '\n');
    text.append(p.begin - line_start, ' ');
    text.append(content, p.begin, p.end - p.begin);
    try {
      graphs.push_back(ir::parse(text));
    } catch (const ir::ParseError& e) {
      if (e.line > 0) throw Failure(path + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " + strip_location(e.what()));
      throw Failure(path + ": " + strip_location(e.what()));
    }
  }
  if (graphs.empty()) throw Failure(path + ": no graph in the file (expected 'graph @name(...) { ... }')");
  return graphs;
}

static std::vector<ir::Graph> load_json(const std::string& path, const std::string& content) {
  try {
    return ir::graphs_from_json(content);
  } catch (const ir::ParseError& e) {  // malformed JSON, at its line and column
    throw Failure(path + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " + strip_location(e.what()));
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string prefix = "[json] ";
    throw Failure(path + ": " + (m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m));
  }
}

// A DOT digraph's title: the graph's name, and which of several it is ("" for the only one).
static std::string dot_title(const std::vector<ir::Graph>& graphs, size_t i) {
  if (graphs.size() < 2) return "";
  return graphs[i].name() + " (graph " + std::to_string(i) + " of " + std::to_string(graphs.size()) + ")";
}

// Graph files through the optimizer: the pipeline's prints and timings (stdout in text form),
// each optimized module (graph and kernel program), --stats, and with --run each kernel
// program's outputs checked against the reference executor on the same inputs. Several graphs
// print as a workload's do: "// graph I of N" before each (text), a "graphs" list (JSON).
static int optimize_file(const std::string& path, const std::vector<ir::Graph>& graphs,
                         const std::vector<std::string>& summaries,
                         const std::function<std::vector<ir::Slot>(size_t)>& make_inputs, const Options& o) {
  const bool text = o.format == "text", several = graphs.size() > 1;
  auto title = [&](size_t i) { return dot_title(graphs, i); };
  const std::string pipeline = "pipeline: " + join(effective_pipeline(o), ", ") + "\n";
  if (several && o.format != "json") std::cout << commented(pipeline);
  json doc, optimized = json::array(), graph_docs = json::array(), outputs = json::array();
  std::vector<Check> all_checks;
  for (size_t i = 0; i < graphs.size(); ++i) {
    const ir::Graph& g = graphs[i];
    const std::string label = several ? " graph " + std::to_string(i) : "";
    const std::string header = (o.explain ? summaries[i] : "") + (several ? "" : pipeline);
    if (several && o.format != "json") std::cout << "// graph " << i << " of " << graphs.size() << "\n";
    std::ostringstream buffered;
    std::ostream& log = text ? std::cout : buffered;
    if (text) std::cout << commented(header);
    std::optional<passes::Module> m;
    try {
      m.emplace(optimize_graph(g, o, log));
    } catch (const Error& e) {
      throw Failure(path + label + ": " + e.what());
    }
    std::vector<Check> checks;
    std::vector<ir::Slot> outs;
    if (o.run) {
      try {
        outs = to_slots(run_and_check(*m, g, [&] { return make_inputs(i); }, several ? "graph " + std::to_string(i) + " " : "", checks));
      } catch (const Error& e) {
        throw Failure(path + label + ": --run: " + e.what());
      }
    }
    all_checks.insert(all_checks.end(), checks.begin(), checks.end());
    if (o.format == "json") {
      json piece = json::object();
      add_module_json(piece, *m, buffered.str(), checks, o);
      if (!several) {
        doc["graph"] = json::parse(ir::to_json(m->graph));
        doc["pipeline"] = effective_pipeline(o);
        doc.update(piece);
        if (o.run) print_outputs(outs, o.format, &doc);
        continue;
      }
      graph_docs.push_back(json::parse(ir::to_json(m->graph)));
      optimized.push_back(piece);
      if (o.run) {
        json one;
        print_outputs(outs, o.format, &one);
        outputs.push_back(one["outputs"]);
      }
    } else if (o.format == "dot") {
      std::cout << commented(header + buffered.str()) << tools::to_dot(m->graph, title(i));
      print_module_extras(*m, checks, o);
      if (o.run) print_outputs(outs, o.format, nullptr);
    } else {
      std::cout << module_text(*m, o);
      print_module_extras(*m, checks, o);
      if (o.run) print_outputs(outs, o.format, nullptr);
    }
  }
  if (o.format == "json") {
    if (several) {
      doc["graphs"] = graph_docs;
      doc["pipeline"] = effective_pipeline(o);
      doc["optimized"] = optimized;  // per graph: the kernel program, the pipeline's log, stats, checks
      if (o.run) doc["outputs"] = outputs;  // per graph
    }
    std::cout << doc.dump(2) << "\n";
  }
  fail_on_mismatch(path, all_checks);
  return 0;
}

int dump_file(const std::string& path, const Options& o) {
  if (!o.inputs.empty() || !o.dtype.empty() || o.size_given)
    throw Failure("--input, --dtype and --size apply to workloads, not to graph files", kUsageExit);
  std::string content = read_file(path);
  size_t first = content.find_first_not_of(" \t\r\n");
  bool is_json = first != std::string::npos && content[first] == '{';
  std::vector<ir::Graph> graphs = is_json ? load_json(path, content) : load_text(path, content);
  const bool several = graphs.size() > 1;
  std::vector<std::string> summaries;
  for (size_t i = 0; i < graphs.size(); ++i) {
    const ir::Graph& g = graphs[i];
    if (auto err = ir::verify(g)) {
      // (a text file's locations are the file's; a JSON graph has none, so say which graph)
      std::string where = err->loc.line > 0 ? std::to_string(err->loc.line) + ":" + std::to_string(err->loc.col) + ": " : "";
      std::string which = err->loc.line <= 0 && several ? "graph " + std::to_string(i) + ": " : "";
      throw Failure(path + ":" + (where.empty() ? " " : where) + which + err->message);
    }
    std::ostringstream h;
    h << std::hex << ir::hash(g);
    summaries.push_back(path + ": graph @" + g.name() + ", " + std::to_string(g.inputs().size()) + " inputs, " +
                        std::to_string(g.nodes().size()) + " nodes, " + std::to_string(g.outputs().size()) +
                        " outputs; verifies; hash " + h.str() + "\n");
  }
  // Random inputs of each graph's input types; the same ones on every call (each input is
  // drawn after manual_seed(seed + index)).
  auto make_inputs = [&](size_t i) {
    std::vector<ir::Slot> ins;
    const ir::Graph& g = graphs[i];
    for (size_t k = 0; k < g.inputs().size(); ++k) ins.push_back(random_input(*g.inputs()[k], o.seed, k));
    return ins;
  };

  if (o.optimize) return optimize_file(path, graphs, summaries, make_inputs, o);

  std::vector<std::vector<ir::Slot>> outs(graphs.size());
  if (o.run) {
    for (size_t i = 0; i < graphs.size(); ++i) {
      try {
        std::vector<ir::Slot> ins = make_inputs(i);
        ir::Executable exe(graphs[i]);
        outs[i] = exe.run_slots(ins);
      } catch (const Error& e) {
        throw Failure(path + (several ? " graph " + std::to_string(i) : "") + ": --run: " + e.what());
      }
    }
  }
  if (o.format == "json") {
    json doc;
    if (!several) {
      doc = json::parse(ir::to_json(graphs[0]));
      if (o.run) {
        json wrapper;
        wrapper["graph"] = doc;
        print_outputs(outs[0], o.format, &wrapper);
        doc = wrapper;
      }
    } else {
      json list = json::array(), per_graph = json::array();
      for (size_t i = 0; i < graphs.size(); ++i) {
        list.push_back(json::parse(ir::to_json(graphs[i])));
        if (o.run) {
          json one;
          print_outputs(outs[i], o.format, &one);
          per_graph.push_back(one["outputs"]);
        }
      }
      doc["graphs"] = list;
      if (o.run) doc["outputs"] = per_graph;  // per graph
    }
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (several && o.format == "text") std::cout << "// graph " << i << " of " << graphs.size() << "\n";
    if (o.explain) std::cout << commented(summaries[i]);
    std::cout << (o.format == "dot" ? tools::to_dot(graphs[i], dot_title(graphs, i)) : ir::print(graphs[i]));
    if (o.run) print_outputs(outs[i], o.format, nullptr);
  }
  return 0;
}

}  // namespace kiln::dump_ir
