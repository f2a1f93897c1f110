// What the canonicalization passes share: rebuilding a graph, and the memory facts every
// rewrite must respect.
//
// The Graph API is append-only, so a pass rewrites by walking the old graph in order and
// appending to a new one, with a map from old values to the new values that stand for them.
// Memory matters because views alias their operand and `copy` writes into its destination:
// MemoryInfo groups values into alias classes (values that may share memory) and records, per
// class, which nodes write it and which read it, by position in the old graph.
#pragma once
#include <climits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "../passes.h"

namespace kiln::passes::canon {

bool is_view(const ir::Node& n);
// Whether a non-view node may return its operand's own memory: eager `cast` to the operand's
// dtype and `contiguous` of a contiguous operand return the operand itself, `einsum` of one
// operand may be a view of it, and a cond branch may return a branch operand.
bool aliases_operands(const ir::Node& n);
// Whether a node's regions (nested ones included) contain a write-back. Such a cond may write
// into the memory of any of its operands.
bool regions_write(const ir::Node& n);
// Whether `v` is a fresh tensor: made by a node that allocates its result (not a graph input,
// view, write-back, constant, cond or an op that may return its operand).
bool is_fresh(const ir::Value* v);

class MemoryInfo {
 public:
  explicit MemoryInfo(const ir::Graph& g);

  int pos(const ir::Node* n) const { return n->index; }
  int def(const ir::Value* v) const { return v->producer ? pos(v->producer) : -1; }
  // The alias class: values that may share memory (the union of every view, write-back and
  // possibly-aliasing op with its operand; a superset of ir::alias_root's grouping).
  int cls(const ir::Value* v) const { return cls_[slot(v)]; }
  int num_classes() const { return int(info_.size()); }
  bool is_output(const ir::Value* v) const;
  bool has_input(int c) const { return info_[size_t(c)].input; }
  bool has_constant(int c) const { return info_[size_t(c)].constant; }
  bool has_output(int c) const { return info_[size_t(c)].output; }
  bool written(int c) const { return !info_[size_t(c)].writes.empty(); }
  // Whether a node at a position p with lo < p < hi writes (or reads) class c.
  bool written_between(int c, int lo, int hi) const { return any_between(info_[size_t(c)].writes, lo, hi); }
  bool read_between(int c, int lo, int hi) const { return any_between(info_[size_t(c)].reads, lo, hi); }
  // The last position at which class c is read; INT_MAX when a graph output is in it.
  int last_read(int c) const;
  // The classes node n writes (copy: its destination's; a cond whose regions write: its operands').
  std::vector<int> writes_of(const ir::Node& n) const;

  struct Use {
    const ir::Node* node;
    size_t operand;
  };
  const std::vector<Use>& uses(const ir::Value* v) const;

 private:
  struct ClassInfo {
    bool input = false, constant = false, output = false;
    std::vector<int> writes, reads;  // sorted node positions
  };
  static bool any_between(const std::vector<int>& sorted, int lo, int hi);
  // Per-value facts are kept by the value's id; a value of another graph (a region's) is refused.
  size_t slot(const ir::Value* v) const;
  std::vector<int> cls_;
  std::vector<std::vector<Use>> uses_;
  std::vector<ClassInfo> info_;
  const ir::Graph* g_;
};

// Per node of g, whether it stays under dce: something needs its outputs (a graph output, an
// operand of a node that stays), or it writes memory that is observed after it (a graph input's
// or output's, or read by a later node that stays), or it is a cond whose branches write.
std::vector<bool> live_nodes(const ir::Graph& g, const MemoryInfo& mem);

// Builds the rewritten graph: the old graph's name and inputs, then whatever the pass appends.
class Rebuilder {
 public:
  explicit Rebuilder(const ir::Graph& old);
  // The new value standing for an old one.
  ir::Value* operator()(const ir::Value* old) const;
  std::vector<ir::Value*> operands(const ir::Node& n) const;
  // Makes `now` stand for `old` from here on.
  void replace(const ir::Value* old, ir::Value* now) { map_[slot(old)] = now; }
  // Appends a copy of n (regions included) on its mapped operands, or on `inputs`; the declared
  // types are kept, so a caller giving other inputs has checked that inference agrees.
  ir::Node* keep(const ir::Node& n);
  ir::Node* keep(const ir::Node& n, std::vector<ir::Value*> inputs);
  // Appends a node whose output types are inferred.
  ir::Node* emit(OpId op, std::vector<ir::Value*> inputs, std::vector<ir::Attr> attrs);
  // A constant holding one number (a value= constant of type t, which must be 0-d), or the
  // tensor t (a data= constant of its own contiguous type).
  ir::Value* number(const AttrValue& value, const ir::Type& t);
  ir::Value* data(const Tensor& value, const ir::Type& t);
  // The new graph with the old graph's outputs, mapped.
  ir::Graph finish();

 private:
  // The old value's id, checked to be a value of the old graph.
  size_t slot(const ir::Value* old) const;
  const ir::Graph& old_;
  ir::Graph g_;
  std::vector<ir::Value*> map_;  // by the old value's id; null until mapped
};

// The output types of `op` on values of these types, or nullopt where inference refuses.
std::optional<std::vector<ir::Type>> try_infer(OpId op, const std::vector<ir::Type>& inputs,
                                               const std::vector<ir::Attr>& attrs);
std::vector<ir::Type> types_of(const std::vector<ir::Value*>& values);

// The number a constant value holds: a value= constant, or a one-element data= constant whose
// memory nothing writes. nullopt for anything else.
std::optional<double> constant_number(const ir::Value* v, const MemoryInfo& mem);
// An attribute's number (bool, int or float), or nullopt for other kinds.
std::optional<double> attr_number(const ir::Node& n, std::string_view name, double dflt);

}  // namespace kiln::passes::canon
