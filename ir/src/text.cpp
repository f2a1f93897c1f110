// The text form of a graph: the printer and its parser.
//
//   graph @name(%a: f32[2,3]{3,1}, %s: scalar<f64>) {
//     %0 = add(%a, %s) {alpha=1} : f32[2,3]{3,1}
//     %1, %2 = max(%0) {dim=1, keepdim=false} : f32[2]{1}, i64[2]{1}
//     %3 = cond(%p, %1) : f32[2]{1} {
//       graph @then(%v: f32[2]{1}) {
//         %0 = neg(%v) : f32[2]{1}
//         return %0
//       }
//       graph @else(%v: f32[2]{1}) {
//         return %v
//       }
//     }
//     return %0, %1
//   }
//
// A node line is: results, '=', op, operands, optional {attributes}, ':', result types, and,
// for a node with regions (cond), a '{' after the types that opens its regions, one nested
// graph each, closed by '}' on a line of its own. (A type never ends in '{', so the brace
// cannot be mistaken for part of one.) Each graph is a scope of its own: node outputs are
// numbered %0, %1, ... in order from each graph's start, and a region sees only its own
// inputs. Printing is canonical: print(parse(t)) equals t for any t that print produced.
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// ---------------------------------------------------------------- printer

namespace {

// Appends `g` with its header at `depth` levels of two-space indentation.
void print_graph(const Graph& g, int depth, std::string& s) {
  const std::string indent(size_t(2 * depth), ' '), body = indent + "  ";
  std::vector<std::string> names(g.num_values());  // by value id
  for (const Value* v : g.inputs()) names[size_t(v->id)] = "%" + v->name;
  int next = 0;
  for (const auto& n : g.nodes())
    for (const Value* o : n->outputs) names[size_t(o->id)] = "%" + std::to_string(next++);
  auto name_of = [&](const Value* v) {
    return g.owns(v) && !names[size_t(v->id)].empty() ? names[size_t(v->id)] : std::string("%<undefined>");
  };
  s += indent + "graph @" + g.name() + "(";
  for (size_t i = 0; i < g.inputs().size(); ++i)
    s += (i ? ", " : "") + name_of(g.inputs()[i]) + ": " + g.inputs()[i]->type.str();
  s += ") {\n";
  for (const auto& n : g.nodes()) {
    s += body;
    for (size_t i = 0; i < n->outputs.size(); ++i) s += (i ? ", " : "") + name_of(n->outputs[i]);
    s += " = " + std::string(op_info(n->op).name) + "(";
    for (size_t i = 0; i < n->inputs.size(); ++i) s += (i ? ", " : "") + name_of(n->inputs[i]);
    s += ")";
    if (!n->attrs.empty()) {
      s += " {";
      for (size_t i = 0; i < n->attrs.size(); ++i) {
        const Attr& a = n->attrs[i];
        const auto* bytes = std::get_if<std::string>(&a.value);
        s += (i ? ", " : "") + a.name + "=";
        if (is_constant_data(*n, a) && bytes)
          s += "\"" + bytes_to_hex(*bytes) + "\"";
        else
          s += attr_str(a.value);
      }
      s += "}";
    }
    s += " : ";
    for (size_t i = 0; i < n->outputs.size(); ++i) s += (i ? ", " : "") + n->outputs[i]->type.str();
    if (!n->regions.empty()) {
      s += " {\n";
      for (const auto& r : n->regions)
        if (r) print_graph(*r, depth + 2, s);
      s += body + "}";
    }
    s += "\n";
  }
  s += body + "return ";
  for (size_t i = 0; i < g.outputs().size(); ++i) s += (i ? ", " : "") + name_of(g.outputs()[i]);
  s += "\n" + indent + "}\n";
}

}  // namespace

std::string print(const Graph& g) {
  std::string s;
  print_graph(g, 0, s);
  return s;
}

std::string shorten_constants(std::string_view text, size_t max_constant_bytes) {
  static constexpr std::string_view kData = " {data=\"";  // (data= is a constant's only attribute)
  std::string out;
  size_t pos = 0;
  for (size_t at; (at = text.find(kData, pos)) != std::string_view::npos;) {
    const size_t begin = at + kData.size(), end = text.find('"', begin);
    if (end == std::string_view::npos) break;
    out.append(text.substr(pos, begin - 1 - pos));
    if ((end - begin) / 2 > max_constant_bytes)
      out += "<" + std::to_string((end - begin) / 2) + " bytes>";
    else
      out.append(text.substr(begin - 1, end + 1 - (begin - 1)));
    pos = end + 1;
  }
  out.append(text.substr(pos));
  return out;
}

