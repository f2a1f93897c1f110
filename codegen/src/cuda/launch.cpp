// Compiling a kernel program for a GPU (compile_cuda): each rendered kernel loaded as a module
// (its CUBIN from the caches or NVRTC; CUDA source on the emulated driver) and launched on the
// device's stream over the program's device buffers, which the kernel program runner sets up.
// Library ops (products, einsum, cat, gather, index_select) run on the device as calls
// (library.h), other opaque ops on the host on copies of their operands; a fused epilogue runs
// on the GPU either way.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>

#include "../epilogue.h"
#include "eager.h"
#include "graph.h"
#include "library.h"
#include "module.h"
#include "kiln/codegen/cuda.h"
#include "kiln/ir/exec.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/device_ops.h"
#include "kiln/runtime/error.h"

namespace kiln::codegen {

void name_by_content(CudaKernel& k) {
  auto replace_all = [](std::string& s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  };
  std::string neutral = k.body;
  replace_all(neutral, k.name, "kiln_kernel");
  std::string name = "kiln_" + KeyBuilder().add(neutral).finish().hex().substr(0, 20);
  replace_all(k.body, k.name, name);
  if (!k.finish.empty()) k.finish = name + k.finish.substr(k.name.size());
  k.name = name;
}

namespace {
// Loaded modules, one per kernel and device, for the life of the process.
struct Modules {
  std::mutex mu;
  std::map<std::pair<std::string, int>, std::shared_ptr<cuda::Module>> by_key;
};
Modules& loaded_modules() {
  // (never destroyed: unloading modules during static destruction would race the driver's own)
  static auto* m = new Modules();
  return *m;
}
}  // namespace

size_t cuda_kernel_modules() {
  Modules& m = loaded_modules();
  std::lock_guard<std::mutex> lock(m.mu);
  return m.by_key.size();
}

LoadedKernel load_kernel(const CudaKernel& k, int device, int arch) {
  auto& [mu, modules] = loaded_modules();
  const bool emulated = cuda::emulated();
  LoadedKernel out;
  std::string key = emulated ? "emulated " + k.name : cuda_kernel_key(k, arch).hex();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = modules.find({key, device});
    if (it != modules.end()) out.module = it->second;
  }
  if (!out.module) {
    // The emulated driver takes CUDA C++ (it compiles the host entry points); a GPU a CUBIN.
    out.from = CudaBinary::From::Compiled;
    std::string image = emulated ? k.source() : [&] {
      CudaBinary b = cuda_cubin(k, arch);
      out.from = b.from;
      return std::move(b.cubin);
    }();
    auto m = std::make_shared<cuda::Module>(image, device);
    std::lock_guard<std::mutex> lock(mu);
    out.module = modules.emplace(std::pair{key, device}, std::move(m)).first->second;
  }
  out.main = out.module->function(k.name);
  if (!k.finish.empty()) out.finish = out.module->function(k.finish);
  return out;
}

namespace {

// The status word of kernels without checks: written never, read never, one per device.
void* sink_word(int device) {
  static std::mutex mu;
  static std::map<int, void*> words;
  std::lock_guard<std::mutex> lock(mu);
  void*& w = words[device];
  if (!w) w = cuda::allocate(sizeof(uint64_t), device);
  return w;
}

struct Launch {
  CudaKernel k;
  LoadedKernel fn;
  CudaLaunch dims;
  int device = 0;
  // Split and ColumnSplit under a CUDA graph: slots allocated once, when the graph is accepted
  // (a capture must not allocate); otherwise (empty) each launch allocates its own, so
  // concurrent runs never share.
  std::shared_ptr<std::unique_ptr<DeviceScratch>> fixed_parts = std::make_shared<std::unique_ptr<DeviceScratch>>();
  void* sink = nullptr;  // the status word of a kernel without checks (allocated when compiled, not in a capture)

  size_t parts_bytes() const { return cuda_parts_bytes(k, dims); }

