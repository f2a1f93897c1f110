// einsum: parses the equation, takes diagonals for labels repeated within an operand, sums
// labels no one else needs, and contracts operands left to right through one bmm each.
#include <algorithm>
#include <map>

#include "kiln/runtime/einsum_labels.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace einsum_labels {

int label_of(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}
char label_char(int l) { return l < 26 ? char('a' + l) : l < 52 ? char('A' + l - 26) : '.'; }

std::vector<int> scan_term(std::string_view term) {
  std::vector<int> labels;
  bool has_ell = false;
  for (size_t i = 0; i < term.size(); ++i) {
    char c = term[i];
    if (c == ' ') continue;
    if (c == '.') {
      KILN_CHECK(!has_ell && term.substr(i, 3) == "...", "einsum", "found an invalid ellipsis in '", term,
                 "'; an operand may have at most one '...'");
      has_ell = true;
      labels.push_back(-1);
      i += 2;
      continue;
    }
    KILN_CHECK(label_of(c) >= 0, "einsum", "invalid subscript given at index ", i, " in the equation term '",
               term, "'; subscripts must be in [a-zA-Z]");
    labels.push_back(label_of(c));
  }
  return labels;
}

std::vector<int> expand_ellipsis(const std::vector<int>& scanned, int64_t ell_dims, int64_t max_ell) {
  std::vector<int> out;
  for (int l : scanned) {
    if (l != -1) out.push_back(l);
    else
      for (int64_t e = 0; e < ell_dims; ++e) out.push_back(kEllipsis + int(max_ell - ell_dims + e));
  }
  return out;
}

}  // namespace einsum_labels

namespace {

using namespace einsum_labels;

struct Term {
  Tensor t;
  std::vector<int> labels;  // one per dim of t
};

Term take_diagonals(Term x) {
  for (size_t i = 0; i < x.labels.size(); ++i)
    for (size_t j = i + 1; j < x.labels.size(); ++j) {
      if (x.labels[i] != x.labels[j]) continue;
      KILN_CHECK(x.t.sizes()[i] == x.t.sizes()[j], "einsum", "subscript ", label_char(x.labels[i]),
                 " is repeated for an operand but the sizes don't match, ", x.t.sizes()[i], " != ", x.t.sizes()[j]);
      int l = x.labels[i];
      x.t = x.t.diagonal(0, int64_t(i), int64_t(j));  // drops i and j, appends the diagonal
      x.labels.erase(x.labels.begin() + int64_t(j));
      x.labels.erase(x.labels.begin() + int64_t(i));
      x.labels.push_back(l);
      return take_diagonals(x);
    }
  return x;
}

// Sums the dims whose labels are not in `keep`.
Term sum_unneeded(Term x, const std::vector<int>& keep) {
  std::vector<int64_t> dims;
  std::vector<int> rest;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (std::find(keep.begin(), keep.end(), x.labels[d]) == keep.end()) dims.push_back(int64_t(d));
    else rest.push_back(x.labels[d]);
  }
  if (dims.empty()) return x;
  return {sum(x.t, dims, false), rest};
}

int64_t size_of(const Term& x, int label) {
  auto it = std::find(x.labels.begin(), x.labels.end(), label);
  return it == x.labels.end() ? 1 : x.t.sizes()[it - x.labels.begin()];
}

// Contracts a and b; labels in `keep` survive, shared labels not in `keep` are summed. With
// `into`, a product whose labels come out as `into_labels` is written there (einsum_impl).
Term contract(const Term& a, const Term& b, const std::vector<int>& keep, const Tensor* into = nullptr,
              const std::vector<int>* into_labels = nullptr) {
  auto in = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };
  std::vector<int> batch, left, con, right;
  for (int l : a.labels) {
    if (in(b.labels, l)) (in(keep, l) ? batch : con).push_back(l);
    else left.push_back(l);
  }
  for (int l : b.labels)
    if (!in(a.labels, l)) right.push_back(l);
  auto arrange = [&](const Term& x, std::initializer_list<const std::vector<int>*> groups,
                     std::vector<int64_t>& flat) {
    // (the error type inference gives, rather than expand's, which names no subscript)
    for (int l : x.labels) {
      const int64_t n = size_of(x, l), full = std::max(size_of(a, l), size_of(b, l));
      KILN_CHECK(n == full || n == 1, "einsum", "the expanded size of the tensor (", full,
                 ") must match the existing size (", n, ") for subscript ", label_char(l));
    }
    std::vector<int64_t> perm, sizes;
    for (auto* g : groups) {
      int64_t n = 1;
      for (int l : *g) {
        auto it = std::find(x.labels.begin(), x.labels.end(), l);
        if (it != x.labels.end()) perm.push_back(it - x.labels.begin());
        n = shape::mul(n, std::max(size_of(a, l), size_of(b, l)), "einsum", "the operands' element count");
      }
      flat.push_back(n);
    }
    Tensor t = x.t.permute(perm);
    // broadcast size-1 dims to the other operand's size
    std::vector<int64_t> full;
    for (auto* g : groups)
      for (int l : *g)
        if (in(x.labels, l)) full.push_back(std::max(size_of(a, l), size_of(b, l)));
    return t.expand(full).reshape(flat);
  };
  std::vector<int64_t> fa, fb;
  Tensor A = arrange(a, {&batch, &left, &con}, fa);
  Tensor B = arrange(b, {&batch, &con, &right}, fb);
  std::vector<int64_t> shape;
  std::vector<int> labels;
  for (auto* g : {&batch, &left, &right})
    for (int l : *g) {
      shape.push_back(std::max(size_of(a, l), size_of(b, l)));
      labels.push_back(l);
    }
  Tensor r = into && labels == *into_labels ? detail::bmm_into(A, B, *into) : bmm(A, B);
  return {r.view(shape), labels};
}

}  // namespace

