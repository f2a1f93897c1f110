// Library ops with fused epilogues on the CPU backend: the matmul-family op runs as the eager op
// and the elementwise work the passes fused after it is compiled as one kernel over its result
// (codegen/src/epilogue.h). Checked against eager across dtypes and operand layouts, with the
// backend's note saying the epilogue was compiled; and the cases the split leaves alone (an
// operand read by the op and by the epilogue) still match eager through the interpreter.
#include "cpu_diff.h"

namespace kiln::cputest {
namespace {

using V = std::vector<Tensor>;

// explain() of `fn` compiled and called once on `in` mentions a compiled epilogue.
bool epilogue_compiled(const Fn& fn, const V& in) {
  auto f = compile([fn](const V& x) { return fn(x); }, cpu_options());
  V a = in;
  f(a);
  V b = in;
  f(b);
  for (const auto& g : f.explain(in).graphs)
    if (g.backend.find("with a compiled epilogue") != std::string::npos) return true;
  return false;
}

Tensor input(DType dt, std::vector<int64_t> sizes, Layout l, uint64_t seed, int call) {
  // values near one keep float16 sums of 17 products inside the tolerance's reach
  return make(dt, std::move(sizes), l, seed * 31 + uint64_t(call), Values::NearOne, Specials::None);
}

// relu(x @ W + b) with a row bias: the bias_relu workload, in every float dtype and int64, with
// W contiguous or transposed, at an odd size (no multiple of the vector width).
TEST(CpuEpilogue, MatmulBiasReluMatchesEager) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64}) {
    for (Layout wl : {Layout::Contiguous, Layout::Transposed}) {
      SCOPED_TRACE(std::string(name(dt)) + ", W " + layout_name(wl));
      Fn fn = [](const V& in) { return V{(in[0].matmul(in[1]) + in[2]).relu()}; };
      Inputs inputs = [&](int call) {
        return V{input(dt, {33, 17}, Layout::Contiguous, 1, call), input(dt, {17, 29}, wl, 2, call),
                 input(dt, {29}, Layout::Contiguous, 3, call)};
      };
      Expect e;
      e.floor = {1e-2, 1e-2};
      if (check(fn, inputs, e) == Outcome::EagerRefused) continue;
      EXPECT_TRUE(epilogue_compiled(fn, inputs(0)));
    }
  }
}

// The op's own result returned as well as the epilogue's: the epilogue stores both.
TEST(CpuEpilogue, ResultAlsoReturned) {
  Fn fn = [](const V& in) {
    Tensor y = in[0].matmul(in[1]);
    return V{y, (y * 0.5).sigmoid()};
  };
  Inputs inputs = [](int call) {
    return V{input(kFloat32, {64, 40}, Layout::Contiguous, 4, call), input(kFloat32, {40, 1023}, Layout::Contiguous, 5, call)};
  };
  check(fn, inputs, Expect{});
  EXPECT_TRUE(epilogue_compiled(fn, inputs(0)));
}

// A batched matmul whose epilogue adds a broadcast [1, N] operand and a full-size one, large
// enough for the epilogue to split across threads.
TEST(CpuEpilogue, BatchedWithBroadcastOperands) {
  Fn fn = [](const V& in) { return V{(in[0].matmul(in[1]) * in[2] - in[3]).tanh()}; };
  Inputs inputs = [](int call) {
    return V{input(kFloat32, {4, 96, 32}, Layout::Contiguous, 6, call),
             input(kFloat32, {4, 32, 200}, Layout::Contiguous, 7, call),
             input(kFloat32, {1, 200}, Layout::Contiguous, 8, call),
             input(kFloat32, {4, 96, 200}, Layout::Transposed, 9, call)};
  };
  check(fn, inputs, Expect{});
  EXPECT_TRUE(epilogue_compiled(fn, inputs(0)));
}

// attention_scores' shape: einsum, a scale, a softmax. The softmax takes the scale over as its
// prologue (the passes' hand_epilogue_over), so the einsum is a library op alone, whose result
// the row-wise kernel reads: explain() names the library op and every other kernel compiled.
TEST(CpuEpilogue, EinsumScaleThenSoftmax) {
  Fn fn = [](const V& in) { return V{(einsum("bhqd,bhkd->bhqk", {in[0], in[1]}) / 8.0).softmax(-1)}; };
  Inputs inputs = [](int call) {
    return V{input(kFloat32, {2, 3, 17, 64}, Layout::Contiguous, 10, call),
             input(kFloat32, {2, 3, 19, 64}, Layout::Contiguous, 11, call)};
  };
  check(fn, inputs, Expect{});
  auto f = compile([fn](const V& x) { return fn(x); }, cpu_options());
  V in = inputs(0);
  f(in);
  f(in);
  Explanation ex = f.explain(in);
  ASSERT_EQ(ex.graphs.size(), 1u);
  EXPECT_NE(ex.graphs[0].backend.find("cpu: 1 of 2 kernels compiled"), std::string::npos) << ex.graphs[0].backend;
  EXPECT_NE(ex.graphs[0].backend.find("; library k0: einsum"), std::string::npos) << ex.graphs[0].backend;
  EXPECT_EQ(ex.graphs[0].backend.find("interpreted"), std::string::npos) << ex.graphs[0].backend;
}

// A library op's result the runner keeps as its buffer (instead of copying it in) is the buffer
// for every later kernel: here one writes into a view of it, another reads it, and the program
// returns it. An op whose result is its operand or a view of it (einsum "ij->ij" of an input) is not
// kept: its result is copied into a buffer of the program's own, so the output does not alias
// the input.
TEST(CpuEpilogue, LibraryResultsKeptAsBuffers) {
  Fn written = [](const V& in) {
    Tensor y = in[0].matmul(in[1]);
    y.narrow(1, 2, 5).fill_(0);
    return V{y, (y * 2).sum(1)};
  };
  Inputs inputs = [](int call) {
    return V{input(kFloat32, {40, 30}, Layout::Contiguous, 13, call), input(kFloat32, {30, 20}, Layout::Contiguous, 14, call)};
  };
  check(written, inputs, Expect{});
  Fn view = [](const V& in) { return V{einsum("ij->ij", {in[0]})}; };
  Inputs one = [](int call) { return V{input(kFloat32, {8, 9}, Layout::Contiguous, 15, call)}; };
  check(view, one, Expect{});
  auto f = compile([view](const V& x) { return view(x); }, cpu_options());
  V in = one(0);
  f(in);
  V out = f(in);
  in[0].fill_(7);
  EXPECT_FALSE(out[0].eq(7).all().item<bool>()) << "the output aliases the input";
}

// An operand the op reads whole and the epilogue reads by index: not split, the whole kernel
// runs on the interpreter, and the results still match.
TEST(CpuEpilogue, OperandSharedWithTheOpIsInterpreted) {
  Fn fn = [](const V& in) { return V{(in[0].matmul(in[0]) + in[0]).relu()}; };
  Inputs inputs = [](int call) { return V{input(kFloat32, {31, 31}, Layout::Contiguous, 12, call)}; };
  Expect e;
  e.compiled = false;
  check(fn, inputs, e);
  EXPECT_FALSE(epilogue_compiled(fn, inputs(0)));
}

}  // namespace
}  // namespace kiln::cputest