// ---------------------------------------------------------------- parser

namespace {

struct Token {
  enum Kind { End, Ident, Percent, At, Int, Float, String, Punct } kind = End;
  std::string text;  // identifier / name without sigil / string contents / punctuation
  int64_t i = 0;
  double d = 0;
  int line = 1, col = 1;
};

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Token next() {
    skip_space();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= src_.size()) return t;
    char c = src_[pos_];
    if (c == '%' || c == '@') {
      advance();
      t.kind = c == '%' ? Token::Percent : Token::At;
      t.text = ident_chars();
      if (t.text.empty()) fail(t, std::string("expected a name after '") + c + "'");
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Token::Ident;
      t.text = ident_chars();
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || (c == '-' && pos_ + 1 < src_.size() &&
                                                        (std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])) ||
                                                         src_.substr(pos_ + 1, 3) == "inf"))) {
      return number(t);
    }
    if (c == '"') return string(t);
    if (std::string_view("(){}[],:=<>").find(c) != std::string_view::npos) {
      advance();
      t.kind = Token::Punct;
      t.text = std::string(1, c);
      return t;
    }
    fail(t, std::string("unexpected character '") + c + "'");
  }

  [[noreturn]] static void fail(const Token& t, const std::string& what) { throw ParseError(t.line, t.col, what); }

 private:
  void advance() {
    if (src_[pos_] == '\n') ++line_, col_ = 1;
    else ++col_;
    ++pos_;
  }
  void skip_space() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == '/' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '/') {  // comment to end of line
        while (pos_ < src_.size() && src_[pos_] != '\n') advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }
  std::string ident_chars() {
    size_t start = pos_;
    while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) advance();
    return std::string(src_.substr(start, pos_ - start));
  }
  Token number(Token t) {
    size_t start = pos_;
    if (src_[pos_] == '-') advance();
    if (src_.substr(pos_, 3) == "inf") {
      for (int k = 0; k < 3; ++k) advance();
      t.kind = Token::Float;
      t.d = -std::numeric_limits<double>::infinity();
      return t;
    }
    bool is_float = false;
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        advance();
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        advance();
        if ((c == 'e' || c == 'E') && pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) advance();
      } else {
        break;
      }
    }
    std::string_view text = src_.substr(start, pos_ - start);
    const char* b = text.data();
    const char* e = b + text.size();
    if (is_float) {
      t.kind = Token::Float;
      auto r = std::from_chars(b, e, t.d);
      if (r.ec != std::errc() || r.ptr != e) fail(t, "malformed number '" + std::string(text) + "'");
    } else {
      t.kind = Token::Int;
      auto r = std::from_chars(b, e, t.i);
      if (r.ec != std::errc() || r.ptr != e) fail(t, "malformed or out-of-range integer '" + std::string(text) + "'");
    }
    return t;
  }
  Token string(Token t) {
    advance();  // opening quote
    t.kind = Token::String;
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') fail(t, "unterminated string");
      char c = src_[pos_];
      advance();
      if (c == '"') break;
      if (c == '\\') {
        if (pos_ >= src_.size()) fail(t, "unterminated string");
        char e = src_[pos_];
        advance();
        t.text += e == 'n' ? '\n' : e;
      } else {
        t.text += c;
      }
    }
    return t;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

class Parser {
 public:
  explicit Parser(std::string_view src) : lex_(src) { tok_ = lex_.next(); }

  // The whole text: one graph and nothing after it.
  Graph graph() {
    Graph g = graph_body(0);
    if (tok_.kind != Token::End) fail("unexpected text after the graph");
    if (auto err = verify_structure(g)) throw ParseError(err->loc.line, err->loc.col, err->message);
    return g;
  }

  Type whole_type() {
    Type t = type();
    if (tok_.kind != Token::End) fail("unexpected text after the type");
    return t;
  }

