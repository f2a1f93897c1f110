// The DOT writer of dump-ir (see dot.h).
#include "dot.h"

#include <unordered_map>
#include <vector>

namespace kiln::tools {

namespace {

// A DOT double-quoted string's contents: quotes and backslashes escaped, newlines as \n.
std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string shorten(std::string s, size_t max = 48) {
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

struct Writer {
  std::string out;
  int clusters = 0;

  // Where a value comes from: the DOT node that defines it and its output index.
  struct Source {
    std::string node;
    size_t index = 0;
    size_t of = 1;
  };
  using Scope = std::unordered_map<const ir::Value*, Source>;

  void edge(const Source& from, const std::string& to, const std::string& indent, const std::string& extra = {}) {
    out += indent + from.node + " -> " + to;
    std::string attrs = extra;
    if (from.of > 1) attrs += std::string(attrs.empty() ? "" : ", ") + "label=\"" + std::to_string(from.index) + "\"";
    if (!attrs.empty()) out += " [" + attrs + "]";
    out += ";\n";
  }

  // Writes the body of `g` (nodes and edges) with DOT ids starting with `prefix`: inputs are
  // PREFIXin<i>, nodes PREFIXn<k>, outputs PREFIXout<i>. Returns the sources of its outputs.
  std::vector<Source> body(const ir::Graph& g, const std::string& prefix, const std::string& indent) {
    Scope scope;
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const ir::Value* v = g.inputs()[i];
      std::string id = prefix + "in" + std::to_string(i);
      out += indent + id + " [shape=invhouse, style=filled, fillcolor=\"#dbe9f6\", label=\"%" + escape(v->name) +
             "\\n" + escape(v->type.str()) + "\"];\n";
      scope[v] = {id, 0, 1};
    }
    for (size_t k = 0; k < g.nodes().size(); ++k) {
      const ir::Node& n = *g.nodes()[k];
      std::string id = prefix + "n" + std::to_string(k);
      std::string label = std::string(ir::op_info(n.op).name);
      for (const ir::Attr& a : n.attrs) {
        label += '\n';
        label += a.name;
        label += '=';
        label += shorten(ir::attr_str(a.value));
      }
      for (const ir::Value* o : n.outputs) {
        label += '\n';
        label += o->type.str();
      }
      // regions first, so that their results can point at this node
      std::vector<std::vector<Source>> region_outs;
      if (!n.regions.empty()) {
        std::vector<Source> operands;
        for (size_t i = 1; i < n.inputs.size(); ++i) operands.push_back(lookup(scope, n.inputs[i]));
        for (size_t r = 0; r < n.regions.size(); ++r) {
          if (!n.regions[r]) continue;
          const ir::Graph& rg = *n.regions[r];
          std::string cid = "cluster_" + std::to_string(clusters++);
          out += indent + "subgraph " + cid + " {\n";
          out += indent + "  label=\"" + escape(std::string(ir::op_info(n.op).name) + " @" + rg.name()) + "\";\n";
          out += indent + "  style=rounded; color=gray50;\n";
          const std::string rprefix = prefix + "n" + std::to_string(k) + "r" + std::to_string(r) + "_";
          region_outs.push_back(body(rg, rprefix, indent + "  "));
          out += indent + "}\n";
          // The operands feed the region's inputs. (Written after the cluster closes: an edge
          // inside a cluster that names an outer node would pull that node into the cluster.)
          for (size_t i = 0; i < rg.inputs().size() && i < operands.size(); ++i)
            edge(operands[i], rprefix + "in" + std::to_string(i), indent, "style=dashed");
        }
      }
      bool constant = n.op == ir::OpId::Constant;
      out += indent + id + " [shape=" + (constant ? "ellipse" : n.regions.empty() ? "box" : "box3d") +
             (constant ? ", style=filled, fillcolor=\"#eeeeee\"" : "") + ", label=\"" + escape(label) + "\"];\n";
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        std::string extra = n.regions.empty() || i > 0 ? "" : "label=\"pred\"";
        Source s = lookup(scope, n.inputs[i]);
        if (!extra.empty() && s.of > 1) extra.clear();
        edge(s, id, indent, extra);
      }
      for (const auto& outs : region_outs)
        for (const Source& s : outs) edge(s, id, indent, "style=dashed");
      for (size_t i = 0; i < n.outputs.size(); ++i) scope[n.outputs[i]] = {id, i, n.outputs.size()};
    }
    std::vector<Source> results;
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      std::string id = prefix + "out" + std::to_string(i);
      const ir::Value* v = g.outputs()[i];
      out += indent + id + " [shape=house, style=filled, fillcolor=\"#e2f0d9\", label=\"return " + std::to_string(i) +
             "\\n" + escape(v->type.str()) + "\"];\n";
      edge(lookup(scope, v), id, indent);
      results.push_back({id, 0, 1});
    }
    return results;
  }

  // A value defined nowhere in scope (a malformed graph) gets a node of its own.
  Source lookup(Scope& scope, const ir::Value* v) {
    auto it = scope.find(v);
    if (it != scope.end()) return it->second;
    std::string id = "undefined" + std::to_string(scope.size()) + "_" + std::to_string(clusters++);
    out += "  " + id + " [shape=octagon, color=red, label=\"undefined\"];\n";
    scope[v] = {id, 0, 1};
    return scope[v];
  }
};

}  // namespace

std::string to_dot(const ir::Graph& g, std::string_view title) {
  Writer w;
  std::string name = title.empty() ? g.name() : std::string(title);
  w.out += "digraph \"" + escape(name) + "\" {\n";
  w.out += "  rankdir=TB;\n";
  w.out += "  node [fontname=\"monospace\", fontsize=10];\n";
  w.out += "  edge [fontname=\"monospace\", fontsize=9];\n";
  w.out += "  label=\"" + escape(name) + "\"; labelloc=t;\n";
  w.body(g, "", "  ");
  w.out += "}\n";
  return w.out;
}

}  // namespace kiln::tools
