// Lowering groups of nodes to kernels: buffers, loop nests, index expressions and bodies.
//
// A kernel's iteration space S is, for elementwise work, the broadcast shape of what it computes;
// for reductions, the shape of the reduced operand. Every value a kernel touches maps onto S
// right-aligned, as broadcasting does (a reduction that drops its dims maps onto the kept ones).
// The loop nest runs over S's dims of size > 1, reduced dims innermost; layout (layout.h)
// decides their order, which adjacent loops merge and how temporaries are laid out, from the
// operands' strides over S. Each operand's index is then one stride per loop (0 where it is
// broadcast) and an offset: the views between it and its buffer are folded in, never copied.
#include "lower.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "kiln/ir/infer.h"
#include "layout.h"
#include "schedule.h"

namespace kiln::passes {

using namespace detail;

namespace {

int64_t span(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t hi = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    hi += (sizes[d] - 1) * std::max<int64_t>(strides[d], 0);
  }
  return hi + 1;
}

// An access's stride class (rules::stride_class). A size-1 dim broadcasts where the loop over it
// (among the first `loops_checked`, which for a store leave out its reduction loops) runs more.
StrideClass classify_access(const Access& a, const std::vector<int64_t>& loops, size_t loops_checked) {
  bool bcast = false;
  for (size_t d = 0; d < a.sizes.size(); ++d)
    bcast |= a.sizes[d] == 1 && d < loops_checked && d < loops.size() && loops[d] > 1;
  return rules::stride_class(a.sizes, a.strides, bcast);
}

int alignment(int64_t offset_elems, DType dt) {
  int64_t bytes = offset_elems * itemsize(dt);
  int align = 64;
  while (align > 1 && bytes % align != 0) align /= 2;
  return align;
}

class Lowerer {
 public:
  Lowerer(const ir::Graph& g, const LayoutPolicy& pol) : g_(g), a_(g), pol_(pol) {}

  KernelProgram run(const std::vector<std::vector<int>>& groups) {
    for (size_t gi = 0; gi < groups.size(); ++gi)
      for (int n : groups[gi]) group_of_[n] = int(gi);
    // Graph inputs first, in order: a tensor input is a buffer, a number an argument.
    for (size_t i = 0; i < g_.inputs().size(); ++i) {
      const ir::Value* v = g_.inputs()[i];
      if (v->type.is_scalar()) {
        arg_of_[v] = int(i);
        continue;
      }
      Buffer b;
      b.kind = BufferKind::Input;
      b.dtype = v->type.dtype;
      b.input = int(i);
      b.value = v->id;
      b.sizes = v->type.sizes;
      b.strides = v->type.strides;
      b.numel = span(b.sizes, b.strides);
      add_buffer(v, std::move(b));
    }
    find_materialized();
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      Kernel k = build(groups[gi]);
      // A kernel that stores nothing computes nothing anyone reads (dead code dce did not see).
      if (!k.stores.empty()) p_.kernels.push_back(std::move(k));
    }
    for (const ir::Value* out : g_.outputs()) {
      KILN_CHECK(!out->type.is_scalar() && !is_inline(out), "passes",
                 "lower: graph output %", out->id, " is a number; kernel programs return tensors");
      ViewKey k = loc(out);
      Access acc;
      acc.buffer = buffer_of(k.root);
      acc.dtype = out->type.dtype;
      acc.sizes = k.sizes;
      acc.strides = k.strides;
      acc.offset = k.offset;
      finish_access(acc, k.storage_relative);
      p_.outputs.push_back(std::move(acc));
    }
    mark_iota_loads();
    plan_without_reuse(p_);
    return std::move(p_);
  }

