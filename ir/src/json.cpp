// The JSON form of a graph. Values are named as in the text form ("%x" for inputs, "%0", ...
// for node results) and types are written in their text syntax; attributes carry their kind
// so that 2 and 2.0 stay apart. Non-finite floats are written as the strings "nan"/"inf"/"-inf".
// A node with regions (cond) lists them under "regions", each a graph object of this form.
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kiln/ir/graph.h"

namespace kiln::ir {

using nlohmann::json;

namespace {
json attr_json(const AttrValue& v) {
  struct Visitor {
    json operator()(NoneAttr) const { return {{"kind", "none"}}; }
    json operator()(bool b) const { return {{"kind", "bool"}, {"value", b}}; }
    json operator()(int64_t i) const { return {{"kind", "int"}, {"value", i}}; }
    json operator()(double d) const {
      if (std::isnan(d)) return {{"kind", "float"}, {"value", "nan"}};
      if (std::isinf(d)) return {{"kind", "float"}, {"value", d > 0 ? "inf" : "-inf"}};
      return {{"kind", "float"}, {"value", d}};
    }
    json operator()(const std::string& s) const { return {{"kind", "string"}, {"value", s}}; }
    json operator()(const IntList& l) const { return {{"kind", "ints"}, {"value", l}}; }
    json operator()(DType dt) const { return {{"kind", "dtype"}, {"value", std::string(short_name(dt))}}; }
  };
  return std::visit(Visitor{}, v);
}

[[noreturn]] void bad(const std::string& what) { throw Error("[json] " + what); }

AttrValue attr_from_json(const json& j) {
  std::string kind = j.at("kind").get<std::string>();
  if (kind == "none") return NoneAttr{};
  const json& v = j.at("value");
  if (kind == "bool") return v.get<bool>();
  if (kind == "int") return v.get<int64_t>();
  if (kind == "float") {
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
      bad("bad float attribute '" + s + "'");
    }
    return v.get<double>();
  }
  if (kind == "string") return v.get<std::string>();
  if (kind == "ints") return v.get<IntList>();
  if (kind == "dtype") {
    auto dt = dtype_from_short_name(v.get<std::string>());
    if (!dt) bad("unknown dtype '" + v.get<std::string>() + "'");
    return *dt;
  }
  bad("unknown attribute kind '" + kind + "'");
}
}  // namespace

namespace {

// One graph as a JSON object; a node with regions (cond) carries them as "regions", a list
// of graph objects of the same form, each a scope of its own as in the text form.
json graph_json(const Graph& g) {
  std::unordered_map<const Value*, std::string> names;
  json j;
  j["graph"] = g.name();
  j["inputs"] = json::array();
  for (const Value* v : g.inputs()) {
    names[v] = "%" + v->name;
    j["inputs"].push_back({{"name", v->name}, {"type", v->type.str()}});
  }
  int next = 0;
  j["nodes"] = json::array();
  for (const auto& n : g.nodes()) {
    json jn;
    jn["op"] = std::string(op_info(n->op).name);
    jn["inputs"] = json::array();
    for (const Value* v : n->inputs) jn["inputs"].push_back(names.count(v) ? names[v] : "%<undefined>");
    jn["attrs"] = json::array();
    for (const Attr& a : n->attrs) {
      json ja = attr_json(a.value);
      ja["name"] = a.name;
      jn["attrs"].push_back(ja);
    }
    jn["outputs"] = json::array();
    for (const Value* o : n->outputs) {
      names[o] = "%" + std::to_string(next++);
      jn["outputs"].push_back(o->type.str());
    }
    if (!n->regions.empty()) {
      jn["regions"] = json::array();
      for (const auto& r : n->regions)
        if (r) jn["regions"].push_back(graph_json(*r));
    }
    j["nodes"].push_back(jn);
  }
  j["outputs"] = json::array();
  for (const Value* v : g.outputs()) j["outputs"].push_back(names.count(v) ? names[v] : "%<undefined>");
  return j;
}

// Regions nest graphs inside graphs; a bound keeps hostile input from exhausting the stack.
constexpr int kMaxDepth = 64;

Graph graph_from_json(const json& j, int depth) {
  if (depth > kMaxDepth) bad("regions nested deeper than " + std::to_string(kMaxDepth) + " levels");
  Graph g(j.at("graph").get<std::string>());
  std::unordered_map<std::string, Value*> values;
  for (const json& in : j.at("inputs")) {
    std::string name = in.at("name").get<std::string>();
    if (values.count("%" + name)) bad("input %" + name + " is defined twice");
    values["%" + name] = g.add_input(name, parse_type(in.at("type").get<std::string>()));
  }
  int next = 0, index = 0;
  for (const json& jn : j.at("nodes")) {
    std::string opname = jn.at("op").get<std::string>();
    auto op = op_from_name(opname);
    if (!op) bad("node " + std::to_string(index) + ": unknown op '" + opname + "'");
    std::vector<Value*> inputs;
    for (const json& u : jn.at("inputs")) {
      auto it = values.find(u.get<std::string>());
      if (it == values.end()) bad("node " + std::to_string(index) + ": use of undefined value " + u.get<std::string>());
      inputs.push_back(it->second);
    }
    std::vector<Attr> attrs;
    for (const json& ja : jn.at("attrs")) attrs.push_back({ja.at("name").get<std::string>(), attr_from_json(ja)});
    std::vector<Type> types;
    for (const json& t : jn.at("outputs")) types.push_back(parse_type(t.get<std::string>()));
    Node* n = g.add_node(*op, std::move(inputs), std::move(attrs), std::move(types));
    if (jn.contains("regions"))
      for (const json& r : jn.at("regions")) n->regions.push_back(std::make_unique<Graph>(graph_from_json(r, depth + 1)));
    for (Value* o : n->outputs) values["%" + std::to_string(next++)] = o;
    ++index;
  }
  std::vector<Value*> outs;
  for (const json& u : j.at("outputs")) {
    auto it = values.find(u.get<std::string>());
    if (it == values.end()) bad("graph output " + u.get<std::string>() + " is not defined");
    outs.push_back(it->second);
  }
  g.set_outputs(std::move(outs));
  return g;
}

}  // namespace

std::string to_json(const Graph& g, int indent) {
  try {
    return graph_json(g).dump(indent);
  } catch (const json::exception& e) {  // e.g. an attribute string that is not valid UTF-8
    bad(std::string("cannot write the graph as JSON: ") + e.what());
  }
}

Graph from_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(std::string("malformed JSON: ") + e.what());
  }
  try {
    Graph g = graph_from_json(j, 0);
    if (auto err = verify_structure(g)) bad(err->message);
    return g;
  } catch (const json::exception& e) {
    bad(std::string("unexpected structure: ") + e.what());
  }
}

}  // namespace kiln::ir