Tensor einsum(std::string_view eq, const std::vector<Tensor>& operands) {
  KILN_TRACE_LIST(Einsum, operands, ({"equation", std::string(eq)}), einsum(eq, operands))
  for (auto& t : operands) check_cpu("einsum", {t});
  return detail::einsum_impl(eq, operands);
}

// The contraction itself, on whichever device the operands share: its steps are public ops
// (views, sums, bmm), so on a GPU they run there (the CUDA backend calls this through
// device_ops::run_library).
Tensor detail::einsum_impl(std::string_view eq, const std::vector<Tensor>& operands, const Tensor* into) {
  KILN_CHECK(!operands.empty(), "einsum", "einsum(): must provide at least one operand");
  for (auto& t : operands)
    KILN_CHECK(t.dtype() == operands[0].dtype(), "einsum", "expected scalar type ", name(operands[0].dtype()),
               " but found ", name(t.dtype()));
  size_t arrow = eq.find("->");
  std::string_view lhs = eq.substr(0, arrow);
  std::vector<std::vector<int>> scanned;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    scanned.push_back(scan_term(lhs.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(scanned.size() == operands.size(), "einsum", "einsum(): more operands were provided than specified in the equation"
             " (equation has ", scanned.size(), " terms, got ", operands.size(), " operands)");
  int64_t max_ell = 0;
  std::vector<int64_t> ell(operands.size(), 0);
  for (size_t i = 0; i < operands.size(); ++i) {
    int64_t explicit_labels = std::count_if(scanned[i].begin(), scanned[i].end(), [](int l) { return l >= 0; });
    bool has_ell = std::find(scanned[i].begin(), scanned[i].end(), -1) != scanned[i].end();
    ell[i] = operands[i].dim() - explicit_labels;
    KILN_CHECK(has_ell ? ell[i] >= 0 : ell[i] == 0, "einsum", "the number of subscripts in the equation (",
               explicit_labels, ") does not match the number of dimensions (", operands[i].dim(), ") for operand ", i,
               has_ell ? "" : " and no ellipsis was given");
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
    auto so = scan_term(eq.substr(arrow + 2));
    out = expand_ellipsis(so, max_ell, max_ell);
    for (int l : out) {
      KILN_CHECK(counts.count(l), "einsum", "einsum(): output subscript ", label_char(l),
                 " does not appear in the equation for any input operand");
      KILN_CHECK(std::count(out.begin(), out.end(), l) == 1, "einsum", "einsum(): output subscript ",
                 label_char(l), " appears more than once in the output");
    }
  } else {
    // implicit output: ellipsis dims, then labels seen exactly once, in alphabetical order
    for (int64_t e = 0; e < max_ell; ++e) out.push_back(kEllipsis + int(e));
    for (auto& [l, c] : counts)
      if (c == 1 && l < kEllipsis) out.push_back(l);
  }
  // labels still needed after operand i: the output's and those of later operands
  auto needed_after = [&](size_t i) {
    std::vector<int> keep = out;
    for (size_t j = i + 1; j < terms.size(); ++j) keep.insert(keep.end(), terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  Term acc = sum_unneeded(terms[0], [&] {
    auto k = needed_after(0);
    if (terms.size() > 1) k.insert(k.end(), terms[1].labels.begin(), terms[1].labels.end());
    return k;
  }());
  for (size_t i = 1; i < terms.size(); ++i) {
    std::vector<int> keep = needed_after(i);
    std::vector<int> keep_b = keep;
    keep_b.insert(keep_b.end(), acc.labels.begin(), acc.labels.end());
    Term b = sum_unneeded(terms[i], keep_b);
    // (the last product, when its labels are the result's in order: nothing follows it then)
    const bool last = i + 1 == terms.size();
    acc = contract(acc, b, keep, last ? into : nullptr, &out);
  }
  acc = sum_unneeded(acc, out);
  std::vector<int64_t> perm;
  for (int l : out) perm.push_back(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin());
  Tensor r = acc.t.permute(perm);
  return r;
}

}  // namespace kiln