 private:
  [[noreturn]] void fail(const std::string& what) { Lexer::fail(tok_, what); }
  void take() { tok_ = lex_.next(); }
  bool is(std::string_view punct) const { return tok_.kind == Token::Punct && tok_.text == punct; }
  void expect(std::string_view punct) {
    if (!is(punct)) fail("expected '" + std::string(punct) + "'" + found());
    take();
  }
  void expect_ident(std::string_view word) {
    if (tok_.kind != Token::Ident || tok_.text != word) fail("expected '" + std::string(word) + "'" + found());
    take();
  }
  std::string found() const {
    switch (tok_.kind) {
      case Token::End: return " but the text ended";
      case Token::Percent: return " but found %" + tok_.text;
      case Token::At: return " but found @" + tok_.text;
      case Token::Int: return " but found " + std::to_string(tok_.i);
      case Token::Float: return " but found a number";
      case Token::String: return " but found a string";
      default: return " but found '" + tok_.text + "'";
    }
  }

  // Regions nest graphs inside graphs; a bound keeps hostile text from exhausting the stack.
  static constexpr int kMaxDepth = 64;

  // "graph @name(inputs) { nodes return values }" at nesting depth `depth`. Each graph is a
  // scope: its values are its inputs and its nodes' results, nothing from outside.
  Graph graph_body(int depth) {
    if (depth > kMaxDepth) fail("regions nested deeper than " + std::to_string(kMaxDepth) + " levels");
    std::map<std::string, Value*> scope;
    std::swap(values_, scope);  // the enclosing graph's names, restored below
    expect_ident("graph");
    if (tok_.kind != Token::At) fail("expected the graph's name, e.g. @main");
    Graph g(tok_.text);
    take();
    expect("(");
    if (!is(")")) {
      while (true) {
        if (tok_.kind != Token::Percent) fail("expected an input name like %x");
        Token name = tok_;
        if (std::isdigit(static_cast<unsigned char>(name.text[0])))
          fail("graph input names must start with a letter or '_' (numbers name node results)");
        if (values_.count(name.text)) fail("input %" + name.text + " is defined twice");
        take();
        expect(":");
        values_[name.text] = g.add_input(name.text, type());
        if (!is(",")) break;
        take();
      }
    }
    expect(")");
    expect("{");
    while (!(tok_.kind == Token::Ident && tok_.text == "return")) node(g, depth);
    take();
    std::vector<Value*> outs;
    while (true) {
      outs.push_back(use());
      if (!is(",")) break;
      take();
    }
    g.set_outputs(std::move(outs));
    expect("}");
    std::swap(values_, scope);
    return g;
  }

  Value* use() {
    if (tok_.kind != Token::Percent) fail("expected a value like %0 or %x" + found());
    auto it = values_.find(tok_.text);
    if (it == values_.end()) fail("use of undefined value %" + tok_.text);
    take();
    return it->second;
  }

  std::vector<int64_t> int_list(std::string_view open, std::string_view close) {
    expect(open);
    std::vector<int64_t> v;
    if (!is(close)) {
      while (true) {
        if (tok_.kind != Token::Int) fail("expected an integer" + found());
        v.push_back(tok_.i);
        take();
        if (!is(",")) break;
        take();
      }
    }
    expect(close);
    return v;
  }

  DType dtype() {
    if (tok_.kind != Token::Ident) fail("expected a dtype (f32, i64, ...)" + found());
    auto dt = dtype_from_short_name(tok_.text);
    if (!dt) fail("unknown dtype '" + tok_.text + "' (expected b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64)");
    take();
    return *dt;
  }

  Type type() {
    if (tok_.kind == Token::Ident && tok_.text == "scalar") {
      take();
      expect("<");
      DType dt = dtype();
      expect(">");
      return Type::scalar(dt);
    }
    Token start = tok_;
    DType dt = dtype();
    std::vector<int64_t> sizes = int_list("[", "]");
    std::vector<int64_t> strides = int_list("{", "}");
    if (sizes.size() != strides.size())
      Lexer::fail(start, "type has " + std::to_string(sizes.size()) + " sizes but " +
                             std::to_string(strides.size()) + " strides");
    for (int64_t s : sizes)
      if (s < 0) Lexer::fail(start, "negative size " + std::to_string(s) + " in type");
    Type t = Type::tensor(dt, std::move(sizes), std::move(strides));
    if (std::string p = size_problem(t); !p.empty()) Lexer::fail(start, "malformed type: " + p);
    // device: the lexer reads "@cuda" as a name token, then ':' and the index
    if (tok_.kind == Token::At) {
      if (tok_.text == "cpu") {
        take();
      } else if (tok_.text == "cuda") {
        take();
        expect(":");
        if (tok_.kind != Token::Int || tok_.i < 0 || tok_.i > 32767) fail("expected a device index");
        t.device = Device::cuda(int(tok_.i));
        take();
      } else {
        fail("unknown device '" + tok_.text + "'");
      }
    }
    if (tok_.kind == Token::Ident && tok_.text == "wrapped") {
      t.wrapped = true;
      take();
    }
    return t;
  }

