// kiln's graph IR.
//
// A Graph is a function in SSA form: typed inputs, a list of nodes in execution order, and
// outputs. Every Value is defined exactly once (as a graph input or as an output of one node)
// before it is used. A Node applies one op of the op table (kiln/runtime/ops.def) to its input
// values, with named, typed attributes, and defines one or more output values.
//
// A Value's Type is what a tensor of it would be at run time: dtype, device, sizes and strides
// (in elements). View ops produce values that alias their input; their types carry the view's
// strides. A Type can instead describe a host scalar (a number passed to the function), and a
// 0-d tensor type can be marked `wrapped`: a Python-style number operand, which promotes like a
// number rather than like a tensor (x_int8 + 1000 stays int8).
//
// The text form (print/parse) and the JSON form (to_json/from_json) round-trip exactly; the
// graph hash is a stable 64-bit FNV-1a of the graph's structure (structure_key), so equal
// graphs hash equal on every machine and build.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/runtime/device.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/trace.h"

namespace kiln::ir {

// The op ids and attribute types are shared with the runtime's tracing hook (trace.h).
using kiln::OpId;
using kiln::IntList;
using kiln::NoneAttr;
using kiln::AttrValue;
using kiln::Attr;
enum class Category : uint8_t { Elementwise, Reduction, View, Opaque, Control };

// An op's traits (kiln/runtime/trace.h; ops.def says what each means): ir::kCostly, ...
using OpTrait = op_traits::OpTrait;
using enum op_traits::OpTrait;
// An op's row of the op table.
struct OpInfo {
  std::string_view name;
  Category category;
  int operands;  // -1: variadic
  uint32_t traits = 0;
  std::string_view attributes;  // the attribute schema's text (infer.cpp reads it)
};
const OpInfo& op_info(OpId op);
inline bool has_trait(OpId op, OpTrait t) { return (op_info(op).traits & t) != 0; }
std::optional<OpId> op_from_name(std::string_view name);
std::string_view category_name(Category c);
int num_ops();

// ---- types ----
struct Type {
  enum class Kind : uint8_t { Tensor, Scalar } kind = Kind::Tensor;
  DType dtype = DType::Float32;
  Device device = Device::cpu();
  std::vector<int64_t> sizes, strides;  // tensors only
  bool wrapped = false;                 // a 0-d tensor standing for a Python-style number

