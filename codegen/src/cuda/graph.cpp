// CUDA graphs for compiled programs (CudaCompileOptions::graphs, kiln::compile's
// reduce_overhead): the program's launches are captured once over buffers that stay put, then
// every call is a copy of the inputs into those buffers, one graph launch, and a copy of the
// outputs out of them. The copies out make each call's outputs its own: the next replay
// writes the same buffers, and never a tensor the caller holds. What the captured work
// allocates and frees within one run (a cuBLAS product's result, a copy of an operand) becomes
// the graph's own memory: allocation and free nodes, replayed with it.
#include <cstdio>
#include <mutex>

#include "graph.h"
#include "module.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"

namespace kiln::codegen {

namespace {

// Bytes from a view's first element to one past its last (strides are never negative here).
size_t span_bytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return size_t(last + 1) * t.element_size();
}

struct GraphReplay {
  std::shared_ptr<const passes::KernelProgram> program;
  std::vector<ir::Type> input_types;
  Device device;
  std::mutex mu;                  // one replay at a time: they share the buffers
  std::vector<ir::Slot> inputs;   // the fixed inputs the graph reads
  std::vector<Tensor> buffers;    // every buffer of the program, fixed
  std::unique_ptr<cuda::Graph> graph;
  std::string failed;  // why the capture failed: the program then runs without a graph

  std::vector<Tensor> run(const passes::ProgramRunner& runner, std::span<const ir::Slot> in) {
    std::lock_guard<std::mutex> lock(mu);
    const int dev = device.index;
    if (!failed.empty()) return runner.run(in);
    if (!graph) {
      // The first call runs as usual: it returns its own outputs, and every eager program a
      // library call's steps use (einsum's, cat's copies) is compiled and loaded before the
      // capture, which must not load modules or allocate outside the graph.
      std::vector<Tensor> first = runner.run(in);
      // The fixed buffers (allocated before the capture: nothing allocates inside it).
      for (const ir::Type& t : input_types) {
        ir::Slot s;
        s.tensor = empty_strided(t.sizes, t.strides, TensorOptions(t.dtype).device(device));
        inputs.push_back(s);
      }
      buffers = runner.buffers(inputs);
      try {
        graph = std::make_unique<cuda::Graph>([&] { runner.run_on(buffers, inputs); }, dev);
      } catch (const Error& e) {
        // (a safety net: compile_cuda refuses graphs for what it knows cannot be captured)
        failed = e.what();
        std::fprintf(stderr, "kiln: warning: the program could not be captured as a CUDA graph (%s); it runs without one\n",
                     failed.c_str());
        inputs.clear();
        buffers.clear();
      }
      return first;
    }
    for (size_t i = 0; i < in.size(); ++i)
      if (size_t n = span_bytes(in[i].tensor))
        cuda::copy_on_device(first_byte(inputs[i].tensor), first_byte(in[i].tensor), n, dev);
    graph->launch();
    const passes::KernelProgram& p = *program;
    // Inputs the program writes (x.mul_(2)) get the fixed copy's bytes back.
    for (const passes::Buffer& b : p.buffers)
      if (b.kind == passes::BufferKind::Input && runner.written(b.id))
        if (size_t n = span_bytes(in[size_t(b.input)].tensor))
          cuda::copy_on_device(first_byte(in[size_t(b.input)].tensor), first_byte(inputs[size_t(b.input)].tensor), n, dev);
    // Outputs: a fresh copy of each buffer they view (once per buffer), the same views of it.
    std::vector<Tensor> fresh(p.buffers.size());
    std::vector<Tensor> out;
    for (const passes::Access& a : p.outputs) {
      const passes::Buffer& b = p.buffers[size_t(a.buffer)];
      if (b.kind == passes::BufferKind::Input) {
        const Tensor& whole = in[size_t(b.input)].tensor;
        Tensor v = passes::access_view(whole, a);
        bool same = v.sizes() == whole.sizes() && v.strides() == whole.strides() && v.storage_offset() == whole.storage_offset();
        out.push_back(same ? whole : v);
        continue;
      }
      Tensor& f = fresh[size_t(a.buffer)];
      if (!f.defined()) {
        const Tensor& fixed = buffers[size_t(a.buffer)];
        f = empty_strided(fixed.sizes(), fixed.strides(), TensorOptions(fixed.dtype()).device(device));
        if (size_t n = span_bytes(fixed)) cuda::copy_on_device(first_byte(f), first_byte(fixed), n, dev);
      }
      out.push_back(passes::access_view(f, a));
    }
    return out;
  }
};

}  // namespace

std::string cuda_graph_refusal(const passes::KernelProgram& p, const std::vector<ir::Type>& input_types,
                               const CompileStats& stats, bool any_checks, const std::string& library_refusal) {
  if (!stats.interpreted.empty()) return "a kernel runs on the host (" + stats.interpreted[0] + ")";
  // (cuBLAS calls are captured, with the allocations of their results as graph memory nodes)
  if (!library_refusal.empty()) return library_refusal;
  if (any_checks) return "a kernel's check (integer division by zero) is read by the host after it";
  for (const ir::Type& t : input_types)
    if (t.is_scalar()) return "a host number is an input (a graph holds the values it was captured with)";
  for (const passes::Access& a : p.outputs)
    if (p.buffers[size_t(a.buffer)].kind == passes::BufferKind::Constant) return "an output is a constant";
  return "";
}

CompiledProgram::Replay cuda_graph_replay(std::shared_ptr<const passes::KernelProgram> program,
                                          std::vector<ir::Type> input_types, Device device) {
  auto r = std::make_shared<GraphReplay>();
  r->program = std::move(program);
  r->input_types = std::move(input_types);
  r->device = device;
  return [r](const passes::ProgramRunner& runner, std::span<const ir::Slot> in) { return r->run(runner, in); };
}

}  // namespace kiln::codegen