  AttrValue attr_value() {
    switch (tok_.kind) {
      case Token::Int: { int64_t v = tok_.i; take(); return v; }
      case Token::Float: { double v = tok_.d; take(); return v; }
      case Token::String: { std::string v = tok_.text; take(); return v; }
      case Token::Ident: {
        std::string w = tok_.text;
        if (w == "true" || w == "false") { take(); return w == "true"; }
        if (w == "none") { take(); return NoneAttr{}; }
        if (w == "inf") { take(); return std::numeric_limits<double>::infinity(); }
        if (w == "nan") { take(); return std::numeric_limits<double>::quiet_NaN(); }
        return dtype();
      }
      case Token::Punct:
        if (is("[")) return int_list("[", "]");
        [[fallthrough]];
      default:
        fail("expected an attribute value" + found());
    }
  }

  void node(Graph& g, int depth) {
    Token start = tok_;
    std::vector<Token> defs;
    while (true) {
      if (tok_.kind != Token::Percent) fail("expected a result like %0 or 'return'" + found());
      if (values_.count(tok_.text)) fail("value %" + tok_.text + " is defined twice");
      defs.push_back(tok_);
      take();
      if (!is(",")) break;
      take();
    }
    expect("=");
    if (tok_.kind != Token::Ident) fail("expected an op name" + found());
    auto op = op_from_name(tok_.text);
    if (!op) fail("unknown op '" + tok_.text + "'");
    take();
    expect("(");
    std::vector<Value*> inputs;
    if (!is(")")) {
      while (true) {
        inputs.push_back(use());
        if (!is(",")) break;
        take();
      }
    }
    expect(")");
    std::vector<Attr> attrs;
    if (is("{")) {
      take();
      while (true) {
        if (tok_.kind != Token::Ident) fail("expected an attribute name" + found());
        std::string name = tok_.text;
        for (const Attr& a : attrs)
          if (a.name == name) fail("attribute '" + name + "' given twice");
        take();
        expect("=");
        attrs.push_back({name, attr_value()});
        if (!is(",")) break;
        take();
      }
      expect("}");
    }
    expect(":");
    std::vector<Type> types;
    while (true) {
      types.push_back(type());
      if (!is(",")) break;
      take();
    }
    if (types.size() != defs.size())
      Lexer::fail(start, std::to_string(defs.size()) + " results but " + std::to_string(types.size()) + " types");
    const OpInfo& info = op_info(*op);
    if (info.operands >= 0 && int(inputs.size()) != info.operands)
      Lexer::fail(start, std::string(info.name) + " takes " + std::to_string(info.operands) + " operands, got " +
                             std::to_string(inputs.size()));
    // Regions: '{', one nested graph each, '}'. The counts are checked with the structure.
    std::vector<std::unique_ptr<Graph>> regions;
    if (is("{")) {
      if (num_regions(*op) == 0) fail(std::string(info.name) + " takes no regions");
      take();
      while (!is("}")) {
        if (tok_.kind != Token::Ident || tok_.text != "graph") fail("expected a region ('graph @name(...) {') or '}'" + found());
        regions.push_back(std::make_unique<Graph>(graph_body(depth + 1)));
      }
      take();
    }
    if (*op == OpId::Constant)
      for (Attr& a : attrs)
        if (a.name == "data")
          if (auto* hex = std::get_if<std::string>(&a.value)) {
            auto bytes = hex_to_bytes(*hex);
            if (!bytes) Lexer::fail(start, "constant: data= must be hex digits, two a byte");
            a.value = std::move(*bytes);
          }
    Node* n = g.add_node(*op, std::move(inputs), std::move(attrs), std::move(types), {start.line, start.col});
    n->regions = std::move(regions);
    for (size_t i = 0; i < defs.size(); ++i) values_[defs[i].text] = n->outputs[i];
  }

  Lexer lex_;
  Token tok_;
  std::map<std::string, Value*> values_;
};

}  // namespace

Graph parse(std::string_view text) { return Parser(text).graph(); }
Type parse_type(std::string_view text) { return Parser(text).whole_type(); }

}  // namespace kiln::ir
