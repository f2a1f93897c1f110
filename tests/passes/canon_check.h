// Helpers of the canonicalization tests (test_canon.cpp, test_canon_simplify.cpp): run a pass
// and check the verifier, idempotence and, on random inputs, that results did not change.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kiln/ir/exec.h"
#include "kiln/ir/graph.h"
#include "kiln/passes/pass.h"
#include "kiln/runtime/factories.h"
#include "check_program.h"

namespace kiln::passes::canon_test {

// Runs the registered pass `name` on g; checks the verifier and idempotence.
inline bool run_pass(const std::string& name, ir::Graph& g) {
  const PassInfo* p = find_pass(name);
  EXPECT_NE(p, nullptr) << name;
  Module m(std::move(g));
  bool changed = p->run(m);
  if (auto e = ir::verify(m.graph)) ADD_FAILURE() << "after " << name << ": " << e->str() << "\n" << ir::print(m.graph);
  std::string once = ir::print(m.graph);
  Module again(clone(m.graph));
  EXPECT_FALSE(p->run(again)) << name << " is not idempotent on\n" << once << "second run:\n" << ir::print(again.graph);
  EXPECT_EQ(ir::print(again.graph), once);
  g = std::move(m.graph);
  return changed;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.nbytes())) == 0;
}

// Runs both graphs on the same random inputs (fresh copies each) and compares every output
// (values, dtype, sizes and strides) and every input afterwards (writes into inputs).
// tol > 0 compares floats allclose-style instead of bitwise.
inline void expect_same_results(const ir::Graph& before, const ir::Graph& after, double tol = 0) {
  manual_seed(1234);
  std::vector<Tensor> inputs;
  for (const ir::Value* v : before.inputs()) inputs.push_back(kiln::testing::random_input(v->type));
  auto copies = [&] {
    std::vector<Tensor> c;
    for (const Tensor& t : inputs) {
      Tensor s = empty_strided(t.sizes(), t.strides(), TensorOptions(t.dtype()));
      s.copy_(t);
      c.push_back(s);
    }
    return c;
  };
  std::vector<Tensor> in0 = copies(), in1 = copies();
  std::vector<Tensor> out0 = ir::execute(before, in0), out1 = ir::execute(after, in1);
  ASSERT_EQ(out0.size(), out1.size());
  auto same = [&](const Tensor& a, const Tensor& b) {
    if (tol == 0 || !is_floating(a.dtype())) return bitwise_equal(a, b);
    if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
    std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i)
      if (std::abs(x[i] - y[i]) > tol * (1 + std::abs(x[i]))) return false;
    return true;
  };
  for (size_t k = 0; k < out0.size(); ++k) {
    EXPECT_TRUE(same(out0[k], out1[k])) << "output " << k;
    EXPECT_EQ(out0[k].strides().vec(), out1[k].strides().vec()) << "output " << k;
  }
  for (size_t k = 0; k < in0.size(); ++k)
    EXPECT_TRUE(bitwise_equal(in0[k], in1[k])) << "input " << k << " after the run";
}

// Parses `text`, runs the pass, checks the result against the semantics of the original and
// returns it printed.
inline std::string check_pass(const std::string& pass, const std::string& text, bool expect_change = true,
                              double tol = 0) {
  ir::Graph g = ir::parse(text);
  if (auto e = ir::verify(g)) ADD_FAILURE() << "test graph: " << e->str();
  ir::Graph original = clone(g);
  EXPECT_EQ(run_pass(pass, g), expect_change) << pass << " on\n" << text;
  if (!expect_change) {
    EXPECT_EQ(ir::print(g), ir::print(original));
  }
  expect_same_results(original, g, tol);
  return ir::print(g);
}

inline size_t count_op(const ir::Graph& g, std::string_view op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += ir::op_info(node->op).name == op;
  return n;
}

// The inplace_chain workload as traced: x.add_(1); x.relu_(); x.clamp_(0, 6); x.mul_(0.5).
inline const char* kInplaceChain =
    "graph @graph0(%a0: f32[1000]{1}) {\n"
    "  %0 = constant() {value=1} : i64[]{} wrapped\n"
    "  %1 = add(%a0, %0) {alpha=1} : f32[1000]{1}\n"
    "  %2 = copy(%a0, %1) : f32[1000]{1}\n"
    "  %3 = relu(%2) : f32[1000]{1}\n"
    "  %4 = copy(%2, %3) : f32[1000]{1}\n"
    "  %5 = constant() {value=0} : i64[]{} wrapped\n"
    "  %6 = constant() {value=6} : i64[]{} wrapped\n"
    "  %7 = clamp(%4, %5, %6) {has_max=true, has_min=true} : f32[1000]{1}\n"
    "  %8 = copy(%4, %7) : f32[1000]{1}\n"
    "  %9 = constant() {value=0.5} : f64[]{} wrapped\n"
    "  %10 = mul(%8, %9) : f32[1000]{1}\n"
    "  %11 = copy(%8, %10) : f32[1000]{1}\n"
    "  return %11\n"
    "}\n";

}  // namespace kiln::passes::canon_test