 private:
  // ---- buffers ----
  int add_buffer(const ir::Value* v, Buffer b) {
    b.id = int(p_.buffers.size());
    p_.buffers.push_back(std::move(b));
    buffer_[v] = int(p_.buffers.size() - 1);
    return int(p_.buffers.size() - 1);
  }
  int buffer_of(const ir::Value* root) {
    auto it = buffer_.find(root);
    if (it != buffer_.end()) return it->second;
    // A tensor constant or an iota, on first use (the runner moves it to the device).
    const ir::Node* p = root->producer;
    KILN_CHECK(p && (p->op == OpId::Constant || p->op == OpId::Iota), "passes", "lower: internal error: %",
               root->id, " has no buffer");
    Buffer b;
    b.kind = BufferKind::Constant;
    b.dtype = root->type.dtype;
    b.value = root->id;
    b.iota = p->op == OpId::Iota;
    b.constant = b.iota ? ir::iota_value(root->type.sizes, Device::cpu()) : ir::decode_constant(*p, /*on_host=*/true);
    b.sizes = root->type.sizes;
    b.strides = root->type.strides;
    b.numel = span(b.sizes, b.strides);
    return add_buffer(root, std::move(b));
  }
  // Loads of iota buffers that no kernel writes may compute their values (Access::iota).
  void mark_iota_loads() {
    std::vector<bool> stored(p_.buffers.size(), false);
    for (const Kernel& k : p_.kernels)
      for (const Access& s : k.stores)
        if (s.buffer >= 0) stored[size_t(s.buffer)] = true;
    for (Kernel& k : p_.kernels)
      for (Access& l : k.loads)
        l.iota = l.buffer >= 0 && p_.buffers[size_t(l.buffer)].iota && !stored[size_t(l.buffer)];
  }
  bool is_inline(const ir::Value* v) const {
    return v->producer && v->producer->op == OpId::Constant && !v->producer->attr("data");
  }

  // Values computed by a kernel that must reach memory: read by another kernel or through a
  // view, returned, or written in place.
  void find_materialized() {
    std::set<const ir::Value*> written;
    for (const ir::Node* n : a_.nodes)
      if (n->op == OpId::Copy) written.insert(ir::alias_root(n->inputs[0]));
    std::set<const ir::Value*> out_roots;
    for (const ir::Value* o : g_.outputs()) out_roots.insert(ir::alias_root(o));
    for (size_t i = 0; i < a_.nodes.size(); ++i) {
      const ir::Node& n = *a_.nodes[i];
      NodeClass c = classify(n);
      if (c == NodeClass::Free || c == NodeClass::Data || n.op == OpId::Copy) continue;
      for (const ir::Value* v : n.outputs) {
        bool need = written.count(v) || out_roots.count(v);
        auto it = a_.users.find(v);
        if (it != a_.users.end())
          for (int u : it->second) {
            auto gu = group_of_.find(u);  // a node in no group is dead: it reads nothing
            if (classify(*a_.nodes[size_t(u)]) == NodeClass::Free ||
                (gu != group_of_.end() && gu->second != group_of_.at(int(i))))
              need = true;
          }
        if (!need) continue;
        materialized_.insert(v);
        if (out_roots.count(v)) output_values_.insert(v);
        // (a value read through a view, or whole by a library op other than a product or by
        // a cond, keeps its row-major layout: cat of two column-major temporaries copied 8 MiB
        // at 6 GB/s; a product takes a transposed operand as it is)
        bool fixed = false;
        if (it != a_.users.end())
          for (int u : it->second) {
            const ir::Node& un = *a_.nodes[size_t(u)];
            NodeClass c = classify(un);
            fixed = fixed || c == NodeClass::Free || c == NodeClass::Control ||
                    (c == NodeClass::Opaque && !ir::has_trait(un.op, ir::kTakesEpilogue));
          }
        if (!fixed && !written.count(v) && !out_roots.count(v)) free_layout_.insert(v);
      }
    }
  }

  // Where a value lives: its root's buffer and the view of it.
  ViewKey loc(const ir::Value* v) {
    ViewKey k = view_key(v);
    auto it = buffer_.find(k.root);
    if (it != buffer_.end() && v == k.root) {
      const Buffer& b = p_.buffers[size_t(it->second)];
      k.sizes = b.sizes;
      k.strides = b.strides;
    }
    return k;
  }

  void finish_access(Access& acc, bool storage_relative) {
    acc.cls = classify_access(acc, {}, 0);
    acc.align = storage_relative ? 1 : alignment(acc.offset, acc.dtype);
    acc.storage_relative = storage_relative;
    if (storage_relative) acc.cls = StrideClass::General;
  }

  // ---- kernels ----
  struct Operand {
    const ir::Value* v;
    std::vector<int64_t> s_strides;  // one per dim of S (0 where broadcast)
    ViewKey where;
  };

  // The strides over S of a value mapped right-aligned (or onto `kept` dims for a reduction
  // that drops them), given the strides of its own dims.
  static std::vector<int64_t> to_space(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                       const std::vector<int64_t>& S, const std::vector<int>* kept) {
    std::vector<int64_t> st(S.size(), 0);
    if (kept) {
      for (size_t k = 0; k < kept->size() && k < sizes.size(); ++k)
        if (sizes[k] != 1) st[size_t((*kept)[k])] = strides[k];
      return st;
    }
    size_t lead = S.size() - sizes.size();
    for (size_t k = 0; k < sizes.size(); ++k)
      if (sizes[k] != 1) st[lead + k] = strides[k];
    return st;
  }

