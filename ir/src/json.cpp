// The JSON form of a graph. Values are named as in the text form ("%x" for inputs, "%0", ...
// for node results) and types are written in their text syntax; attributes carry their kind
// so that 2 and 2.0 stay apart. Non-finite floats are written as the strings "nan"/"inf"/"-inf".
// A node with regions (cond) lists them under "regions", each a graph object of this form.
//
// Reading trusts nothing in the text: the document is built through nlohmann's SAX interface
// (every syntax error with its line and column, nesting bounded), and every field is checked
// for its kind before it is read, so that only kiln::Error leaves from_json.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

// ---- the document ----

// Arrays and objects nest at most this deep. A graph nested as deep as the text form allows
// (64 levels of regions, three JSON levels each) stays well inside it; the bound keeps hostile
// input from exhausting the stack of whatever walks the document recursively.
constexpr size_t kMaxNesting = 512;

// The 1-based line and column of byte `at` of `text`.
std::pair<int, int> line_col(std::string_view text, size_t at) {
  at = std::min(at, text.size());
  int line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') ++line, col = 1;
    else ++col;
  }
  return {line, col};
}

// "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..." ->
// "syntax error ...": the position is said once, as kiln says it.
std::string nlohmann_message(const std::string& what) {
  std::string m = what;
  if (!m.empty() && m[0] == '[') {
    size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  if (m.rfind("parse error", 0) == 0) {
    size_t sep = m.find(": ");
    if (sep != std::string::npos) m = m.substr(sep + 2);
  }
  return m;
}

// Builds the document from nlohmann's SAX events (as json::parse would), and keeps where and why
// the text is malformed: json::parse reports a number out of range (1e999) without a position.
class Builder {
 public:
  json root;
  bool failed = false;
  bool too_deep = false;  // (failed for nesting: no position to report)
  size_t error_at = 0;    // byte offset of the offending token
  std::string error;

  bool null() { return put(json(nullptr)); }
  bool boolean(bool b) { return put(json(b)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& s) { return put(json(std::move(s))); }
  bool binary(json::binary_t&) {  // (not produced by JSON text)
    failed = true;
    error = "binary data";
    return false;
  }
  bool start_object(std::size_t) { return open(json::object()); }
  bool key(json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string& last_token, const json::exception& e) {
    failed = true;
    error = nlohmann_message(e.what());
    // A syntax error (101) is at the last character read, the one that could not come there; a
    // number out of range at the start of its token, where a reader looks.
    if (e.id == 101 || last_token.empty())
      error_at = position > 0 ? position - 1 : 0;
    else
      error_at = position >= last_token.size() ? position - last_token.size() : 0;
    return false;
  }

 private:
  // Where the next value goes: the root, the end of the open array, or the open object's key.
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    return &(top[key_] = std::move(v));
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  // Pointers into the open containers stay valid: a container only grows while it is the
  // innermost open one, and object members never move.
  bool open(json&& v) {
    if (stack_.size() >= kMaxNesting) {
      failed = true;
      error = "arrays and objects nested deeper than " + std::to_string(kMaxNesting) + " levels";
      too_deep = true;
      return false;
    }
    stack_.push_back(place(std::move(v)));
    return true;
  }

  std::vector<json*> stack_;
  std::string key_;
};

json parse_document(std::string_view text) {
  Builder b;
  bool ok = json::sax_parse(text.data(), text.data() + text.size(), &b);
  if (!ok || b.failed) {
    if (b.too_deep) bad(b.error);
    auto [line, col] = line_col(text, b.error_at);
    throw ParseError(line, col, "malformed JSON: " + (b.error.empty() ? std::string("cannot parse") : b.error));
  }
  return std::move(b.root);
}

// ---- fields, each checked before it is read ----

std::string kind_of(const json& j) {
  if (j.is_number_float()) return "the number " + j.dump();
  if (j.is_number()) return "the integer " + j.dump();
  return std::string(j.type_name());
}

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object()) bad(where + ": expected an object, found " + kind_of(j));
  auto it = j.find(key);
  if (it == j.end()) bad(where + ": \"" + key + "\" is missing");
  return *it;
}
const json& array_of(const json& j, const std::string& what) {
  if (!j.is_array()) bad(what + ": expected an array, found " + kind_of(j));
  return j;
}
std::string string_of(const json& j, const std::string& what) {
  if (!j.is_string()) bad(what + ": expected a string, found " + kind_of(j));
  return j.get<std::string>();
}
int64_t int_of(const json& j, const std::string& what) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(what + ": " + std::to_string(u) + " is out of the range of a 64-bit integer");
    return int64_t(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  bad(what + ": expected an integer, found " + kind_of(j));
}
Type type_of(const json& j, const std::string& what) {
  std::string text = string_of(j, what);
  try {
    return parse_type(text);
  } catch (const ParseError& e) {  // positions inside the type string: not the file's, so not a ParseError here
    std::string m = e.what();
    const std::string prefix = "[parse] ";
    bad(what + ": type '" + text + "': " + (m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m));
  }
}

