// Shared by the pass tests: random inputs for a graph's input types, and the check that a
// kernel program computes what the unoptimised graph computes.
#pragma once
#include <gtest/gtest.h>

#include "../common/close.h"
#include <kiln/ir/exec.h>
#include <kiln/kiln.h>
#include <kiln/exec/runner.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>

#include <functional>
#include <string>
#include <vector>

namespace kiln::testing {

// A random tensor of type t (normal floats, small integers, random bools), with t's strides.
inline Tensor random_input(const ir::Type& t) {
  Tensor x;
  if (is_floating(t.dtype))
    x = randn(t.sizes, TensorOptions(t.dtype));
  else if (t.dtype == DType::Bool)
    x = randint(0, 2, t.sizes).to(DType::Bool);
  else
    x = randint(t.dtype == DType::UInt8 ? 0 : -5, 6, t.sizes).to(t.dtype);
  if (t.strides == shape::contiguous_strides(t.sizes)) return x;
  Tensor s = empty_strided(t.sizes, t.strides, TensorOptions(t.dtype));
  s.copy_(x);
  return s;
}

// Fresh random values of each of a graph's inputs (host numbers: a fixed value of their kind).
inline std::vector<ir::Slot> random_inputs(const ir::Graph& g, uint64_t seed) {
  manual_seed(seed);
  std::vector<ir::Slot> in;
  for (const ir::Value* v : g.inputs()) {
    ir::Slot s;
    const ir::Type& t = v->type;
    if (t.is_scalar()) {
      s.is_scalar = true;
      s.scalar = is_floating(t.dtype) ? Scalar(1.25) : Scalar(int64_t(3));
    } else {
      s.tensor = random_input(t);
    }
    in.push_back(s);
  }
  return in;
}

inline std::vector<ir::Slot> clone_slots(const std::vector<ir::Slot>& in) {
  std::vector<ir::Slot> out = in;
  for (ir::Slot& s : out)
    if (!s.is_scalar) {
      Tensor c = empty_strided(s.tensor.sizes(), s.tensor.strides(), TensorOptions(s.tensor.dtype()));
      c.copy_(s.tensor);
      s.tensor = c;
    }
  return out;
}

// Whether a backend's reason for leaving a kernel to the interpreter is one it gives by design
// (a library op, a cond), not a kernel it could not compile.
inline bool interpreted_by_design(const std::string& why) {
  return why.find("opaque") != std::string::npos || why.find("control") != std::string::npos ||
         why.find("cond") != std::string::npos;
}

// Runs `g` on the reference executor and `run` on the same random inputs (its own copy, which it
// may write into: inputs written in place are compared too). `run` is a kernel program on the
// interpreter, or compiled by a backend.
using ProgramRun = std::function<std::vector<Tensor>(std::vector<ir::Slot>& inputs)>;
inline void expect_run_matches(const ir::Graph& g, const ProgramRun& run, uint64_t seed, const std::string& what,
                               const std::function<std::string()>& program_text) {
  auto in = random_inputs(g, seed);
  auto in_ref = clone_slots(in), in_got = clone_slots(in);
  std::vector<ir::Slot> want = ir::Executable(g).run_slots(in_ref);
  std::vector<Tensor> got;
  try {
    got = run(in_got);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": the run threw: " << e.what() << "\n" << ir::print(g) << program_text();
    return;
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(close(got[i], want[i].tensor)) << what << ": output " << i << "\n" << ir::print(g) << program_text();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].is_scalar) continue;
    EXPECT_TRUE(close(in_got[i].tensor, in_ref[i].tensor)) << what << ": input " << i << " after the run\n"
                                                           << ir::print(g) << program_text();
  }
}

// The kernel program `p` of `g` on the interpreter.
inline void expect_program_matches(const ir::Graph& g, const passes::KernelProgram& p, uint64_t seed,
                                   const std::string& what) {
  if (auto e = passes::verify_program(p)) {
    ADD_FAILURE() << what << ": kernel program does not verify: " << *e << "\n" << passes::print(p);
    return;
  }
  expect_run_matches(
      g, [&](std::vector<ir::Slot>& in) { return exec::ProgramRunner(p).run(in); }, seed, what,
      [&] { return passes::print(p); });
}

}  // namespace kiln::testing