  Kernel build(const std::vector<int>& nodes) {
    Kernel k;
    k.nodes = nodes;
    const ir::Node& first = *a_.nodes[size_t(nodes.front())];
    int opaque = -1, reduction = -1;
    for (int i : nodes) {
      NodeClass c = classify(*a_.nodes[size_t(i)]);
      if (c == NodeClass::Opaque || c == NodeClass::Control) opaque = i;
      if (c == NodeClass::Reduction && reduction < 0) reduction = i;
    }
    if (first.op == OpId::Cond) {
      k.kind = KernelKind::Control;
      return build_whole(k, nodes);
    }
    if (opaque >= 0) {
      k.kind = KernelKind::Opaque;
      return build_whole(k, nodes);
    }
    // The iteration space and the reduced dims.
    std::vector<int64_t> S;
    std::vector<int> red;
    if (reduction >= 0) {
      S = a_.nodes[size_t(reduction)]->inputs[0]->type.sizes;
      red = reduce_info(*a_.nodes[size_t(reduction)]).dims;
      k.kind = KernelKind::Reduction;
    } else {
      k.kind = KernelKind::Elementwise;
      for (int i : nodes) {
        const auto& o = a_.nodes[size_t(i)]->outputs[0]->type.sizes;
        if (o.size() > S.size()) S.insert(S.begin(), o.size() - S.size(), 1);
        for (size_t d = 0; d < o.size(); ++d) {
          auto& s = S[S.size() - o.size() + d];
          if (s == 1) s = o[d];
        }
      }
    }
    return build_loops(k, nodes, S, red);
  }

  bool in_group(const ir::Value* v, const std::set<int>& nodes) const {
    if (!v->producer) return false;
    const int i = a_.index_of(v->producer);
    return i >= 0 && nodes.count(i);
  }

  // The map of a value produced in the kernel onto S: kept dims for a reduction dropping dims.
  const std::vector<int>* kept_map(const ir::Value* v, const std::vector<int64_t>& S, const std::vector<int>& red) {
    if (!v->producer || classify(*v->producer) != NodeClass::Reduction) return nullptr;
    ReduceInfo r = reduce_info(*v->producer);
    if (r.keepdim || r.full_output) return nullptr;
    auto& kept = kept_cache_[v];
    kept.clear();
    for (size_t d = 0; d < S.size(); ++d)
      if (!std::count(red.begin(), red.end(), int(d))) kept.push_back(int(d));
    return &kept;
  }

  // ---- one kernel's loop nest ----
  // build_loops makes the kernel of a group of nodes over iteration space S (reducing `red`), in
  // steps that share a Nest: the operands it reads and the values it stores, described over S
  // (a LoopSpace); layout's plan for them (layout.h: the loop order, the temporaries' layouts,
  // the loops); the temporaries' buffers, as planned; the body in the plan's loops (its loads,
  // its nodes, its stores); last the accesses' stride classes and the kernel's kind.
  struct Store {
    const ir::Value* v;    // the value written
    const ir::Value* dst;  // where (a copy's destination, or v itself)
  };
  struct Nest {
    Kernel& k;
    const std::vector<int>& nodes;
    std::set<int> in;  // the same nodes, for lookups
    const std::vector<int64_t>& S;
    const std::vector<int>& red;
    std::vector<Operand> loads = {};  // read from memory, in order of first use
    std::vector<Store> stores = {};
    LoopPlan plan = {};
    std::set<const ir::Value*> reduced = {};          // values some reduction of the kernel reads
    std::map<const ir::Value*, ir::Value*> val = {};  // graph value -> body value
    std::map<const ir::Value*, ir::Value*> at_row = {};      // loads made a second time at the row
    std::map<const ir::Value*, ir::Value*> row_copies = {};  // values computed a second time at the row
  };

  Kernel build_loops(Kernel& k, const std::vector<int>& nodes, const std::vector<int64_t>& S, const std::vector<int>& red) {
    Nest n{k, nodes, std::set<int>(nodes.begin(), nodes.end()), S, red};
    gather_operands(n);
    n.plan = plan_loops(describe(n), pol_);
    place_temporaries(n);
    k.loops = n.plan.extents;
    k.reduce_from = n.plan.reduce_from;
    find_reduced(n);
    emit_loads(n);
    emit_nodes(n);
    emit_stores(n);
    classify_kernel(n);
    count_bytes(k);
    return std::move(k);
  }

