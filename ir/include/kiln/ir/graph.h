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
// graph hash is a stable 64-bit FNV-1a of the canonical text, so equal graphs hash equal on
// every machine and build.
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

namespace kiln::ir {

enum class OpId : uint16_t {
#define KILN_OP(id, name, category, operands) id,
#include "kiln/runtime/ops.def"
#undef KILN_OP
};
enum class Category : uint8_t { Elementwise, Reduction, View, Opaque, Control };

struct OpInfo {
  std::string_view name;
  Category category;
  int operands;  // -1: variadic
};
const OpInfo& op_info(OpId op);
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
// Short dtype spellings of the text form: b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64.
std::string_view short_name(DType dt);
std::optional<DType> dtype_from_short_name(std::string_view s);

// ---- attributes ----
using IntList = std::vector<int64_t>;
struct NoneAttr {
  bool operator==(const NoneAttr&) const = default;
};
using AttrValue = std::variant<NoneAttr, bool, int64_t, double, std::string, IntList, DType>;
struct Attr {
  std::string name;
  AttrValue value;
  bool operator==(const Attr&) const = default;
};
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

struct Node {
  OpId op;
  std::vector<Value*> inputs;
  std::vector<Attr> attrs;  // sorted by name
  std::vector<Value*> outputs;
  SourceLoc loc;
  const Attr* attr(std::string_view name) const;
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const std::string& name() const { return name_; }
  Value* add_input(std::string name, Type type);
  // Appends a node; its attrs are sorted by name. Returns the node (outputs are node->outputs).
  Node* add_node(OpId op, std::vector<Value*> inputs, std::vector<Attr> attrs, std::vector<Type> output_types,
                 SourceLoc loc = {});
  void set_outputs(std::vector<Value*> outs) { outputs_ = std::move(outs); }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t num_values() const { return values_.size(); }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_, outputs_;
};

// ---- forms ----
std::string print(const Graph& g);
// Parses the text form. Errors throw ParseError ("[parse] LINE:COL: what").
Graph parse(std::string_view text);
std::string to_json(const Graph& g, int indent = 2);
Graph from_json(std::string_view json_text);
uint64_t hash(const Graph& g);

class ParseError : public Error {
 public:
  ParseError(int line, int col, const std::string& what);
  int line, col;
};

// The first structural problem of the graph, or nullopt: a use before definition, a value of
// another graph, an operand count the op table refuses, a node without outputs, a duplicate
// or unsorted attribute. Parsed nodes report their line and column.
struct VerifyError {
  std::string message;
  SourceLoc loc;
};
std::optional<VerifyError> verify(const Graph& g);

}  // namespace kiln::ir