  void operator()(std::span<const Tensor> buffers, std::span<const ir::Slot> inputs, const Tensor* first = nullptr) const {
    std::vector<uint64_t> v = cuda_operand_params(k, buffers, inputs, first);
    const bool checked = !k.checks.empty();
    std::optional<DeviceScratch> status;
    if (checked) {
      status.emplace(sizeof(uint64_t), device);
      cuda::fill_bytes(status->p, 0, sizeof(uint64_t), device);
    }
    v.push_back(uint64_t(reinterpret_cast<uintptr_t>(checked ? status->p : sink)));
    auto params = [&] {
      std::vector<void*> p;
      for (uint64_t& x : v) p.push_back(&x);
      return p;
    };
    if (dims.parts) {  // two steps: both take the slots, then their count
      std::optional<DeviceScratch> own;
      const DeviceScratch* fixed = fixed_parts->get();
      if (!fixed) own.emplace(parts_bytes(), device);
      v.push_back(uint64_t(reinterpret_cast<uintptr_t>(fixed ? fixed->p : own->p)));
      v.push_back(dims.parts);
      cuda::launch(fn.main, dims.grid, dims.block, params().data(), device);
      cuda::launch(fn.finish, dims.finish_grid, dims.block, params().data(), device);
    } else {
      cuda::launch(fn.main, dims.grid, dims.block, params().data(), device);
    }
    if (!checked) return;
    // A kernel with checks (integer division) is a point where the host waits: eager raises
    // ZeroDivisionError at this op, and so does the compiled program.
    uint64_t word = 0;
    cuda::copy_to_host(&word, status->p, sizeof word, device);
    cuda::synchronize(device);
    if (word == 0) [[likely]]
      return;
    size_t bit = size_t(std::countr_zero(word));
    KILN_CHECK(bit < k.checks.size(), "codegen", "kernel ", k.name, " reported an unknown check (status ", word, ")");
    KILN_FAIL(k.checks[bit].first, k.checks[bit].second);
  }
};

// A library op run on the device (library.h: cuBLAS, einsum's steps, cat's copies, the gather
// kernel): a one-node graph whose inputs are kernel loads.
struct LibraryCall {
  OpId op = OpId::Matmul;
  std::vector<Attr> attrs;
  ir::Type result;
  std::vector<int> loads;  // per operand of the op: the kernel load it reads
  // Why the call cannot be captured in a CUDA graph ("" when it can): work on the host.
  std::string graph_refusal;

  std::vector<Tensor> operands(const passes::Kernel& k, std::span<const Tensor> buffers) const {
    std::vector<Tensor> out;
    for (int j : loads) {
      const passes::Access& a = k.loads[size_t(j)];
      out.push_back(passes::access_view(buffers[size_t(a.buffer)], a));
    }
    return out;
  }
  // The result as a tensor of its own (for an epilogue to read).
  Tensor operator()(const passes::Kernel& k, std::span<const Tensor> buffers) const {
    return run_cuda_library(op, operands(k, buffers), attrs, result);
  }
};

// The library call `g` makes when it is one op with a device implementation over tensors read
// from kernel loads (`load_of_input[i]`: the load graph input i is); nullopt otherwise.
std::optional<LibraryCall> library_call(const ir::Graph& g, const passes::Kernel& k, std::span<const int> load_of_input) {
  if (g.nodes().size() != 1 || g.outputs().size() != 1) return std::nullopt;
  const ir::Node& n = *g.nodes()[0];
  if (!cuda_library(n.op) || g.outputs()[0] != n.outputs[0]) return std::nullopt;
  LibraryCall c{n.op, n.attrs, n.outputs[0]->type, {}, cuda_library_graph_refusal(n.op, n.outputs[0]->type.dtype)};
  for (const ir::Value* v : n.inputs) {
    auto it = std::find(g.inputs().begin(), g.inputs().end(), v);
    if (it == g.inputs().end()) return std::nullopt;
    int load = load_of_input[size_t(it - g.inputs().begin())];
    if (k.loads[size_t(load)].buffer < 0) return std::nullopt;  // (a host number: not a tensor)
    c.loads.push_back(load);
  }
  return c;
}

// An opaque kernel that is a library call alone: its result written through the kernel's store.
struct LibraryLaunch {
  const passes::Kernel* kernel = nullptr;
  LibraryCall call;

  void operator()(std::span<const Tensor> buffers, std::span<const ir::Slot>) const {
    const passes::Access& s = kernel->stores[0];
    run_cuda_library_into(call.op, call.operands(*kernel, buffers), call.attrs,
                          passes::access_view(buffers[size_t(s.buffer)], s));
  }
};

// An opaque kernel split into its library op and the rendered epilogue: the op runs on the
// device (`call`) or, for ops without a device implementation, on the host's eager kernels on
// copies of its operands; the epilogue reads its result on the device.
struct SplitLaunch {
  const passes::Kernel* kernel = nullptr;
  std::shared_ptr<EpilogueSplit> split;
  std::shared_ptr<ir::Executable> op;
  std::optional<LibraryCall> call;
  Launch epilogue;

  void operator()(std::span<const Tensor> buffers, std::span<const ir::Slot> inputs) const {
    if (call) {
      Tensor result = (*call)(*kernel, buffers).contiguous();
      epilogue(buffers, inputs, &result);
      return;
    }
    std::vector<ir::Slot> in(split->op_loads.size());
    for (size_t j = 0; j < in.size(); ++j) {
      const passes::Access& a = kernel->loads[size_t(split->op_loads[j])];
      if (a.buffer < 0) {
        in[j] = inputs[size_t(a.arg)];
        continue;
      }
      in[j].tensor = passes::access_view(buffers[size_t(a.buffer)], a).to(Device::cpu());
    }
    Tensor result = op->run_slots(in)[0].tensor.contiguous().to(Device::cuda(epilogue.device));
    epilogue(buffers, inputs, &result);
  }
};

}  // namespace

