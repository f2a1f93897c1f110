// The tracing hook: the thread's recorder and the attribute helpers (see trace.h).
#include "kiln/runtime/trace.h"

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
}  // namespace

Recorder* active() { return tls_recorder; }

Install::Install(Recorder* r) : saved_(tls_recorder) { tls_recorder = r; }
Install::~Install() { tls_recorder = saved_; }
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
