// The kernel program runner (see runner.h): on its own, the kernel interpreter, which runs a
// kernel program on the eager ops, honouring its index expressions and its memory plan, so that
// fusion, layout and planning are tested without any code generation.
#include <unordered_set>

#include "kiln/exec/runner.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/profile.h"
#include "kiln/runtime/storage.h"

namespace kiln::exec {

using namespace passes;

struct ProgramRunner::Impl {
  const KernelProgram& p;
  std::vector<std::unique_ptr<ir::Executable>> bodies;  // per interpreted kernel (null: a backend runs it)
  std::vector<bool> written;  // per buffer: some kernel stores into it
  std::vector<KernelImpl> impls;  // per kernel: a backend's compiled form, or empty
  Device device;
  std::vector<Tensor> constants;  // per buffer: a Constant's data on the device
  std::string label;               // the program's name in the kernel profile
  std::vector<std::string> names;  // per kernel: its name there
  std::vector<int64_t> traffic;    // per kernel: traffic_bytes, for the profile's GB/s
};

ProgramRunner::ProgramRunner(const KernelProgram& p, std::vector<KernelImpl> impls, Device device)
    : impl_(std::make_unique<Impl>(Impl{p, {}, {}, std::move(impls), device, {}, {}, {}, {}})) {
  impl_->impls.resize(p.kernels.size());
  impl_->written.assign(p.buffers.size(), false);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    impl_->bodies.push_back(impl_->impls[i] ? nullptr : std::make_unique<ir::Executable>(k.body));
    impl_->traffic.push_back(traffic_bytes(p, k));
    for (const Access& a : k.stores)
      if (a.buffer >= 0) impl_->written[size_t(a.buffer)] = true;
  }
  impl_->constants.resize(p.buffers.size());
  for (const Buffer& b : p.buffers)
    if (b.kind == BufferKind::Constant) impl_->constants[size_t(b.id)] = b.constant.to(device);
  set_label("");
}
ProgramRunner::~ProgramRunner() = default;

void ProgramRunner::set_label(const std::string& label) {
  impl_->label = label;
  impl_->names.clear();
  for (size_t i = 0; i < impl_->p.kernels.size(); ++i)
    impl_->names.push_back((label.empty() ? "" : label + ": ") + "k" + std::to_string(i) + " " +
                           kernel_summary(impl_->p.kernels[i]));
}
const std::string& ProgramRunner::label() const { return impl_->label; }
ProgramRunner::ProgramRunner(ProgramRunner&&) noexcept = default;

std::vector<Tensor> ProgramRunner::run(std::span<const Tensor> inputs) const {
  std::vector<ir::Slot> slots(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) slots[i].tensor = inputs[i];
  return run(slots);
}

std::vector<Tensor> ProgramRunner::run(std::span<const ir::Slot> inputs) const {
  std::vector<Tensor> buf = buffers(inputs);
  return run_on(buf, inputs);
}

bool ProgramRunner::written(int buffer) const { return impl_->written.at(size_t(buffer)); }

std::vector<Tensor> ProgramRunner::buffers(std::span<const ir::Slot> inputs) const {
  const KernelProgram& p = impl_->p;
  const Device dev = impl_->device;
  // One arena for every temporary, as the plan lays them out.
  std::shared_ptr<Storage> arena = Storage::allocate(size_t(std::max<int64_t>(p.arena_bytes, 64)), dev);
  std::vector<Tensor> buf(p.buffers.size());
  for (const Buffer& b : p.buffers) {
    switch (b.kind) {
      case BufferKind::Input: {
        KILN_CHECK(b.input >= 0 && size_t(b.input) < inputs.size() && !inputs[size_t(b.input)].is_scalar, "passes",
                   "run: input ", b.input, " must be a tensor");
        buf[size_t(b.id)] = inputs[size_t(b.input)].tensor;
        KILN_CHECK(buf[size_t(b.id)].device() == dev, "passes", "run: input ", b.input, " is on ",
                   buf[size_t(b.id)].device().str(), " but the program runs on ", dev.str());
        break;
      }
      case BufferKind::Constant: {
        const Tensor& c = impl_->constants[size_t(b.id)];
        buf[size_t(b.id)] = impl_->written[size_t(b.id)] ? c.clone() : c;
        break;
      }
      case BufferKind::Output:
        buf[size_t(b.id)] = empty_strided(b.sizes, b.strides, TensorOptions(b.dtype).device(dev));
        break;
      case BufferKind::Temp: {
        // A flat typed tensor over its bytes of the arena (which it keeps alive); its storage
        // starts at its first byte, as as_strided offsets into it expect.
        auto impl = std::make_shared<TensorImpl>();
        impl->dtype = b.dtype;
        impl->sizes = {std::max<int64_t>(b.numel, 0)};
        impl->strides = {1};
        impl->refresh();
        auto* base = static_cast<uint8_t*>(arena->data()) + b.arena_offset;
        impl->storage = Storage::wrap(base, size_t(std::max<int64_t>(b.bytes(), 0)), dev, [keep = arena](void*) {});
        buf[size_t(b.id)] = Tensor(std::move(impl));
        break;
      }
    }
  }
  return buf;
}

