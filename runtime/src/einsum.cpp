// einsum on tensors: the steps of kiln/runtime/einsum_plan.h (diagonals for labels repeated
// within an operand, sums of labels no one else needs, one bmm per operand), done with public ops.
#include <algorithm>
#include <map>

#include "kiln/runtime/einsum_plan.h"
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

// The steps of einsum_plan.h on tensors: views, sums and batched products, each a public op,
// so that on a GPU they run there.
struct TensorOps {
  const Tensor* into;  // where the last product may be written (einsum_impl's `into`)
  std::vector<int> scan_term(std::string_view term) { return einsum_labels::scan_term(term); }
  int64_t rank(const Tensor& x) { return x.dim(); }
  int64_t size(const Tensor& x, size_t d) { return x.sizes()[d]; }
  Tensor diagonal(const Tensor& x, size_t i, size_t j) { return x.diagonal(0, int64_t(i), int64_t(j)); }
  Tensor sum(const Tensor& x, const std::vector<int64_t>& dims) { return kiln::sum(x, dims, false); }
  Tensor arrange(const Tensor& x, const std::vector<int64_t>& perm, const std::vector<int64_t>& full,
                 const std::vector<int64_t>& flat) {
    return x.permute(perm).expand(full).reshape(flat);
  }
  Tensor bmm(const Tensor& a, const Tensor& b, bool last) {
    return into && last ? detail::bmm_into(a, b, *into) : kiln::bmm(a, b);
  }
  Tensor view(const Tensor& x, const std::vector<int64_t>& sizes) { return x.view(sizes); }
  Tensor permute(const Tensor& x, const std::vector<int64_t>& perm) { return x.permute(perm); }
  template <typename... P>
  [[noreturn]] void fail(const P&... parts) {
    KILN_FAIL("einsum", parts...);
  }
};

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
  TensorOps ops{into};
  return einsum_labels::run_einsum(eq, operands, ops);
}

}  // namespace kiln
