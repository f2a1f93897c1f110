// The steps of an einsum, written once for the eager einsum (runtime/src/einsum.cpp), which runs
// them on tensors, and for type inference (ir/src/infer_linalg.cpp), which replays them on
// types: so both read an equation, check it and shape its result the same way.
//
// einsum diagonalises each operand's repeated subscripts, sums the subscripts no later step
// needs, contracts the operands left to right (one batched product each), sums what the output
// does not name and permutes the result into the output's order. `Ops` does each step on its
// kind of operand X (Tensor or ir::Type):
//   std::vector<int> scan_term(std::string_view)         einsum_labels::scan_term, its errors
//   int64_t rank(const X&), int64_t size(const X&, size_t d)
//   X diagonal(const X&, size_t i, size_t j)             dims i and j's diagonal, appended last
//   X sum(const X&, const std::vector<int64_t>& dims)    summed over dims, not kept
//   X arrange(const X&, perm, full, flat)                permuted, expanded to `full`, reshaped to `flat`
//   X bmm(const X&, const X&, bool last)                 the product; `last`: its labels are the output's
//   X view(const X&, const std::vector<int64_t>& sizes)
//   X permute(const X&, const std::vector<int64_t>& perm)
//   fail(parts...)                                       throws (the eager op's or inference's error)
#pragma once
#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "kiln/runtime/einsum_labels.h"

namespace kiln::einsum_labels {

template <typename X, typename Ops>
X run_einsum(std::string_view eq, const std::vector<X>& operands, Ops& ops) {
  struct Term {
    X t;
    std::vector<int> labels;  // one per dim of t
  };
  auto has = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };
  auto size_of = [&](const Term& x, int label) {
    auto it = std::find(x.labels.begin(), x.labels.end(), label);
    return it == x.labels.end() ? int64_t(1) : ops.size(x.t, size_t(it - x.labels.begin()));
  };
  // A label repeated within an operand becomes the diagonal of those two dims.
  auto take_diagonals = [&](Term x) {
    for (bool again = true; again;) {
      again = false;
      for (size_t i = 0; i < x.labels.size() && !again; ++i)
        for (size_t j = i + 1; j < x.labels.size() && !again; ++j) {
          if (x.labels[i] != x.labels[j]) continue;
          if (ops.size(x.t, i) != ops.size(x.t, j))
            ops.fail("subscript ", label_char(x.labels[i]), " is repeated for an operand but the sizes don't match, ",
                     ops.size(x.t, i), " != ", ops.size(x.t, j));
          const int l = x.labels[i];
          x.t = ops.diagonal(x.t, i, j);
          x.labels.erase(x.labels.begin() + int64_t(j));
          x.labels.erase(x.labels.begin() + int64_t(i));
          x.labels.push_back(l);
          again = true;
        }
    }
    return x;
  };
  // Sums the dims whose labels are not in `keep`.
  auto sum_unneeded = [&](const Term& x, const std::vector<int>& keep) {
    std::vector<int64_t> dims;
    std::vector<int> rest;
    for (size_t d = 0; d < x.labels.size(); ++d) {
      if (has(keep, x.labels[d])) rest.push_back(x.labels[d]);
      else dims.push_back(int64_t(d));
    }
    return dims.empty() ? x : Term{ops.sum(x.t, dims), rest};
  };
  // One batched product over (batch, left, contracted) x (batch, contracted, right); labels in
  // `keep` survive, shared labels not in `keep` are summed.
  auto contract = [&](const Term& a, const Term& b, const std::vector<int>& keep, bool last,
                      const std::vector<int>& out) {
    std::vector<int> batch, left, con, right;
    for (int l : a.labels) {
      if (has(b.labels, l)) (has(keep, l) ? batch : con).push_back(l);
      else left.push_back(l);
    }
    for (int l : b.labels)
      if (!has(a.labels, l)) right.push_back(l);
    auto full_size = [&](int l) { return std::max(size_of(a, l), size_of(b, l)); };
    auto arrange = [&](const Term& x, std::initializer_list<const std::vector<int>*> groups) {
      for (int l : x.labels)
        if (size_of(x, l) != full_size(l) && size_of(x, l) != 1)
          ops.fail("the expanded size of the tensor (", full_size(l), ") must match the existing size (",
                   size_of(x, l), ") for subscript ", label_char(l));
      std::vector<int64_t> perm, full, flat;
      for (auto* g : groups) {
        int64_t n = 1;
        for (int l : *g) {
          auto it = std::find(x.labels.begin(), x.labels.end(), l);
          if (it != x.labels.end()) {
            perm.push_back(it - x.labels.begin());
            full.push_back(full_size(l));
          }
          int64_t next;
          if (__builtin_mul_overflow(n, full_size(l), &next))
            ops.fail("the operands' element count overflows int64 (", n, " * ", full_size(l), ")");
          n = next;
        }
        flat.push_back(n);
      }
      return ops.arrange(x.t, perm, full, flat);
    };
    X A = arrange(a, {&batch, &left, &con}), B = arrange(b, {&batch, &con, &right});
    std::vector<int64_t> shape;
    std::vector<int> labels;
    for (auto* g : {&batch, &left, &right})
      for (int l : *g) {
        shape.push_back(full_size(l));
        labels.push_back(l);
      }
    // (the last product, when its labels are the result's in order: nothing follows it then)
    return Term{ops.view(ops.bmm(A, B, last && labels == out), shape), labels};
  };