  // The operands read from memory, in order of first use, and the values stored: materialised
  // outputs of the kernel's nodes, and copies' destinations.
  void gather_operands(Nest& n) {
    std::set<const ir::Value*> seen;
    for (int i : n.nodes) {
      const ir::Node& node = *a_.nodes[size_t(i)];
      for (size_t j = 0; j < node.inputs.size(); ++j) {
        const ir::Value* v = node.inputs[j];
        if ((node.op == OpId::Copy && j == 0) || in_group(v, n.in) || is_inline(v) || seen.count(v)) continue;
        Operand op{v, {}, {}};
        if (!arg_of_.count(v)) {
          op.where = loc(v);
          op.s_strides = to_space(op.where.sizes, op.where.strides, n.S, nullptr);
        } else {
          op.s_strides.assign(n.S.size(), 0);
        }
        seen.insert(v);
        n.loads.push_back(std::move(op));
      }
    }
    for (int i : n.nodes) {
      const ir::Node& node = *a_.nodes[size_t(i)];
      if (node.op == OpId::Copy) {
        n.stores.push_back({node.outputs[0], node.inputs[0]});
        continue;
      }
      for (const ir::Value* v : node.outputs)
        if (materialized_.count(v)) n.stores.push_back({v, v});
    }
  }

  // The kernel as layout sees it: loads' strides over S, and each store's dims, the S dim each
  // maps onto, and its layout: its buffer's where it has one, else its type's, which layout may
  // choose anew for a temporary whose layout is free.
  LoopSpace describe(const Nest& n) {
    LoopSpace s{n.S, n.red, {}, {}};
    for (const Operand& o : n.loads) s.loads.push_back(o.s_strides);
    for (const Store& st : n.stores) {
      const ir::Value* root = ir::alias_root(st.dst);
      StoreSpace d;
      d.free = st.dst == st.v && free_layout_.count(st.v) && !buffer_.count(root);
      if (st.dst == st.v && !buffer_.count(root)) {
        d.sizes = st.v->type.sizes;
        d.strides = st.v->type.strides;
      } else {
        ViewKey w = loc(st.dst);
        d.sizes = w.sizes;
        d.strides = w.strides;
      }
      const std::vector<int>* km = st.dst == st.v ? kept_map(st.v, n.S, n.red) : nullptr;
      for (size_t j = 0; j < d.sizes.size(); ++j)
        d.sdim.push_back(km ? (j < km->size() ? (*km)[j] : -1) : int(n.S.size() - d.sizes.size() + j));
      s.stores.push_back(std::move(d));
    }
    return s;
  }

  // Temporaries this kernel writes get their buffers now, laid out as the plan says.
  void place_temporaries(Nest& n) {
    for (size_t j = 0; j < n.stores.size(); ++j) {
      const Store& s = n.stores[j];
      if (s.dst != s.v || buffer_.count(s.v)) continue;
      Buffer b;
      b.kind = output_values_.count(s.v) ? BufferKind::Output : BufferKind::Temp;
      b.dtype = s.v->type.dtype;
      b.value = s.v->id;
      b.sizes = s.v->type.sizes;
      b.strides = n.plan.layouts[j];
      b.numel = span(b.sizes, b.strides);
      add_buffer(s.v, std::move(b));
    }
  }

  // The values some reduction of the kernel reads (through the kernel's elementwise work). A
  // load among them spans every reduction loop even where it does not vary (a reduction over a
  // broadcast dim counts each element as often as the dim is long); elsewhere a size of 1 is a
  // broadcast. So a load only the work after the reductions reads, at the row (x.sum(0) + b),
  // stays a per-row value, not a row's worth of copies of one. (A 0-d operand stays 0-d: it
  // only ever feeds elementwise work.)
  void find_reduced(Nest& n) {
    std::vector<const ir::Value*> stack;
    for (int i : n.nodes)
      if (classify(*a_.nodes[size_t(i)]) == NodeClass::Reduction)
        for (const ir::Value* v : a_.nodes[size_t(i)]->inputs) stack.push_back(v);
    while (!stack.empty()) {
      const ir::Value* v = stack.back();
      stack.pop_back();
      if (!n.reduced.insert(v).second || !in_group(v, n.in) || classify(*v->producer) == NodeClass::Reduction) continue;
      for (const ir::Value* x : v->producer->inputs) stack.push_back(x);
    }
  }