AttrValue attr_from_json(const json& j, const std::string& where) {
  std::string kind = string_of(field(j, "kind", where), where + ": \"kind\"");
  if (kind == "none") return NoneAttr{};
  const json& v = field(j, "value", where);
  const std::string what = where + ": \"value\"";
  if (kind == "bool") {
    if (!v.is_boolean()) bad(what + ": expected true or false, found " + kind_of(v));
    return v.get<bool>();
  }
  if (kind == "int") return int_of(v, what);
  if (kind == "float") {
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
      bad(what + ": bad float '" + s + "' (a number, \"nan\", \"inf\" or \"-inf\")");
    }
    if (!v.is_number()) bad(what + ": expected a number, found " + kind_of(v));
    return v.get<double>();
  }
  if (kind == "string") return string_of(v, what);
  if (kind == "ints") {
    IntList l;
    for (const json& e : array_of(v, what)) l.push_back(int_of(e, what + " element " + std::to_string(l.size())));
    return l;
  }
  if (kind == "dtype") {
    std::string name = string_of(v, what);
    auto dt = dtype_from_short_name(name);
    if (!dt) bad(what + ": unknown dtype '" + name + "'");
    return *dt;
  }
  bad(where + ": unknown attribute kind '" + kind + "'");
}

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
      const auto* bytes = std::get_if<std::string>(&a.value);
      json ja = is_constant_data(*n, a) && bytes ? attr_json(bytes_to_hex(*bytes)) : attr_json(a.value);
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

