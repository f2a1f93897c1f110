// The subscripts of an einsum equation, shared by the eager einsum (runtime/src/einsum.cpp)
// and the IR's type inference (ir/src/infer.cpp), so both read an equation the same way.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::einsum_labels {

// Labels: a-z are 0-25, A-Z 26-51; the dims an ellipsis stands for get kEllipsis + i,
// aligned from the right across operands.
constexpr int kEllipsis = 100;
int label_of(char c);  // -1 for a character that is not a subscript
char label_char(int l);
// Splits one term into labels; -1 marks where "..." stands. Throws kiln::Error ("[einsum] ...")
// for an invalid subscript or ellipsis.
std::vector<int> scan_term(std::string_view term);
// Replaces the -1 of a scanned term by its `ell_dims` ellipsis labels, out of `max_ell`.
std::vector<int> expand_ellipsis(const std::vector<int>& scanned, int64_t ell_dims, int64_t max_ell);

}  // namespace kiln::einsum_labels