  const size_t arrow = eq.find("->");
  const std::string_view lhs = eq.substr(0, arrow);
  std::vector<std::vector<int>> scanned;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    scanned.push_back(ops.scan_term(lhs.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (scanned.size() != operands.size())
    ops.fail("einsum(): more operands were provided than specified in the equation (equation has ", scanned.size(),
             " terms, got ", operands.size(), " operands)");
  int64_t max_ell = 0;
  std::vector<int64_t> ell(operands.size(), 0);
  for (size_t i = 0; i < operands.size(); ++i) {
    const int64_t explicit_labels = std::count_if(scanned[i].begin(), scanned[i].end(), [](int l) { return l >= 0; });
    const bool has_ell = has(scanned[i], -1);
    ell[i] = ops.rank(operands[i]) - explicit_labels;
    if (has_ell ? ell[i] < 0 : ell[i] != 0)
      ops.fail("the number of subscripts in the equation (", explicit_labels, ") does not match the number of dimensions (",
               ops.rank(operands[i]), ") for operand ", i, has_ell ? "" : " and no ellipsis was given");
    max_ell = std::max(max_ell, ell[i]);
  }
  std::vector<Term> terms;
  std::map<int, int> counts;
  for (size_t i = 0; i < operands.size(); ++i) {
    Term t{operands[i], expand_ellipsis(scanned[i], ell[i], max_ell)};
    for (int l : t.labels) ++counts[l];
    terms.push_back(take_diagonals(t));
  }
  std::vector<int> out;
  if (arrow != std::string_view::npos) {
    out = expand_ellipsis(ops.scan_term(eq.substr(arrow + 2)), max_ell, max_ell);
    for (int l : out) {
      if (!counts.count(l))
        ops.fail("einsum(): output subscript ", label_char(l), " does not appear in the equation for any input operand");
      if (std::count(out.begin(), out.end(), l) != 1)
        ops.fail("einsum(): output subscript ", label_char(l), " appears more than once in the output");
    }
  } else {
    // implicit output: ellipsis dims, then labels seen exactly once, in label order
    for (int64_t e = 0; e < max_ell; ++e) out.push_back(kEllipsis + int(e));
    for (auto& [l, n] : counts)
      if (n == 1 && l < kEllipsis) out.push_back(l);
  }
  // labels still needed after operand i: the output's and those of later operands
  auto needed_after = [&](size_t i) {
    std::vector<int> keep = out;
    for (size_t j = i + 1; j < terms.size(); ++j) keep.insert(keep.end(), terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  std::vector<int> keep0 = needed_after(0);
  if (terms.size() > 1) keep0.insert(keep0.end(), terms[1].labels.begin(), terms[1].labels.end());
  Term acc = sum_unneeded(terms[0], keep0);
  for (size_t i = 1; i < terms.size(); ++i) {
    std::vector<int> keep = needed_after(i);
    std::vector<int> keep_b = keep;
    keep_b.insert(keep_b.end(), acc.labels.begin(), acc.labels.end());
    acc = contract(acc, sum_unneeded(terms[i], keep_b), keep, i + 1 == terms.size(), out);
  }
  acc = sum_unneeded(acc, out);
  // the final permute into the output's label order
  std::vector<int64_t> perm;
  for (int l : out) {
    auto it = std::find(acc.labels.begin(), acc.labels.end(), l);
    if (it == acc.labels.end()) ops.fail("einsum(): output subscript ", label_char(l), " has no dimension in the result");
    perm.push_back(it - acc.labels.begin());
  }
  return ops.permute(acc.t, perm);
}

}  // namespace kiln::einsum_labels
