// Layout (layout.h): the loop order, the temporaries' layouts and loop coalescing of a kernel,
// decided from its LoopSpace alone; and the `layout` pass, which re-lowers the fused program
// with these decisions on.
#include "layout.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>

namespace kiln::passes {
namespace detail {

std::vector<int64_t> over_space(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                const std::vector<int>& sdim, size_t rank) {
  std::vector<int64_t> st(rank, 0);
  for (size_t k = 0; k < sizes.size() && k < sdim.size(); ++k)
    if (sizes[k] != 1 && sdim[k] >= 0) st[size_t(sdim[k])] = strides[k];
  return st;
}

namespace {

bool reduced(const LoopSpace& s, int d) { return std::count(s.red.begin(), s.red.end(), d) > 0; }

// The loop order: the kept dims (S dims of more than one element that are not reduced) in the
// order of the dominant operand's strides, largest outermost, then the reduced dims. The
// dominant operand is the first store whose layout is fixed, else the load varying in most dims.
std::vector<int> order_loops(const LoopSpace& s, const LayoutPolicy& pol) {
  std::vector<int> kept;
  for (size_t d = 0; d < s.S.size(); ++d)
    if (s.S[d] != 1 && !reduced(s, int(d))) kept.push_back(int(d));
  if (pol.reorder && kept.size() > 1) {
    std::vector<int64_t> dom;
    for (const StoreSpace& st : s.stores)
      if (!st.free) {
        dom = over_space(st.sizes, st.strides, st.sdim, s.S.size());
        break;
      }
    if (dom.empty()) {
      int best = -1;
      for (const auto& l : s.loads) {
        int varying = int(std::count_if(l.begin(), l.end(), [](int64_t x) { return x != 0; }));
        if (varying > best) {
          best = varying;
          dom = l;
        }
      }
    }
    if (!dom.empty())
      std::stable_sort(kept.begin(), kept.end(), [&](int x, int y) {
        auto key = [&](int d) { return dom[size_t(d)] == 0 ? INT64_MAX : dom[size_t(d)]; };
        return key(x) > key(y);
      });
  }
  std::vector<int> order = kept;
  for (int d : s.red) order.push_back(d);
  if (order.empty() && !s.S.empty()) order.push_back(int(s.S.size() - 1));
  return order;
}

// Row-major strides for a store in the order the loops visit S's dims (inner loops fastest);
// its own strides where the order changes nothing (size-1 dims differ only).
std::vector<int64_t> layout_in_order(const StoreSpace& st, const std::vector<int>& order) {
  const auto& sizes = st.sizes;
  std::vector<size_t> dims(sizes.size());
  std::iota(dims.begin(), dims.end(), 0);
  auto pos = [&](size_t k) {
    int d = k < st.sdim.size() ? st.sdim[k] : -1;
    auto it = std::find(order.begin(), order.end(), d);
    return it == order.end() ? -1 : int(it - order.begin());
  };
  std::stable_sort(dims.begin(), dims.end(), [&](size_t x, size_t y) { return pos(x) < pos(y); });
  std::vector<int64_t> out(sizes.size(), 1);
  int64_t s = 1;
  for (size_t j = dims.size(); j-- > 0;) {
    out[dims[j]] = s;
    s *= std::max<int64_t>(sizes[dims[j]], 1);
  }
  if (sizes.size() == st.strides.size()) {
    bool same = true;
    for (size_t d = 0; d < sizes.size(); ++d) same = same && (sizes[d] == 1 || out[d] == st.strides[d]);
    if (same) return st.strides;
  }
  return out;
}

// A column reduction (x.sum(0) of a row-major x, a bias gradient): the reduced dims run
// innermost, but an operand runs contiguously along the last kept dim K, and none that varies
// along K runs so along a reduced one. A free store that spans the reduced dims (a value of the row fused beside the sum) is
// then laid out as such an operand is, in the order of its strides: the backend's by-columns
// code writes it along the run it reads, where row-major in loop order would write it a
// column at a time (a [1024, 1024] gradient took 8 ms so, against 0.7 for its neighbours).
// Empty when the kernel is not one.
std::vector<int> column_order(const LoopSpace& s, const std::vector<int>& order) {
  const size_t kept = order.size() - std::min(order.size(), s.red.size());
  if (s.red.empty() || kept == 0) return {};
  const int K = order[kept - 1];
  const std::vector<int64_t>* like = nullptr;
  for (const auto& l : s.loads) {
    for (int d : s.red)  // (one broadcast along K is a value per row: it may run along the rows)
      if (l[size_t(K)] != 0 && (l[size_t(d)] == 1 || l[size_t(d)] == -1)) return {};
    if (!like && l[size_t(K)] == 1) like = &l;
  }
  if (!like) return {};
  std::vector<int> mem(s.S.size());
  std::iota(mem.begin(), mem.end(), 0);
  std::stable_sort(mem.begin(), mem.end(), [&](int x, int y) {
    auto key = [&](int d) { return (*like)[size_t(d)] == 0 ? INT64_MAX : std::abs((*like)[size_t(d)]); };
    return key(x) > key(y);
  });
  return mem;
}

bool spans_reduced(const LoopSpace& s, const StoreSpace& st) {
  for (size_t k = 0; k < st.sizes.size() && k < st.sdim.size(); ++k)
    if (st.sizes[k] != 1 && st.sdim[k] >= 0 && reduced(s, st.sdim[k])) return true;
  return false;
}

// The loops: groups of S dims in the loop order, merged where every operand walks them as one
// (the outer dim's stride is the inner one's times its size) and both are reduced or both kept.
void form_loops(const LoopSpace& s, const LayoutPolicy& pol, LoopPlan& p) {
  for (int d : p.order) {
    if (pol.coalesce && !p.loops.empty()) {
      int prev = p.loops.back().back();
      auto fits = [&](const std::vector<int64_t>& st) { return st[size_t(prev)] == st[size_t(d)] * s.S[size_t(d)]; };
      bool ok = reduced(s, prev) == reduced(s, d);
      for (const auto& l : s.loads) ok = ok && fits(l);
      for (const auto& st : p.store_st) ok = ok && fits(st);
      if (ok) {
        p.loops.back().push_back(d);
        continue;
      }
    }
    p.loops.push_back({d});
  }
  p.reduce_from = int(p.loops.size());
  for (size_t l = 0; l < p.loops.size(); ++l) {
    int64_t ext = 1;
    for (int d : p.loops[l]) ext *= s.S[size_t(d)];
    p.extents.push_back(ext);
    if (reduced(s, p.loops[l].front()) && p.reduce_from == int(p.loops.size())) p.reduce_from = int(l);
  }
}

}  // namespace

LoopPlan plan_loops(const LoopSpace& space, const LayoutPolicy& policy) {
  LoopPlan p;
  p.order = order_loops(space, policy);
  const std::vector<int> columns = policy.temp_layouts ? column_order(space, p.order) : std::vector<int>();
  for (const StoreSpace& st : space.stores) {
    const bool by_columns = !columns.empty() && spans_reduced(space, st);
    p.layouts.push_back(!st.free || !policy.temp_layouts ? st.strides
                        : by_columns                      ? layout_in_order(st, columns)
                                                          : layout_in_order(st, p.order));
    p.store_st.push_back(over_space(st.sizes, p.layouts.back(), st.sdim, space.S.size()));
  }
  form_loops(space, policy, p);
  return p;
}

}  // namespace detail

int layout(Module& m) {
  KILN_CHECK(m.program, "passes", "layout: no kernel program");
  std::vector<std::vector<int>> groups;
  for (const Kernel& k : m.program->kernels) groups.push_back(k.nodes);
  LayoutPolicy all{true, true, true};
  auto program = std::make_shared<KernelProgram>(lower(m.graph, groups, all));
  if (m.program->planned) plan_memory_of(*program);
  const int rewrites = differences(*m.program, *program);
  m.program = std::move(program);
  return rewrites;
}

}  // namespace kiln::passes
