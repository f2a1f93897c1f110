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
//
// Inputs: a capture over fixed input buffers costs every call a device copy of each input into
// them (on an H100, graph mode took 1.9-3x the time of plain launches on the gpu tier's inputs
// of 256 MB to 2 GB). A caller that calls again with the same input tensors (or tensors at the
// same addresses: the caching allocator hands the same blocks back) is better served by a
// capture bound to those addresses: the graph reads the caller's inputs where they are and
// writes in-place updates straight into them, with no copies. So when a call's input addresses
// look stable, it replays a capture bound to them, or captures one (up to kBoundInstances;
// beyond, it recaptures one whose outputs nobody holds, over the same output buffers); other
// calls copy as before. Stable: the addresses of one of the last kRecentCalls calls, or each
// input where the last call had it or in an output buffer of a capture (`x = f(x)`: two bound
// captures then take turns, each reading the other's output). A caller whose addresses keep
// moving would recapture on every call, so binding stops after kRebindsAllowed recaptures that
// found no more replays than recaptures.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <mutex>
#include <utility>

#include "graph.h"
#include "module.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/profile.h"

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
  std::vector<Tensor> buffers;  // every buffer of the program, fixed (a bound capture's inputs: none)
  std::unique_ptr<cuda::Graph> graph;
  std::vector<const char*> bound;  // the caller's input addresses it reads (empty: the fixed inputs)
};

// How many instances over the fixed inputs may hand their outputs to callers at once.
constexpr size_t kHeldInstances = 2;
// Captures bound to a caller's input addresses, and how many calls back an address set counts as
// seen again.
constexpr size_t kBoundInstances = 2;
constexpr size_t kRecentCalls = 4;
constexpr size_t kRebindsAllowed = 8;

// The first byte of every tensor input (a graph's inputs are all tensors: cuda_graph_refusal).
std::vector<const char*> addresses(std::span<const ir::Slot> in) {
  std::vector<const char*> a;
  for (const ir::Slot& s : in) a.push_back(s.tensor.defined() ? first_byte(s.tensor) : nullptr);
  return a;
}

struct GraphReplay {
  std::shared_ptr<const passes::KernelProgram> program;
  std::vector<ir::Type> input_types;
  Device device;
  std::mutex mu;                 // one replay at a time: they share the inputs and temporaries
  std::vector<ir::Slot> inputs;  // the fixed inputs the graphs read
  std::vector<Tensor> shared;    // the buffers every instance shares (its outputs are its own)
  std::vector<std::unique_ptr<Instance>> held;  // instances whose outputs go to the caller
  std::unique_ptr<Instance> own;  // the instance whose outputs are copied out, once needed
  std::vector<std::unique_ptr<Instance>> bound;      // captures over callers' input addresses
  std::vector<std::vector<const char*>> recent;      // the last calls' input addresses
  size_t rebinds = 0, bound_replays = 0;
  bool binds = true;              // whether calls may replay captures bound to their inputs
  bool hands_out = true;          // whether outputs can be handed out (each is an output buffer)
  bool started = false;           // whether the first call (which captures) has run
  std::string failed;  // why a capture failed: the program then runs without a graph
  int64_t traffic = -1;  // the kernels' traffic in all, for the kernel profile (once asked for)

  // A capture over the fixed inputs, or with `call` over the caller's inputs where they are
  // (references to them are dropped after it: the graph keeps their addresses only); over new
  // output buffers, or `outputs` (a recapture's, which keep their addresses).
  std::unique_ptr<Instance> capture(const exec::ProgramRunner& runner, std::span<const ir::Slot> call = {},
                                    const std::vector<Tensor>* outputs = nullptr) {
    auto in = std::make_unique<Instance>();
    in->buffers = shared;
    for (const passes::Buffer& b : program->buffers) {  // (allocated before the capture: nothing allocates inside it)
      if (b.kind == passes::BufferKind::Output)
        in->buffers[size_t(b.id)] = outputs ? (*outputs)[size_t(b.id)]
                                            : empty_strided(b.sizes, b.strides, TensorOptions(b.dtype).device(device));
      if (b.kind == passes::BufferKind::Input && !call.empty()) in->buffers[size_t(b.id)] = call[size_t(b.input)].tensor;
    }
    const std::span<const ir::Slot> reads = call.empty() ? std::span<const ir::Slot>(inputs) : call;
    in->graph = std::make_unique<cuda::Graph>([&] { runner.run_on(in->buffers, reads); }, device.index);
    if (!call.empty()) {
      in->bound = addresses(call);
      for (const passes::Buffer& b : program->buffers)
        if (b.kind == passes::BufferKind::Input) in->buffers[size_t(b.id)] = Tensor();
    }
    return in;
  }