// `where` names the graph in messages: "graph", "node 3: region 0", ...
Graph graph_from_json(const json& j, int depth, const std::string& where) {
  if (depth > kMaxDepth) bad("regions nested deeper than " + std::to_string(kMaxDepth) + " levels");
  Graph g(string_of(field(j, "graph", where), where + ": \"graph\" (its name)"));
  std::unordered_map<std::string, Value*> values;
  int index = 0;
  for (const json& in : array_of(field(j, "inputs", where), where + ": \"inputs\"")) {
    const std::string at = where + ": input " + std::to_string(index++);
    std::string name = string_of(field(in, "name", at), at + ": \"name\"");
    if (values.count("%" + name)) bad(at + ": %" + name + " is defined twice");
    values["%" + name] = g.add_input(name, type_of(field(in, "type", at), at + ": \"type\""));
  }
  int next = 0;
  index = 0;
  for (const json& jn : array_of(field(j, "nodes", where), where + ": \"nodes\"")) {
    const std::string at = where + ": node " + std::to_string(index);
    std::string opname = string_of(field(jn, "op", at), at + ": \"op\"");
    auto op = op_from_name(opname);
    if (!op) bad(at + ": unknown op '" + opname + "'");
    const std::string node = at + " (" + opname + ")";
    std::vector<Value*> inputs;
    for (const json& u : array_of(field(jn, "inputs", node), node + ": \"inputs\"")) {
      std::string name = string_of(u, node + ": operand " + std::to_string(inputs.size()));
      auto it = values.find(name);
      if (it == values.end()) bad(node + ": use of undefined value " + name);
      inputs.push_back(it->second);
    }
    std::vector<Attr> attrs;
    for (const json& ja : array_of(field(jn, "attrs", node), node + ": \"attrs\"")) {
      const std::string attr = node + ": attribute " + std::to_string(attrs.size());
      std::string name = string_of(field(ja, "name", attr), attr + ": \"name\"");
      attrs.push_back({name, attr_from_json(ja, node + ": attribute '" + name + "'")});
      if (*op == OpId::Constant && name == "data")
        if (auto* hex = std::get_if<std::string>(&attrs.back().value)) {
          auto bytes = hex_to_bytes(*hex);
          if (!bytes) bad(node + ": attribute 'data': must be hex digits, two a byte");
          attrs.back().value = std::move(*bytes);
        }
    }
    std::vector<Type> types;
    for (const json& t : array_of(field(jn, "outputs", node), node + ": \"outputs\""))
      types.push_back(type_of(t, node + ": output " + std::to_string(types.size())));
    Node* n = g.add_node(*op, std::move(inputs), std::move(attrs), std::move(types));
    if (auto r = jn.find("regions"); r != jn.end()) {
      for (const json& region : array_of(*r, node + ": \"regions\""))
        n->regions.push_back(std::make_unique<Graph>(
            graph_from_json(region, depth + 1, node + ": region " + std::to_string(n->regions.size()))));
    }
    for (Value* o : n->outputs) values["%" + std::to_string(next++)] = o;
    ++index;
  }
  std::vector<Value*> outs;
  for (const json& u : array_of(field(j, "outputs", where), where + ": \"outputs\"")) {
    std::string name = string_of(u, where + ": output " + std::to_string(outs.size()));
    auto it = values.find(name);
    if (it == values.end()) bad(where + ": output " + name + " is not defined");
    outs.push_back(it->second);
  }
  g.set_outputs(std::move(outs));
  return g;
}

// A graph object, read and checked; `label` prefixes its errors ("graph 2: ...") when the
// document holds several.
Graph checked_graph(const json& j, const std::string& label) {
  Graph g = graph_from_json(j, 0, label.empty() ? "graph" : label);
  if (auto err = verify_structure(g)) bad((label.empty() ? "" : label + ": ") + err->message);
  return g;
}

// Runs `read` so that only kiln::Error leaves it.
template <typename F>
auto guarded(F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    bad("out of memory reading the graph");
  } catch (const std::exception& e) {  // nlohmann's, should a check above have missed a case
    bad(std::string("unexpected structure: ") + e.what());
  }
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
  return guarded([&] { return checked_graph(parse_document(text), ""); });
}

std::vector<Graph> graphs_from_json(std::string_view text) {
  return guarded([&] {
    json doc = parse_document(text);
    if (!doc.is_object()) bad("expected an object (a graph, or a document with \"graph\" or \"graphs\"), found " + kind_of(doc));
    std::vector<Graph> graphs;
    if (auto it = doc.find("graphs"); it != doc.end()) {
      const json& list = array_of(*it, "\"graphs\"");
      if (list.empty()) bad("\"graphs\" is empty: no graph to read");
      for (size_t i = 0; i < list.size(); ++i)
        graphs.push_back(checked_graph(list[i], list.size() > 1 ? "graph " + std::to_string(i) : ""));
    } else if (auto g = doc.find("graph"); g != doc.end() && g->is_object()) {
      graphs.push_back(checked_graph(*g, ""));
    } else {
      graphs.push_back(checked_graph(doc, ""));
    }
    return graphs;
  });
}

}  // namespace kiln::ir