std::shared_ptr<exec::CompiledProgram> compile_cuda(std::shared_ptr<const passes::KernelProgram> program,
                                              std::vector<ir::Type> input_types, Device device, CudaCompileOptions opts) {
  auto t0 = std::chrono::steady_clock::now();
  KILN_CHECK(device.is_cuda(), "compile_cuda", "the device must be a GPU, not ", device.str());
  const cuda::DeviceInfo info = cuda::device_info(device.index);  // (raises the reason CUDA is unavailable)
  const passes::KernelProgram& p = *program;
  exec::CompileStats stats;
  stats.kernels = int(p.kernels.size());
  std::vector<exec::KernelImpl> impls(p.kernels.size());
  // The emulator runs each block's threads as host threads: smaller blocks keep them few.
  const int block = opts.block > 0 ? opts.block : cuda::emulated() ? 64 : kCudaBlock;
  std::vector<CudaRender> rendered = render_cuda(p, "kiln_cuda_k", opts.generic);
  stats.generic = opts.generic;
  bool any_checks = false;
  std::string library_refusal;  // the first library call's reason it cannot be captured
  // A library call of kernel i on the device: cuBLAS set up now (never inside a capture).
  auto adopt = [&](const LibraryCall& call, size_t i, const char* what) {
    if (library_refusal.empty()) library_refusal = call.graph_refusal;
    if (cuda_library_uses_blas(call.op)) cuda::blas_prepare(device.index);
    stats.library.push_back("k" + std::to_string(i) + ": " + std::string(ir::op_info(call.op).name) + " (" +
                            cuda_library_how(call.op) + ")" + what);
  };
  std::vector<std::pair<std::shared_ptr<std::unique_ptr<DeviceScratch>>, size_t>> split_launches;  // slots, bytes
  for (size_t i = 0; i < rendered.size(); ++i) {
    const passes::Kernel& k = p.kernels[i];
    if (!rendered[i].kernel && k.kind == passes::KernelKind::Opaque) {
      std::vector<int> loads(k.loads.size());
      for (size_t j = 0; j < loads.size(); ++j) loads[j] = int(j);
      if (auto call = library_call(k.body, k, loads)) {
        adopt(*call, i, "");
        impls[i] = LibraryLaunch{&k, std::move(*call)};
        continue;
      }
    }
    if (!rendered[i].kernel) {
      stats.interpreted.push_back("k" + std::to_string(i) + ": " + rendered[i].why + " (on the host)");
      if (k.kind != passes::KernelKind::Opaque && k.kind != passes::KernelKind::Control)
        std::fprintf(stderr, "kiln: warning: a kernel runs on the host, not the GPU: %s\n", rendered[i].why.c_str());
      continue;
    }
    CudaKernel ck = std::move(*rendered[i].kernel);
    name_by_content(ck);
    Launch l;
    l.fn = load_kernel(ck, device.index, info.arch);
    l.dims = cuda_launch_dims(ck, info.multiprocessors, block);
    l.device = device.index;
    l.sink = sink_word(device.index);
    any_checks |= !ck.checks.empty();
    stats.compiled++;
    stats.memory_hits += l.fn.from == CudaBinary::From::Memory;
    stats.disk_hits += l.fn.from == CudaBinary::From::Disk;
    const bool epilogue = ck.epilogue;
    l.k = std::move(ck);
    if (l.dims.parts) split_launches.push_back({l.fixed_parts, l.parts_bytes()});
    if (!epilogue) {
      impls[i] = [l = std::move(l)](std::span<const Tensor> b, std::span<const ir::Slot> in) { l(b, in); };
      continue;
    }
    auto s = std::make_shared<SplitLaunch>();
    s->kernel = &k;
    s->split = std::make_shared<EpilogueSplit>(*split_epilogue(k, int(p.buffers.size())));
    s->op = std::make_shared<ir::Executable>(s->split->op);
    s->call = library_call(s->split->op, k, s->split->op_loads);
    if (s->call)
      adopt(*s->call, i, " + compiled epilogue");
    else
      stats.interpreted.push_back("k" + std::to_string(i) + ": the library op of an opaque kernel (on the host; its "
                                  "epilogue on the device)");
    s->epilogue = std::move(l);
    stats.epilogues++;
    impls[i] = [s](std::span<const Tensor> b, std::span<const ir::Slot> in) { (*s)(b, in); };
  }
  std::string refusal = opts.graphs ? cuda_graph_refusal(p, input_types, stats, any_checks, library_refusal) : "";
  stats.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto out = std::make_shared<exec::CompiledProgram>(program, input_types, device, std::move(stats), std::move(impls));
  if (opts.graphs) {
    if (refusal.empty()) {
      for (auto& [slot, bytes] : split_launches) *slot = std::make_unique<DeviceScratch>(bytes, device.index);
      out->set_replay(cuda_graph_replay(program, input_types, device), "replayed as a CUDA graph");
    }
    else out->set_replay(nullptr, "no CUDA graph: " + refusal);
  }
  return out;
}

}  // namespace kiln::codegen
