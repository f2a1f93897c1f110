// Eager ops on GPU tensors (kiln/runtime/device_ops.h): each op call becomes a one-node graph
// (its operands as inputs, host numbers as scalar inputs so that x * 0.5 and x * 0.25 share a
// kernel), optimized and compiled by compile_cuda, and cached by the op, its attributes and
// its operands' dtypes, devices, sizes and strides (the most recent kMaxPrograms of them). A
// cache hit costs a hash lookup and the launch. The kernels are size-generic, so a new size of
// an op seen before (same dtypes, same layout class) reruns the passes and finds its kernel's
// module loaded already: no NVRTC compile, no module load.
// Library ops (products, einsum, cat, gather, index_select: library.h) are calls of their own
// after the op's type checks.
#include <deque>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "eager.h"
#include "library.h"
#include "kiln/exec/backend.h"
#include "kiln/codegen/cuda.h"
#include "kiln/ir/infer.h"
#include "kiln/passes/pass.h"
#include "kiln/runtime/device_ops.h"
#include "kiln/runtime/error.h"

namespace kiln::codegen {

namespace {

std::string signature(OpId op, std::span<const trace::Operand> in, const std::vector<Attr>& attrs) {
  std::ostringstream o;
  o << int(op);
  for (const Attr& a : attrs) o << ' ' << a.name << '=' << ir::attr_str(a.value);
  for (const trace::Operand& x : in) {
    if (!x.tensor) {
      o << (x.scalar.is_bool() ? " b" : x.scalar.is_integral() ? " i" : " f");
      continue;
    }
    const Tensor& t = *x.tensor;
    o << " t" << int(t.dtype()) << '@' << t.device().str() << '[';
    for (int64_t d = 0; d < t.dim(); ++d) o << t.sizes()[size_t(d)] << ':' << t.strides()[size_t(d)] << ',';
    o << ']';
  }
  return o.str();
}

// An inference error as the op's own: "[infer] add: what" becomes "[add] what".
[[noreturn]] void rethrow_as_op(const Error& e) {
  std::string m = e.what();
  const std::string prefix = "[infer] ";
  size_t colon = m.find(": ", prefix.size());
  if (m.rfind(prefix, 0) == 0 && colon != std::string::npos)
    throw Error("[" + m.substr(prefix.size(), colon - prefix.size()) + "] " + m.substr(colon + 2));
  throw e;
}

std::vector<ir::Type> operand_types(std::span<const trace::Operand> in) {
  std::vector<ir::Type> types;
  for (const trace::Operand& x : in) {
    if (x.tensor) {
      const Tensor& t = *x.tensor;
      types.push_back(ir::Type::tensor(t.dtype(), t.sizes().vec(), t.strides().vec(), t.device()));
    } else {
      const Scalar& s = x.scalar;
      types.push_back(ir::Type::scalar(s.is_bool() ? kBool : s.is_integral() ? kInt64 : kFloat64));
    }
  }
  return types;
}

// The op's result type; a shape, dtype or device error is raised as the op's own.
ir::Type result_type(OpId op, const std::vector<ir::Type>& types, const std::vector<Attr>& attrs) {
  std::vector<ir::Type> outs;
  try {
    outs = ir::infer_types(op, types, attrs);
  } catch (const Error& e) {
    rethrow_as_op(e);
  }
  KILN_CHECK(outs.size() == 1, "cuda", "op ", int(op), " has ", outs.size(), " results; eager ops have one");
  return outs[0];
}

std::shared_ptr<exec::CompiledProgram> build(OpId op, std::span<const trace::Operand> in, const std::vector<Attr>& attrs) {
  ir::Graph g("eager");
  std::vector<ir::Value*> values;
  std::vector<ir::Type> types = operand_types(in);
  for (size_t i = 0; i < types.size(); ++i) values.push_back(g.add_input("x" + std::to_string(i), types[i]));
  ir::Node* n = g.add_node(op, values, attrs, {result_type(op, types, attrs)});
  g.set_outputs({n->outputs[0]});
  // On the device of its GPU operands (exec::graph_device), with size-generic kernels: a new
  // size of an op seen before loads the kernel it already has.
  auto compiled = exec::compile_graph(g, {.generic = true});
  compiled->set_label(std::string("eager ") + std::string(ir::op_info(op).name));
  return compiled;
}

struct Programs {
  // (a program is small, but a process that sees ever new sizes must not keep them all)
  static constexpr size_t kMaxPrograms = 4096;
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<exec::CompiledProgram>> by_signature;
  std::deque<std::string> order;  // keys, oldest first
};
Programs& programs() {
  static auto* p = new Programs();  // (never destroyed: device memory outlives static destruction order)
  return *p;
}

}  // namespace

size_t cuda_eager_programs() {
  std::lock_guard<std::mutex> lock(programs().mu);
  return programs().by_signature.size();
}

Tensor run_eager_on_cuda(OpId op, std::span<const trace::Operand> in, std::vector<Attr> attrs) {
  if (cuda_library(op)) {
    // A library op is its own call on the device: no program around it, no copy of its result.
    std::vector<Tensor> operands;
    for (const trace::Operand& x : in)
      if (x.tensor) operands.push_back(*x.tensor);
    if (operands.size() == in.size()) return run_cuda_library(op, operands, attrs, result_type(op, operand_types(in), attrs));
  }
  Programs& ps = programs();
  std::mutex& mu = ps.mu;
  auto& cache = ps.by_signature;
  std::string key = signature(op, in, attrs);
  std::shared_ptr<exec::CompiledProgram> program;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) program = it->second;
  }
  if (!program) {
    program = build(op, in, attrs);  // (outside the lock: compiling may take a while)
    std::lock_guard<std::mutex> lock(mu);
    auto [it, fresh] = cache.emplace(key, program);
    program = it->second;
    if (fresh) {
      ps.order.push_back(key);
      if (ps.order.size() > Programs::kMaxPrograms) {
        cache.erase(ps.order.front());
        ps.order.pop_front();
      }
    }
  }
  std::vector<ir::Slot> slots(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].tensor) {
      slots[i].tensor = *in[i].tensor;
    } else {
      slots[i].scalar = in[i].scalar;
      slots[i].is_scalar = true;
    }
  }
  return program->run(slots)[0];
}

}  // namespace kiln::codegen