  // An access's sizes and strides over the loops, from its strides over S.
  void to_loops(const Nest& n, const std::vector<int64_t>& st, Access& acc, bool load) {
    for (size_t l = 0; l < n.plan.loops.size(); ++l) {
      int64_t s = st[size_t(n.plan.loops[l].back())];
      bool varies = load && int(l) >= n.k.reduce_from;
      for (int d : n.plan.loops[l]) varies = varies || st[size_t(d)] != 0;
      acc.sizes.push_back(varies ? n.k.loops[l] : 1);
      acc.strides.push_back(varies ? s : 0);
    }
  }

  // Whether node `node` of the kernel works after its reductions (on what they produce, at the row).
  bool after_reductions(const Nest& n, const ir::Node& node) {
    return classify(node) != NodeClass::Reduction && !node.outputs.empty() && !n.reduced.count(node.outputs[0]);
  }

  // The body's loads: one input of the body each. A load a reduction reads that the work after
  // the reductions reads too (s in (x * s).sum(1, keepdim) + s) is loaded a second time at the
  // row for that work, where it does not vary along the reduced loops: read through the
  // spanning load, the work would become a row of copies of one value again.
  void emit_loads(Nest& n) {
    Kernel& k = n.k;
    for (size_t j = 0; j < n.loads.size(); ++j) {
      const Operand& o = n.loads[j];
      Access acc;
      acc.dtype = o.v->type.dtype;
      std::string name = "in" + std::to_string(j);
      if (arg_of_.count(o.v)) {
        acc.arg = arg_of_.at(o.v);
        acc.sizes.assign(n.plan.loops.size(), 1);
        acc.strides.assign(n.plan.loops.size(), 0);
        n.val[o.v] = k.body.add_input(name, o.v->type);
      } else {
        acc.buffer = buffer_of(o.where.root);
        to_loops(n, o.s_strides, acc, !o.v->type.sizes.empty() && n.reduced.count(o.v));
        acc.offset = o.where.offset;
        finish_access(acc, o.where.storage_relative);
        // A 0-d operand stays 0-d in the body: it promotes as a 0-d tensor.
        std::vector<int64_t> sizes = o.v->type.sizes.empty() ? std::vector<int64_t>{} : acc.sizes;
        n.val[o.v] = k.body.add_input(name, ir::Type::contiguous(acc.dtype, sizes, o.v->type.device));
      }
      k.loads.push_back(std::move(acc));
    }
    for (size_t j = 0; j < n.loads.size(); ++j) {
      bool read_after = false;
      for (int i : n.nodes) {
        const ir::Node& node = *a_.nodes[size_t(i)];
        if (after_reductions(n, node) && node.op != OpId::Copy)
          read_after |= std::find(node.inputs.begin(), node.inputs.end(), n.loads[j].v) != node.inputs.end();
      }
      if (read_after) twin_of(n, j);
    }
  }

  // Load j's second load at the row (made once), or null where load j varies along the row.
  ir::Value* twin_of(Nest& n, size_t j) {
    Kernel& k = n.k;
    const Operand& o = n.loads[j];
    if (auto it = n.at_row.find(o.v); it != n.at_row.end()) return it->second;
    if (arg_of_.count(o.v) || o.v->type.sizes.empty() || !n.reduced.count(o.v)) return nullptr;
    Access acc;
    acc.dtype = o.v->type.dtype;
    acc.buffer = buffer_of(o.where.root);
    to_loops(n, o.s_strides, acc, false);
    if (acc.sizes == k.loads[j].sizes) return nullptr;  // (it varies along the row)
    acc.offset = o.where.offset;
    finish_access(acc, o.where.storage_relative);
    ir::Value* in = k.body.add_input("in" + std::to_string(k.loads.size()), ir::Type::contiguous(acc.dtype, acc.sizes, o.v->type.device));
    k.loads.push_back(std::move(acc));
    return n.at_row[o.v] = in;
  }

  // The loop that S dim d belongs to, or -1.
  static int64_t loop_of(const Nest& n, int d) {
    for (size_t l = 0; l < n.plan.loops.size(); ++l)
      if (std::count(n.plan.loops[l].begin(), n.plan.loops[l].end(), d)) return int64_t(l);
    return int64_t(-1);
  }

