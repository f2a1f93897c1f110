// Printing in PyTorch's format: tensor([[1.0000, 2.5000], ...], dtype=torch.float64).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

constexpr int64_t kThreshold = 1000, kEdgeItems = 3, kLineWidth = 80, kPrecision = 4;

// Decides how every element is written, from the values that will be shown.
struct Formatter {
  DType dtype;
  bool int_mode = true, sci_mode = false;
  size_t width = 1;

  std::string raw(double v) const {
    char buf[64];
    if (is_floating(dtype)) {
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      if (sci_mode) std::snprintf(buf, sizeof buf, "%.*e", int(kPrecision), v);
      else if (int_mode) std::snprintf(buf, sizeof buf, "%.0f.", v);
      else std::snprintf(buf, sizeof buf, "%.*f", int(kPrecision), v);
      return buf;
    }
    if (dtype == kBool) return v != 0 ? "True" : "False";
    std::snprintf(buf, sizeof buf, "%lld", (long long)v);
    return buf;
  }
  std::string operator()(double v) const {
    std::string s = raw(v);
    return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
  }
};

// The values the printout shows (summarised tensors show only their edges).
void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item().to_double());
    return;
  }
  int64_t n = t.sizes()[0];
  auto visit = [&](int64_t i) { collect(t.select(0, i), summarize, out); };
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) visit(i);
    for (int64_t i = n - kEdgeItems; i < n; ++i) visit(i);
  } else {
    for (int64_t i = 0; i < n; ++i) visit(i);
  }
}

Formatter make_formatter(DType dt, const std::vector<double>& vals) {
  Formatter f{dt};
  if (is_floating(dt)) {
    double mx = 0, mn = INFINITY;
    bool any = false;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      if (std::ceil(v) != v) f.int_mode = false;
      if (v != 0) {
        any = true;
        mx = std::max(mx, std::abs(v));
        mn = std::min(mn, std::abs(v));
      }
    }
    if (any) {
      if (f.int_mode) f.sci_mode = mx / mn > 1000.0 || mx > 1e8;
      else f.sci_mode = mx / mn > 1000.0 || mx > 1e8 || mn < 1e-4;
    }
  }
  // As PyTorch: float widths come from the nonzero finite values only.
  f.width = 1;
  for (double v : vals)
    if (!is_floating(dt) || (std::isfinite(v) && v != 0)) f.width = std::max(f.width, f.raw(v).size());
  return f;
}

std::string vector_str(const Tensor& t, size_t indent, bool summarize, const Formatter& f) {
  size_t elem = f.width + 2;
  size_t per_line = std::max<size_t>(1, size_t(std::floor(double(kLineWidth - int64_t(indent)) / double(elem))));
  std::vector<std::string> items;
  int64_t n = t.sizes()[0];
  auto item = [&](int64_t i) { items.push_back(f(t.select(0, i).item().to_double())); };
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) item(i);
    items.push_back(" ...");
    for (int64_t i = n - kEdgeItems; i < n; ++i) item(i);
  } else {
    for (int64_t i = 0; i < n; ++i) item(i);
  }
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) {
      s += ",";
      s += (i % per_line == 0) ? "\n" + std::string(indent + 1, ' ') : " ";
    }
    s += items[i];
  }
  return s + "]";
}

std::string tensor_str(const Tensor& t, size_t indent, bool summarize, const Formatter& f) {
  if (t.dim() == 0) return f(t.item().to_double());
  if (t.dim() == 1) return vector_str(t, indent, summarize, f);
  int64_t n = t.sizes()[0];
  std::vector<std::string> parts;
  auto part = [&](int64_t i) { parts.push_back(tensor_str(t.select(0, i), indent + 1, summarize, f)); };
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) part(i);
    parts.push_back("...");
    for (int64_t i = n - kEdgeItems; i < n; ++i) part(i);
  } else {
    for (int64_t i = 0; i < n; ++i) part(i);
  }
  std::string sep = "," + std::string(size_t(t.dim() - 1), '\n') + std::string(indent + 1, ' ');
  std::string s = "[";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s + "]";
}

}  // namespace

std::string Tensor::str(std::source_location where) const {
  if (!defined()) return "[ Tensor (undefined) ]";
  trace::host_access(*this, trace::HostAccess::Str, where);
  trace::Pause p;
  Tensor t = to(kCPU);
  std::string prefix = "tensor(";
  std::vector<std::string> suffixes;
  std::string body;
  if (t.numel() == 0) {
    body = "[]";
    if (t.dim() != 1) {
      std::string sz = "size=(";
      for (int64_t i = 0; i < t.dim(); ++i) sz += (i ? ", " : "") + std::to_string(t.sizes()[i]);
      suffixes.push_back(sz + (t.dim() == 1 ? ",)" : ")"));
    }
    if (t.dtype() != kDefaultFloat) suffixes.push_back("dtype=torch." + std::string(name(t.dtype())));
  } else {
    bool summarize = t.numel() > kThreshold;
    std::vector<double> vals;
    collect(t, summarize, vals);
    Formatter f = make_formatter(t.dtype(), vals);
    body = tensor_str(t, prefix.size(), summarize, f);
    if (t.dtype() != kDefaultFloat && t.dtype() != kInt64 && t.dtype() != kBool)
      suffixes.push_back("dtype=torch." + std::string(name(t.dtype())));
  }
  if (!device().is_cpu()) suffixes.insert(suffixes.begin(), "device='" + device().str() + "'");
  std::string s = prefix + body;
  for (auto& x : suffixes) s += ", " + x;
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (t.defined()) trace::host_access(t, trace::HostAccess::Str, std::source_location(), __builtin_return_address(0));
  trace::Pause p;
  return os << t.str();
}
void print(const Tensor& t, std::source_location where) {
  if (t.defined()) trace::host_access(t, trace::HostAccess::Print, where);
  trace::Pause p;
  std::cout << t.str() << "\n";
}

}  // namespace kiln
