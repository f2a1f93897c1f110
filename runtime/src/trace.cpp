// The tracing hook: the thread's recorder and the attribute helpers (see trace.h).
#include "kiln/runtime/trace.h"

#include "kiln/runtime/factories.h"

namespace kiln {

AttrValue scalar_attr(const Scalar& s) {
  if (s.is_bool()) return s.to_bool();
  if (s.is_integral()) return s.to_int();
  return s.to_double();
}
AttrValue optional_attr(const std::optional<double>& v) {
  if (v) return *v;
  return NoneAttr{};
}
Scalar attr_scalar(const AttrValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return Scalar(*b);
  if (auto* i = std::get_if<int64_t>(&v)) return Scalar(*i);
  if (auto* d = std::get_if<double>(&v)) return Scalar(*d);
  KILN_FAIL("attr", "expected a number attribute (bool, int or float)");
}

namespace trace {
namespace {
// initial-exec: the eager ops test this on every call, so it must be one load, not a call.
thread_local Recorder* tls_recorder __attribute__((tls_model("initial-exec"))) = nullptr;
// The depth of kiln's own code (Internal scopes) on this thread while it traces.
thread_local int tls_internal __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

std::atomic<int> installed_recorders{0};

Recorder* active() { return tls_recorder; }

// A recorder installed from kiln's code (a cond branch) traces user code again: its reads count.
Install::Install(Recorder* r) : saved_(tls_recorder), saved_internal_(tls_internal) {
  tls_recorder = r;
  tls_internal = 0;
  installed_recorders.fetch_add(1, std::memory_order_relaxed);
}
Install::~Install() {
  tls_recorder = saved_;
  tls_internal = saved_internal_;
  installed_recorders.fetch_sub(1, std::memory_order_relaxed);
}

Internal::Internal() : on_(tls_recorder != nullptr) {
  if (on_) ++tls_internal;
}
Internal::~Internal() {
  if (on_) --tls_internal;
}

__attribute__((noinline)) void metadata_read(const Tensor& t, Metadata what, int64_t dim, const void* pc) {
  Recorder* r = tls_recorder;
  if (!r || tls_internal > 0) return;
  if (!pc) pc = __builtin_return_address(0);  // the accessor was inlined into the reader
  Pause p;  // the recorder reads the tensor's metadata itself
  r->metadata_read(t, what, dim, pc);
}

SymInt Recorder::sym_size(const Tensor& t, int64_t dim) {
  Pause p;
  return t.size(dim);
}

Tensor Recorder::live_number(double now, std::function<double()>, std::string) {
  Pause p;
  return scalar_tensor(now, TensorOptions(kFloat64));
}

void grad_access(const Tensor& t, bool overwrite) {
  if (Recorder* r = tls_recorder) {
    Pause p;
    r->grad_access(t, overwrite);
  }
}
void outside_state(const Tensor& t) {
  if (tls_recorder) t.impl().serial = 0;  // (older than every trace)
}
void host_effect(std::function<void()> effect, std::string what) {
  if (Recorder* r = tls_recorder) {
    Pause p;
    r->host_effect(std::move(effect), std::move(what));
  }
}
Tensor live_number(std::function<double()> read, std::string what) {
  const double now = read();
  Recorder* r = tls_recorder;
  if (!r) return scalar_tensor(now, TensorOptions(kFloat64));
  Pause p;
  return r->live_number(now, std::move(read), std::move(what));
}
void host_guard(std::function<bool()> holds, std::string what) {
  if (Recorder* r = tls_recorder) {
    Pause p;
    r->host_guard(std::move(holds), std::move(what));
  }
}

Pause::Pause() : saved_(tls_recorder) { tls_recorder = nullptr; }
Pause::~Pause() { tls_recorder = saved_; }

std::string_view host_access_name(HostAccess a) {
  switch (a) {
    case HostAccess::Bool: return "operator bool";
    case HostAccess::Item: return "item()";
    case HostAccess::ToVector: return "to_vector()";
    case HostAccess::DataPtr: return "data_ptr()";
    case HostAccess::Print: return "print()";
    case HostAccess::Str: return "str() / operator<<";
  }
  return "?";
}

void host_access(const Tensor& t, HostAccess what, const std::source_location& where, const void* pc) {
  if (Recorder* r = tls_recorder) {
    Pause p;  // the recorder may run eager ops (it evaluates the value it guards)
    r->host_access(t, what, where, pc);
  }
}

}  // namespace trace
}  // namespace kiln