  // The kernel's nodes in loop space: a reduction's dims become the loops they are.
  void emit_nodes(Nest& n) {
    Kernel& k = n.k;
    auto& val = n.val;
    for (int i : n.nodes) {
      const ir::Node& node = *a_.nodes[size_t(i)];
      std::vector<ir::Value*> ins;
      for (size_t j = 0; j < node.inputs.size(); ++j) {
        const ir::Value* v = node.inputs[j];
        if (node.op == OpId::Copy && j == 0) continue;
        if (is_inline(v) && !val.count(v)) {
          const ir::Node& c = *v->producer;
          val[v] = k.body.add_node(OpId::Constant, {}, c.attrs, {v->type})->outputs[0];
        }
        auto twin = n.at_row.find(v);
        ins.push_back(twin != n.at_row.end() && after_reductions(n, node) ? twin->second : val.at(v));
      }
      if (node.op == OpId::Contiguous || node.op == OpId::Clone) {
        val[node.outputs[0]] = ins[0];
        continue;
      }
      if (node.op == OpId::Copy) {
        ir::Value* x = ins[0];
        if (x->type.dtype != node.outputs[0]->type.dtype)
          x = emit(k.body, OpId::Cast, {x}, {{"dtype", node.outputs[0]->type.dtype}})[0];
        val[node.outputs[0]] = x;
        continue;
      }
      std::vector<Attr> attrs = node.attrs;
      if (classify(node) == NodeClass::Reduction) {
        ReduceInfo r = reduce_info(node);
        // A reduction to a 0-d result stays 0-d in the body: 0-d tensors promote differently.
        bool zero_d = node.outputs[0]->type.sizes.empty() && !r.full_output;
        for (Attr& at : attrs) {
          if (at.name == "dims") {
            IntList dl;
            for (int d : r.dims)
              if (int64_t l = loop_of(n, d); l >= 0 && !std::count(dl.begin(), dl.end(), l)) dl.push_back(l);
            if (dl.empty() && !r.dims.empty()) dl.push_back(int64_t(n.plan.loops.size()) - 1);
            at.value = dl;
          } else if (at.name == "dim" && std::holds_alternative<int64_t>(at.value)) {
            int64_t l = loop_of(n, r.dims.empty() ? 0 : r.dims.front());
            at.value = l >= 0 ? l : int64_t(n.plan.loops.size()) - 1;
          } else if (at.name == "keepdim") {
            at.value = !zero_d;
          }
        }
        if (!r.full_output && !node.attr("keepdim")) attrs.push_back({"keepdim", !zero_d});
        std::sort(attrs.begin(), attrs.end(), [](const Attr& x, const Attr& y) { return x.name < y.name; });
      }
      auto outs = emit(k.body, node.op, ins, attrs);
      for (size_t j = 0; j < outs.size(); ++j) {
        // Loop space must not change what an op computes; a dtype change would mean it did.
        KILN_CHECK(outs[j]->type.dtype == node.outputs[j]->type.dtype, "passes", "lower: internal error: ",
                   ir::op_info(node.op).name, " computes ", ir::short_name(outs[j]->type.dtype), " in its kernel but ",
                   ir::short_name(node.outputs[j]->type.dtype), " in the graph");
        val[node.outputs[j]] = outs[j];
      }
    }
  }

  // A value the reductions read that is also stored once per row (w2 = w * 2 returned beside
  // (x * w2).sum(1)) is computed a second time from the loads at the row: through the spanning
  // loads it is a row's worth of copies of one value, which no backend stores once per row.
  // Only elementwise work on loads and constants; anything else keeps the row value (null).
  ir::Value* at_the_row(Nest& n, const ir::Value* v) {
    if (auto it = n.row_copies.find(v); it != n.row_copies.end()) return it->second;
    ir::Value* out = nullptr;
    auto load = std::find_if(n.loads.begin(), n.loads.end(), [&](const Operand& o) { return o.v == v; });
    if (load != n.loads.end()) {
      out = arg_of_.count(v) || v->type.sizes.empty() ? n.val.at(v) : twin_of(n, size_t(load - n.loads.begin()));
    } else if (is_inline(v) || !v->producer || !in_group(v, n.in)) {
      out = n.val.count(v) && n.val.at(v)->type.sizes.empty() ? n.val.at(v) : nullptr;
    } else if (const ir::Node& node = *v->producer; node.op == OpId::Contiguous || node.op == OpId::Clone) {
      out = at_the_row(n, node.inputs[0]);
    } else if (classify(node) == NodeClass::Elementwise && node.op != OpId::Copy && node.outputs.size() == 1) {
      std::vector<ir::Value*> ins;
      for (const ir::Value* x : node.inputs) {
        ir::Value* y = at_the_row(n, x);
        if (!y) return n.row_copies[v] = nullptr;
        ins.push_back(y);
      }
      out = emit(n.k.body, node.op, ins, node.attrs)[0];
    }
    return n.row_copies[v] = out;
  }

