// Structural identity of graphs (graph.h: structure_key, hash): what the text form says about a
// graph, written as compact bytes instead of text. Printing a graph to compare or hash it
// formatted every number and wrote every constant's bytes as hex, on every trace; the key
// writes each field once, in binary, and can leave the sizes out without editing text.
#include <bit>
#include <cstring>

#include "kiln/ir/graph.h"

namespace kiln::ir {

namespace {

class KeyWriter {
 public:
  KeyWriter(std::string& out, bool erase_sizes) : out_(out), erase_(erase_sizes) {}

  void graph(const Graph& g) {
    // Values by their place in the text: the inputs in order, then each node's outputs.
    std::vector<int64_t> number(g.num_values(), -1);
    int64_t next = 0;
    text(g.name());
    count(g.inputs().size());
    for (const Value* v : g.inputs()) {
      number[size_t(v->id)] = next++;
      text(v->name);
      type(v->type);
    }
    count(g.nodes().size());
    for (const auto& n : g.nodes()) {
      word(uint64_t(n->op));
      count(n->inputs.size());
      for (const Value* v : n->inputs) word(uint64_t(number[size_t(v->id)]));
      count(n->attrs.size());
      for (const Attr& a : n->attrs) {
        text(a.name);
        attr(a.value);
      }
      count(n->outputs.size());
      for (const Value* v : n->outputs) {
        number[size_t(v->id)] = next++;
        type(v->type);
      }
      count(n->regions.size());
      for (const auto& r : n->regions) graph(*r);  // (a region's values are its own)
    }
    count(g.outputs().size());
    for (const Value* v : g.outputs()) word(uint64_t(number[size_t(v->id)]));
  }

 private:
  void byte(uint8_t b) { out_.push_back(char(b)); }
  void word(uint64_t w) {
    char b[8];
    std::memcpy(b, &w, 8);
    out_.append(b, 8);
  }
  void count(size_t n) { word(uint64_t(n)); }
  void text(std::string_view s) {
    count(s.size());
    out_.append(s);
  }
  void type(const Type& t) {
    byte(uint8_t(t.kind));
    byte(uint8_t(t.dtype));
    byte(uint8_t(t.device.type));
    word(uint64_t(t.device.index));
    byte(t.wrapped);
    if (erase_) return;  // (sizes and strides, the rank too: as `[?]` stood for them in text)
    count(t.sizes.size());
    for (int64_t s : t.sizes) word(uint64_t(s));
    for (int64_t s : t.strides) word(uint64_t(s));
  }
  void attr(const AttrValue& v) {
    byte(uint8_t(v.index()));
    if (auto* b = std::get_if<bool>(&v)) byte(*b);
    else if (auto* i = std::get_if<int64_t>(&v)) word(uint64_t(*i));
    else if (auto* d = std::get_if<double>(&v)) word(std::bit_cast<uint64_t>(*d));
    else if (auto* s = std::get_if<std::string>(&v)) text(*s);
    else if (auto* l = std::get_if<IntList>(&v)) {
      count(l->size());
      for (int64_t x : *l) word(uint64_t(x));
    } else if (auto* dt = std::get_if<DType>(&v)) byte(uint8_t(*dt));
  }

  std::string& out_;
  bool erase_;
};

}  // namespace

std::string structure_key(const Graph& g, bool erase_sizes) {
  std::string key;
  KeyWriter(key, erase_sizes).graph(g);
  return key;
}

uint64_t hash(const Graph& g, bool erase_sizes) { return hash_text(structure_key(g, erase_sizes)); }

uint64_t hash_text(std::string_view text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace kiln::ir