namespace {
// Whether the tensor an interpreted kernel computed can stand for its store's whole buffer from
// here on instead of being copied into it: a host temporary or output the store covers exactly,
// in the order of its elements, and a result in fresh memory of its own with those elements in
// the same order (a library op's product, say).
bool adoptable(const KernelProgram& p, const Access& a, const Tensor& v) {
  const Buffer& b = p.buffers[size_t(a.buffer)];
  if (b.kind != BufferKind::Temp && b.kind != BufferKind::Output) return false;
  if (a.offset != 0 || a.storage_relative || v.dtype() != b.dtype || !v.is_contiguous() || v.numel() != b.numel)
    return false;
  if (v.sizes().vec() != a.sizes || v.storage().use_count() != 1) return false;
  if (b.kind == BufferKind::Output && v.strides().vec() != b.strides) return false;
  int64_t expect = 1;
  for (size_t d = a.sizes.size(); d-- > 0;) {
    if (a.sizes[d] != 1 && a.strides[d] != expect) return false;
    expect *= a.sizes[d];
  }
  return true;
}
}  // namespace

std::vector<Tensor> ProgramRunner::run_on(std::span<const Tensor> buffers, std::span<const ir::Slot> inputs) const {
  const KernelProgram& p = impl_->p;
  const bool host = impl_->device.is_cpu();
  // A buffer may be replaced below by the tensor an interpreted kernel computed for it; the
  // caller's buffers are copied only then (a program of compiled kernels never pays for it).
  std::vector<Tensor> own;
  std::span<const Tensor> buf = buffers;
  // The view an access names: offsets count from the buffer's first element (or its storage).
  auto view = [&](const Access& a) { return access_view(buf[size_t(a.buffer)], a); };
  std::unordered_set<const Storage*> adopted;  // the storage of every tensor adopted as a buffer
  // A kernel the backend left to the runner: its body on the eager ops over views of the buffers.
  auto interpret = [&](size_t i) {
    const Kernel& k = p.kernels[i];
    std::vector<ir::Slot> in(k.loads.size());
    for (size_t j = 0; j < k.loads.size(); ++j) {
      const Access& a = k.loads[j];
      if (a.buffer < 0) {
        in[j] = inputs[size_t(a.arg)];
        continue;
      }
      Tensor t = view(a);
      if (!host) t = t.to(Device::cpu());  // staged: the eager ops run on the host
      if (k.body.inputs()[j]->type.sizes.empty() && t.dim() > 0) t = t.reshape({});
      in[j].tensor = t;
    }
    std::vector<ir::Slot> out = impl_->bodies[i]->run_slots(in);
    for (size_t j = 0; j < k.stores.size(); ++j) {
      const Access& a = k.stores[j];
      Tensor dst = view(a);
      Tensor v = out[j].tensor;
      if (out[j].is_scalar) {
        dst.fill_(out[j].scalar);
        continue;
      }
      // (a value stored twice, `return %0, %0`, is one tensor: it stands for one buffer only, or
      // a later write into the other would change both)
      if (host && adoptable(p, a, v) && adopted.insert(v.storage().get()).second) {
        const Buffer& b = p.buffers[size_t(a.buffer)];
        if (own.empty()) {
          own.assign(buffers.begin(), buffers.end());
          buf = own;
        }
        own[size_t(a.buffer)] = b.kind == BufferKind::Output ? v : v.reshape({b.numel});
        continue;
      }
      // The body value may be constant along loops the store does not index (size 1 there).
      while (v.dim() > dst.dim() && v.size(0) == 1) v = v.squeeze(0);
      if (v.dim() == dst.dim())
        for (int64_t d = 0; d < v.dim(); ++d)
          if (dst.size(d) == 1 && v.size(d) > 1) v = v.narrow(d, 0, 1);
      dst.copy_(v);
    }
  };
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    profile::Scope span(impl_->device);  // (off unless a profiler records)
    if (impl_->impls[i])
      impl_->impls[i](buf, inputs);
    else
      interpret(i);
    if (span.on()) span.finish(impl_->names[i], impl_->traffic[i]);
  }
  std::vector<Tensor> results;
  for (const Access& a : p.outputs) {
    Tensor t = view(a);
    const Tensor& whole = buf[size_t(a.buffer)];
    BufferKind kind = p.buffers[size_t(a.buffer)].kind;
    if (kind == BufferKind::Constant) t = t.clone();
    // An input returned as it is (x.mul_(2) returns x) is that tensor itself, as in eager mode.
    if (kind == BufferKind::Input && t.sizes() == whole.sizes() && t.strides() == whole.strides() &&
        t.storage_offset() == whole.storage_offset())
      t = whole;
    results.push_back(t);
  }
  return results;
}

}  // namespace kiln::exec