  // The stores; a later store through the same index makes an earlier one dead.
  void emit_stores(Nest& n) {
    Kernel& k = n.k;
    std::vector<ir::Value*> body_outs;
    for (size_t j = 0; j < n.stores.size(); ++j) {
      const Store& s = n.stores[j];
      Access acc;
      ViewKey w = loc(s.dst);
      acc.buffer = buffer_of(w.root);
      acc.dtype = s.dst->type.dtype;
      to_loops(n, n.plan.store_st[j], acc, false);
      acc.offset = w.offset;
      finish_access(acc, w.storage_relative);
      for (size_t q = 0; q < k.stores.size(); ++q)
        if (k.stores[q] == acc) {
          k.stores.erase(k.stores.begin() + long(q));
          body_outs.erase(body_outs.begin() + long(q));
          break;
        }
      ir::Value* x = n.val.at(s.v);
      bool per_row = int(acc.sizes.size()) > k.reduce_from;
      for (size_t l = size_t(std::max(k.reduce_from, 0)); l < acc.sizes.size(); ++l) per_row = per_row && acc.sizes[l] == 1;
      if (per_row && n.reduced.count(s.v) && x->type.sizes != acc.sizes)
        if (ir::Value* y = at_the_row(n, s.v); y && y->type.dtype == x->type.dtype) x = y;
      k.stores.push_back(std::move(acc));
      body_outs.push_back(x);
    }
    k.body.set_outputs(body_outs);
  }

  // The accesses' stride classes, and the kernel's kind: row-wise when something full-size is
  // computed after (or by) a reduction.
  void classify_kernel(Nest& n) {
    Kernel& k = n.k;
    for (Access& acc : k.loads)
      if (acc.buffer >= 0 && !acc.storage_relative) acc.cls = classify_access(acc, k.loops, k.loops.size());
    for (Access& acc : k.stores)
      if (!acc.storage_relative) acc.cls = classify_access(acc, k.loops, size_t(k.reduce_from));
    if (k.kind == KernelKind::Reduction) {
      for (const auto& node : k.body.nodes()) {
        bool after_red = false;
        for (ir::Value* x : node->inputs)
          after_red = after_red || (x->producer && ir::op_info(x->producer->op).category == ir::Category::Reduction);
        bool full = !node->outputs.empty() && node->outputs[0]->type.sizes == k.loops;
        bool row_op = ir::has_trait(node->op, ir::kRowOp);
        if ((after_red && full) || row_op) k.kind = KernelKind::RowWise;
      }
    }
  }