  static Type tensor(DType dt, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                     Device dev = Device::cpu());
  static Type contiguous(DType dt, std::vector<int64_t> sizes, Device dev = Device::cpu());
  static Type scalar(DType dt);
  bool is_scalar() const { return kind == Kind::Scalar; }
  bool operator==(const Type&) const = default;
  std::string str() const;  // f32[2,3]{3,1}, scalar<f64>, f32[]{} wrapped, ...@cuda:0
};
// Why no tensor can have this type's sizes and strides, or "" (for a scalar, or a tensor that
// can exist): an element count, or a reach in bytes from its first element to its last,
// past what int64 counts. The runtime refuses to make such a tensor; the parser, from_json and
// the verifier refuse such a type, rather than let an executor allocate a wrapped byte count.
std::string size_problem(const Type& t);
// Short dtype spellings of the text form: b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64.
std::string_view short_name(DType dt);
std::optional<DType> dtype_from_short_name(std::string_view s);

// ---- attributes ----
std::string attr_str(const AttrValue& v);
// Parses a type in its text form ("f32[2,3]{3,1}", "scalar<i64>").
Type parse_type(std::string_view text);

// ---- graph ----
struct Node;
struct SourceLoc {
  int line = 0, col = 0;  // 1-based; 0 when the node was not parsed from text
};

struct Value {
  int id = 0;              // unique within its graph
  Type type;
  std::string name;        // graph inputs keep their names; node outputs are numbered on print
  Node* producer = nullptr;  // null for graph inputs
};

class Graph;
struct Node {
  OpId op;
  int index = 0;  // position in its graph's node list (graphs are append-only)
  std::vector<Value*> inputs;
  std::vector<Attr> attrs;  // sorted by name
  std::vector<Value*> outputs;
  SourceLoc loc;
  // Nested graphs of a control op (cond: the then and else branches). A region's inputs are
  // bound to the node's operands after the first (the predicate); its outputs are the node's.
  std::vector<std::unique_ptr<Graph>> regions;
  const Attr* attr(std::string_view name) const;
  ~Node();
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  Value* add_input(std::string name, Type type);
  // Appends a node; its attrs are sorted by name. Returns the node (outputs are node->outputs).
  Node* add_node(OpId op, std::vector<Value*> inputs, std::vector<Attr> attrs, std::vector<Type> output_types,
                 SourceLoc loc = {});
  void set_outputs(std::vector<Value*> outs) { outputs_ = std::move(outs); }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t num_values() const { return values_.size(); }
  // Whether v is one of this graph's values (not a region's, not another graph's).
  bool owns(const Value* v) const { return size_t(v->id) < values_.size() && values_[size_t(v->id)].get() == v; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_, outputs_;
};

// ---- names ----
// The names the text form writes and reads back: a graph's (`@name`: letters, digits and '_'),
// a graph input's (`%name`: the same, not starting with a digit, since numbers name node
// results) and an attribute's (a letter or '_', then letters, digits and '_'). Letters and
// digits are ASCII. verify_structure() refuses any other name, so every graph it accepts
// prints and parses back, whether it was built in C++, parsed or read from JSON.
enum class NameKind { Graph, Input, Attribute };
bool is_valid_name(NameKind kind, std::string_view name);

// ---- constants' bytes ----
// A constant's data= attribute holds its tensor's bytes (contiguous, host byte order) as they
// are, not as text; the text form and JSON write them as hex, two digits a byte.
inline bool is_constant_data(const Node& n, const Attr& a) { return n.op == OpId::Constant && a.name == "data"; }
std::string bytes_to_hex(std::string_view bytes);
// The bytes hex digits (either case) stand for; nullopt for an odd count or a non-hex character.
std::optional<std::string> hex_to_bytes(std::string_view hex);

// ---- forms ----
std::string print(const Graph& g);
// Text for people to read (Explanation::str(), logs): print()'s text with each constant of more
// than `max_constant_bytes` bytes shown by its size instead of its data (`data=<65536 bytes>`),
// so a graph holding a large tensor prints in proportion to its ops. Such text does not parse
// back; print(), explain()'s graph texts and dump-ir keep every byte.
std::string shorten_constants(std::string_view text, size_t max_constant_bytes = 4096);
// Parses the text form. Errors throw ParseError ("[parse] LINE:COL: what").
Graph parse(std::string_view text);
std::string to_json(const Graph& g, int indent = 2);
// Reads to_json's form. Only kiln::Error leaves it: malformed JSON (a syntax error, a number
// out of range such as 1e999) throws ParseError with the line and column in the JSON text;
// anything else (arrays and objects nested deeper than 512, a field missing or of the wrong
// kind, an integer attribute that is not an integer, a type that does not parse, a graph that
// fails verify_structure) throws Error("[json] what", naming the node or input).
Graph from_json(std::string_view json_text);
// Every graph of a JSON document kiln's tools write: to_json's form (one graph), an object with
// one under "graph" (dump-ir on a graph file with --run or -O), or an object with a list under
// "graphs" (dump-ir on a workload, or on a file of several graphs). Errors as from_json's; an
// error in one of several graphs names it ("graph 2: ...").
std::vector<Graph> graphs_from_json(std::string_view json_text);
// Structural identity (identity.cpp): everything print(g) says about g (names of the graph and
// its inputs, each node's op, operands, attributes and output types, regions, outputs), as
// compact bytes; with `erase_sizes`, every type's sizes and strides left out (two traces of the
// same program at other sizes then have one key, unless an attribute or a constant depends on
// the sizes). Equal keys: print() would print the same text (sizes aside). hash() is the key's
// stable 64-bit FNV-1a, equal on every machine and build.
std::string structure_key(const Graph& g, bool erase_sizes = false);
uint64_t hash(const Graph& g, bool erase_sizes = false);
// FNV-1a of any bytes (hash(g) is that of structure_key(g)).
uint64_t hash_text(std::string_view text);
// A copy of g, regions included: the same names, types, attributes, source locations and value
// ids, so print(copy(g)) == print(g).
Graph copy(const Graph& g);

class ParseError : public Error {
 public:
  ParseError(int line, int col, const std::string& what);
  int line, col;
};

// Verification. Parsed nodes report their line and column (nested regions included).
struct VerifyError {
  std::string message;
  SourceLoc loc;
  std::string str() const;  // "LINE:COL: message", or the message alone when loc is unknown
};
// The first structural problem of the graph, or nullopt: a use before definition, a value of
// another graph, an operand count the op table refuses, a node without outputs, a duplicate
// or unsorted attribute, a name the text form cannot write (is_valid_name), a malformed type
// (sizes and strides of different lengths, a negative size, `wrapped` on a tensor that is not
// 0-d), regions on an op that takes none or the wrong number of them (cond: then and else), a
// region whose input or output count does not match its node, a region that writes (`copy`)
// into memory of one of its inputs: a cond's branches are functional, since their inputs are
// the cond's operands, memory of the enclosing graph (docs/passes.md, "Writes and the IR").
// Regions are checked recursively. parse() and from_json() run this check.
std::optional<VerifyError> verify_structure(const Graph& g);
// The structural check, then types: every node's declared output types must equal what
// infer_types (kiln/ir/infer.h) derives from its operands and attributes, and every region's
// input types must be its cond node's branch operand types and its output types the node's:
// "node 2 (%2 = add): declared f32[2,3]{3,1} but inferred f64[2,3]{3,1}". A graph input may not be
// typed `wrapped` (a number input is scalar<dt>).
std::optional<VerifyError> verify(const Graph& g);
// How many regions nodes of `op` carry (cond: 2, then and else; every other op: 0).
int num_regions(OpId op);

}  // namespace kiln::ir
