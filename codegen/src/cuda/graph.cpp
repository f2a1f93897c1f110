// CUDA graphs for compiled programs (CudaCompileOptions::graphs, kiln::compile's
// reduce_overhead): the program's launches are captured over buffers that stay put, then every
// call is a copy of the inputs into those buffers and one graph launch.
//
// Outputs: a captured graph always writes the same output buffers, and a caller may still hold
// what an earlier call returned. So the program keeps up to kHeldInstances captures, each over
// output buffers of its own (inputs, temporaries and constants are shared: replays are serialised
// on the device's stream), and hands their output buffers to the caller as they are. A call
// replays the first instance whose outputs nobody holds any more (the buffers' storage has no
// owner but the instance), capturing a new instance when all are held, up to the limit. The
// usual loops then copy nothing: `y = f(x)` with y dropped before the next call replays one
// instance, and `x = f(x)` alternates between two. Beyond the limit (a caller keeping every
// output), a private instance is replayed and its outputs copied into fresh tensors.
// What the captured work allocates and frees within one run (a copy of an operand cuBLAS cannot
// read in place) becomes the graph's own memory: allocation and free nodes, replayed with it.
#include <cstdio>
#include <memory>
#include <mutex>
#include <utility>

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

// One capture of the program, over its own output buffers.
struct Instance {
  std::vector<Tensor> buffers;  // every buffer of the program, fixed
  std::unique_ptr<cuda::Graph> graph;
};

// How many instances may hand their outputs to callers at once.
constexpr size_t kHeldInstances = 2;

struct GraphReplay {
  std::shared_ptr<const passes::KernelProgram> program;
  std::vector<ir::Type> input_types;
  Device device;
  std::mutex mu;                 // one replay at a time: they share the inputs and temporaries
  std::vector<ir::Slot> inputs;  // the fixed inputs the graphs read
  std::vector<Tensor> shared;    // the buffers every instance shares (its outputs are its own)
  std::vector<std::unique_ptr<Instance>> held;  // instances whose outputs go to the caller
  std::unique_ptr<Instance> own;  // the instance whose outputs are copied out, once needed
  bool hands_out = true;          // whether outputs can be handed out (each is an output buffer)
  bool started = false;           // whether the first call (which captures) has run
  std::string failed;  // why a capture failed: the program then runs without a graph

  std::unique_ptr<Instance> capture(const passes::ProgramRunner& runner) {
    auto in = std::make_unique<Instance>();
    in->buffers = shared;
    for (const passes::Buffer& b : program->buffers)  // (allocated before the capture: nothing allocates inside it)
      if (b.kind == passes::BufferKind::Output)
        in->buffers[size_t(b.id)] = empty_strided(b.sizes, b.strides, TensorOptions(b.dtype).device(device));
    in->graph = std::make_unique<cuda::Graph>([&] { runner.run_on(in->buffers, inputs); }, device.index);
    return in;
  }

  // Whether no one but the instance holds any of its output buffers.
  bool unheld(const Instance& in) const {
    for (const passes::Access& a : program->outputs)
      if (program->buffers[size_t(a.buffer)].kind == passes::BufferKind::Output &&
          in.buffers[size_t(a.buffer)].storage().use_count() > 1)
        return false;
    return true;
  }

  // The instance this call replays, and whether its outputs go to the caller as they are;
  // captured here when none is free. {nullptr, false} when a capture fails.
  std::pair<Instance*, bool> pick(const passes::ProgramRunner& runner) {
    try {
      if (hands_out) {
        for (auto& in : held)
          if (unheld(*in)) return {in.get(), true};
        if (held.size() < kHeldInstances) {
          held.push_back(capture(runner));
          return {held.back().get(), true};
        }
      }
      if (!own) own = capture(runner);
      return {own.get(), false};
    } catch (const Error& e) {
      // (a safety net: compile_cuda refuses graphs for what it knows cannot be captured)
      failed = e.what();
      std::fprintf(stderr, "kiln: warning: the program could not be captured as a CUDA graph (%s); it runs without one\n",
                   failed.c_str());
      held.clear();
      own.reset();
      inputs.clear();
      shared.clear();
      return {nullptr, false};
    }
  }

  std::vector<Tensor> run(const passes::ProgramRunner& runner, std::span<const ir::Slot> in) {
    std::lock_guard<std::mutex> lock(mu);
    const int dev = device.index;
    const passes::KernelProgram& p = *program;
    if (!failed.empty()) return runner.run(in);
    if (!started) {
      // The first call runs as usual: it returns its own outputs, and every eager program a
      // library call's steps use (einsum's, cat's copies) is compiled and loaded before the
      // capture, which must not load modules or allocate outside the graph.
      started = true;
      std::vector<Tensor> first = runner.run(in);
      for (const ir::Type& t : input_types) {
        ir::Slot s;
        s.tensor = empty_strided(t.sizes, t.strides, TensorOptions(t.dtype).device(device));
        inputs.push_back(s);
      }
      shared = runner.buffers(inputs);
      for (const passes::Buffer& b : p.buffers)
        if (b.kind == passes::BufferKind::Output) shared[size_t(b.id)] = Tensor();  // (each instance's own)
      for (const passes::Access& a : p.outputs) {
        const passes::BufferKind k = p.buffers[size_t(a.buffer)].kind;
        hands_out = hands_out && (k == passes::BufferKind::Output || k == passes::BufferKind::Input);
      }
      (void)pick(runner);  // (the first instance now: the second call only replays)
      return first;
    }
    auto [instance, handed] = pick(runner);
    if (!instance) return runner.run(in);
    for (size_t i = 0; i < in.size(); ++i)
      if (size_t n = span_bytes(in[i].tensor))
        cuda::copy_on_device(first_byte(inputs[i].tensor), first_byte(in[i].tensor), n, dev);
    instance->graph->launch();
    // Inputs the program writes (x.mul_(2)) get the fixed copy's bytes back.
    for (const passes::Buffer& b : p.buffers)
      if (b.kind == passes::BufferKind::Input && runner.written(b.id))
        if (size_t n = span_bytes(in[size_t(b.input)].tensor))
          cuda::copy_on_device(first_byte(in[size_t(b.input)].tensor), first_byte(inputs[size_t(b.input)].tensor), n, dev);
    // Outputs: views of the instance's buffers, or of fresh copies of them (once per buffer).
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
      const Tensor& fixed = instance->buffers[size_t(a.buffer)];
      if (handed) {
        out.push_back(passes::access_view(fixed, a));
        continue;
      }
      Tensor& f = fresh[size_t(a.buffer)];
      if (!f.defined()) {
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