  // A kernel for an opaque op (and its epilogue) or a cond: operands read whole.
  Kernel build_whole(Kernel& k, const std::vector<int>& nodes) {
    std::set<int> in(nodes.begin(), nodes.end());
    const ir::Node& lead = *a_.nodes[size_t(nodes.front())];
    const std::vector<int64_t>& S = lead.outputs.empty() ? std::vector<int64_t>{} : lead.outputs[0]->type.sizes;
    k.loops = S;
    k.reduce_from = int(S.size());
    std::map<const ir::Value*, ir::Value*> val;
    std::vector<ir::Value*> body_outs;
    std::vector<int64_t> epilogue_loads;
    for (int i : nodes) {
      const ir::Node& n = *a_.nodes[size_t(i)];
      bool whole = i == nodes.front();
      std::vector<ir::Value*> ins;
      for (const ir::Value* v : n.inputs) {
        if (!val.count(v)) {
          if (is_inline(v)) {
            val[v] = k.body.add_node(OpId::Constant, {}, v->producer->attrs, {v->type})->outputs[0];
          } else {
            Access acc;
            acc.dtype = v->type.dtype;
            std::string name = "in" + std::to_string(k.loads.size());
            if (arg_of_.count(v)) {
              acc.arg = arg_of_.at(v);
              val[v] = k.body.add_input(name, v->type);
            } else {
              ViewKey w = loc(v);
              acc.buffer = buffer_of(w.root);
              acc.sizes = w.sizes;
              std::vector<int64_t> st = w.strides;
              if (!whole) st = to_space(w.sizes, w.strides, S, nullptr);
              if (!whole) acc.sizes = S;
              if (!whole)
                for (size_t d = 0; d < S.size(); ++d)
                  if (st[d] == 0) acc.sizes[d] = 1;
              acc.strides = st;
              acc.offset = w.offset;
              finish_access(acc, w.storage_relative);
              if (!whole) epilogue_loads.push_back(int64_t(k.loads.size()));
              std::vector<int64_t> bs = v->type.sizes.empty() ? std::vector<int64_t>{} : acc.sizes;
              val[v] = k.body.add_input(name, ir::Type::contiguous(acc.dtype, bs, v->type.device));
            }
            k.loads.push_back(std::move(acc));
          }
        }
        ins.push_back(val.at(v));
      }
      std::vector<ir::Value*> outs;
      if (n.op == OpId::Cond) {
        ir::Node* c = k.body.add_node(OpId::Cond, ins, n.attrs, [&] {
          std::vector<ir::Type> ts;
          for (const ir::Value* o : n.outputs) ts.push_back(o->type);
          return ts;
        }());
        for (const auto& r : n.regions) c->regions.push_back(std::make_unique<ir::Graph>(clone(*r)));
        outs = c->outputs;
      } else if (n.op == OpId::Contiguous || n.op == OpId::Clone) {
        outs = {ins[0]};
      } else if (n.op == OpId::Copy) {
        KILN_FAIL("passes", "lower: internal error: a copy in an opaque kernel");
      } else {
        outs = emit(k.body, n.op, ins, n.attrs);
      }
      for (size_t j = 0; j < outs.size(); ++j) {
        const ir::Value* v = n.outputs[j];
        val[v] = outs[j];
        if (!materialized_.count(v)) continue;
        Buffer b;
        b.kind = output_values_.count(v) ? BufferKind::Output : BufferKind::Temp;
        b.dtype = v->type.dtype;
        b.value = v->id;
        b.sizes = v->type.sizes;
        b.strides = v->type.strides;
        b.numel = span(b.sizes, b.strides);
        int id = add_buffer(v, std::move(b));
        Access acc;
        acc.buffer = id;
        acc.dtype = v->type.dtype;
        acc.sizes = v->type.sizes;
        acc.strides = v->type.strides;
        finish_access(acc, false);
        k.stores.push_back(std::move(acc));
        body_outs.push_back(outs[j]);
      }
    }
    k.body.set_outputs(body_outs);
    // Epilogue operands are indexed over the output's loop space.
    for (Access& acc : k.loads)
      if (acc.buffer >= 0 && !acc.storage_relative && acc.sizes.size() == S.size() && !epilogue_loads.empty() &&
          std::count(epilogue_loads.begin(), epilogue_loads.end(), &acc - k.loads.data()))
        acc.cls = classify_access(acc, S, S.size());
    count_bytes(k);
    return std::move(k);
  }

  static std::vector<ir::Value*> emit(ir::Graph& body, OpId op, std::vector<ir::Value*> ins, std::vector<Attr> attrs) {
    std::vector<ir::Type> types;
    for (ir::Value* x : ins) types.push_back(x->type);
    auto out = ir::infer_types(op, types, attrs);
    return body.add_node(op, std::move(ins), std::move(attrs), std::move(out))->outputs;
  }

  void count_bytes(Kernel& k) {
    auto bytes = [&](const std::vector<Access>& accs) {
      int64_t total = 0;
      std::vector<const Access*> seen;
      for (const Access& acc : accs) {
        if (acc.buffer < 0) continue;
        bool dup = false;
        for (const Access* s : seen) dup = dup || *s == acc;
        if (dup) continue;
        seen.push_back(&acc);
        total += numel(acc.sizes) * itemsize(acc.dtype);
      }
      return total;
    };
    k.bytes_read = bytes(k.loads);
    k.bytes_written = bytes(k.stores);
  }

  const ir::Graph& g_;
  Analysis a_;
  LayoutPolicy pol_;
  KernelProgram p_;
  std::map<int, int> group_of_;
  std::map<const ir::Value*, int> buffer_, arg_of_;
  std::set<const ir::Value*> materialized_, output_values_, free_layout_;
  std::map<const ir::Value*, std::vector<int>> kept_cache_;
};

}  // namespace

KernelProgram lower(const ir::Graph& g, const std::vector<std::vector<int>>& groups, const LayoutPolicy& policy) {
  KernelProgram p = Lowerer(g, policy).run(groups);
  p.laid_out = policy.reorder || policy.coalesce || policy.temp_layouts;
  return p;
}

}  // namespace kiln::passes