  // A capture bound to the call's input addresses, when the caller has called with them lately:
  // one bound to them already, or a new or recaptured one. nullptr: copy into the fixed inputs.
  Instance* pick_bound(const exec::ProgramRunner& runner, std::span<const ir::Slot> call) {
    const std::vector<const char*> now = addresses(call);
    bool seen = std::find(recent.begin(), recent.end(), now) != recent.end();
    if (!seen && !recent.empty()) {
      seen = true;
      for (size_t i = 0; i < now.size() && seen; ++i) seen = now[i] == recent.back()[i] || ours(now[i]);
    }
    recent.push_back(now);
    if (recent.size() > kRecentCalls) recent.erase(recent.begin());
    for (auto& in : bound)
      if (in->bound == now && unheld(*in)) return ++bound_replays, in.get();
    if (!seen) return nullptr;
    if (rebinds >= kRebindsAllowed && rebinds >= bound_replays) {
      binds = false;  // (the addresses keep moving: copying is cheaper than capturing every call)
      bound.clear();
      return nullptr;
    }
    ++rebinds;
    if (bound.size() < kBoundInstances) {
      bound.push_back(capture(runner, call));
      return bound.back().get();
    }
    for (auto& in : bound)
      if (unheld(*in)) {
        std::vector<Tensor> outputs = std::move(in->buffers);
        in.reset();  // (its graph and memory go before the new capture's)
        in = capture(runner, call, &outputs);
        return in.get();
      }
    return nullptr;
  }

  // Whether `at` is the first byte of one of the captures' output buffers.
  bool ours(const char* at) const {
    auto has = [&](const Instance* in) {
      for (const passes::Buffer& b : program->buffers)
        if (b.kind == passes::BufferKind::Output && in->buffers[size_t(b.id)].defined() &&
            first_byte(in->buffers[size_t(b.id)]) == at)
          return true;
      return false;
    };
    for (const auto& in : held)
      if (has(in.get())) return true;
    for (const auto& in : bound)
      if (has(in.get())) return true;
    return false;
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
  std::pair<Instance*, bool> pick(const exec::ProgramRunner& runner, std::span<const ir::Slot> call) {
    try {
      if (hands_out && binds && !call.empty())
        if (Instance* in = pick_bound(runner, call)) return {in, true};
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
      bound.clear();
      inputs.clear();
      shared.clear();
      return {nullptr, false};
    }
  }

  std::vector<Tensor> run(const exec::ProgramRunner& runner, std::span<const ir::Slot> in) {
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
      (void)pick(runner, {});  // (the first instance now: the second call only replays)
      recent.push_back(addresses(in));
      return first;
    }
    auto [instance, handed] = pick(runner, in);
    if (!instance) return runner.run(in);
    const bool copies = instance->bound.empty();  // (a bound capture reads and writes the caller's inputs)
    for (size_t i = 0; i < in.size() && copies; ++i)
      if (size_t n = span_bytes(in[i].tensor))
        cuda::copy_on_device(first_byte(inputs[i].tensor), first_byte(in[i].tensor), n, dev);
    profile::Scope span(device);  // (the graph's kernels as one record)
    instance->graph->launch();
    if (span.on()) {
      if (traffic < 0) {
        traffic = 0;
        for (const passes::Kernel& k : p.kernels) traffic += passes::traffic_bytes(p, k);
      }
      span.finish((runner.label().empty() ? "" : runner.label() + ": ") + "CUDA graph of " +
                      std::to_string(p.kernels.size()) + " kernel" + (p.kernels.size() == 1 ? "" : "s"),
                  traffic);
    }
    // Inputs the program writes (x.mul_(2)) get the fixed copy's bytes back.
    for (const passes::Buffer& b : p.buffers)
      if (copies && b.kind == passes::BufferKind::Input && runner.written(b.id))
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
                               const exec::CompileStats& stats, bool any_checks, const std::string& library_refusal) {
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

exec::CompiledProgram::Replay cuda_graph_replay(std::shared_ptr<const passes::KernelProgram> program,
                                          std::vector<ir::Type> input_types, Device device) {
  auto r = std::make_shared<GraphReplay>();
  r->program = std::move(program);
  r->input_types = std::move(input_types);
  r->device = device;
  return [r](const exec::ProgramRunner& runner, std::span<const ir::Slot> in) { return r->run(runner, in); };
}

}  // namespace kiln::codegen
