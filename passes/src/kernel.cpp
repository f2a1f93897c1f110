// The kernel program's text form, statistics and verifier (see kernel.h).
#include <algorithm>
#include <sstream>

#include "kiln/passes/kernel.h"

using kiln::ir::short_name;

namespace kiln::passes {

Tensor access_view(const Tensor& buffer, const Access& a) {
  int64_t off = a.storage_relative ? a.offset : buffer.storage_offset() + a.offset;
  return buffer.as_strided(a.sizes, a.strides, off);
}

std::string_view buffer_kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::Input: return "input";
    case BufferKind::Constant: return "constant";
    case BufferKind::Temp: return "temp";
    case BufferKind::Output: return "output";
  }
  return "?";
}

std::string_view kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::Elementwise: return "elementwise";
    case KernelKind::Reduction: return "reduction";
    case KernelKind::RowWise: return "rowwise";
    case KernelKind::Opaque: return "opaque";
    case KernelKind::Control: return "control";
  }
  return "?";
}

bool Access::same_index(const Access& o) const {
  if (buffer != o.buffer || offset != o.offset || storage_relative != o.storage_relative || strides != o.strides)
    return false;
  for (size_t d = 0; d < strides.size(); ++d)
    if (strides[d] != 0 && sizes[d] != o.sizes[d]) return false;
  return true;
}

namespace {

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string bytes_str(int64_t b) {
  char buf[32];
  if (b >= (int64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

std::string access_str(const Access& a) {
  std::ostringstream os;
  if (a.buffer < 0) {
    os << "arg" << a.arg << " " << short_name(a.dtype);
    return os.str();
  }
  os << "b" << a.buffer << " " << short_name(a.dtype) << list(a.sizes) << " strides " << list(a.strides);
  if (a.offset || a.storage_relative) os << (a.storage_relative ? " storage+" : " +") << a.offset;
  os << " " << stride_class_name(a.cls) << " align " << a.align << (a.iota ? " iota" : "");
  return os.str();
}

}  // namespace

namespace {

bool same_buffer(const Buffer& a, const Buffer& b) {
  // (a constant's data is the graph value it holds: the kernel passes never change the graph)
  return a.id == b.id && a.kind == b.kind && a.dtype == b.dtype && a.numel == b.numel && a.input == b.input &&
         a.value == b.value && a.constant.defined() == b.constant.defined() && a.iota == b.iota &&
         a.sizes == b.sizes && a.strides == b.strides && a.arena_offset == b.arena_offset;
}

bool same_kernel(const Kernel& a, const Kernel& b) {
  return a.kind == b.kind && a.loops == b.loops && a.reduce_from == b.reduce_from && a.loads == b.loads &&
         a.stores == b.stores && a.nodes == b.nodes && a.bytes_read == b.bytes_read &&
         a.bytes_written == b.bytes_written && ir::structure_key(a.body) == ir::structure_key(b.body);
}

template <typename T, typename Same>
int unlike(const std::vector<T>& a, const std::vector<T>& b, Same same) {
  int n = int(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += !same(a[i], b[i]);
  return n;
}

}  // namespace

int differences(const KernelProgram& a, const KernelProgram& b) {
  const bool totals = a.outputs == b.outputs && a.arena_bytes == b.arena_bytes && a.peak_bytes == b.peak_bytes &&
                      a.planned == b.planned && a.laid_out == b.laid_out;
  return unlike(a.kernels, b.kernels, same_kernel) + unlike(a.buffers, b.buffers, same_buffer) + !totals;
}

std::string print(const KernelProgram& p) {
  std::ostringstream os;
  os << "kernels " << p.kernels.size() << " {  // " << p.buffers.size() << " buffers, arena "
     << bytes_str(p.arena_bytes) << ", peak " << bytes_str(p.peak_bytes) << (p.laid_out ? ", laid out" : "")
     << (p.planned ? ", planned" : "") << "\n";
  for (const Buffer& b : p.buffers) {
    os << "  b" << b.id << " = " << buffer_kind_name(b.kind) << " " << short_name(b.dtype);
    if (b.kind == BufferKind::Input) os << " %" << "a" << b.input;
    os << list(b.sizes) << "{";
    for (size_t d = 0; d < b.strides.size(); ++d) os << (d ? "," : "") << b.strides[d];
    os << "} " << bytes_str(b.bytes()) << (b.iota ? " iota" : "");
    if (b.kind == BufferKind::Temp) os << " @" << b.arena_offset;
    os << "\n";
  }
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    os << "  kernel k" << i << " " << kernel_kind_name(k.kind) << " loops " << list(k.loops);
    if (k.reduce_from < int(k.loops.size())) os << " reduce " << k.reduce_from << "..";
    os << " reads " << bytes_str(k.bytes_read) << " writes " << bytes_str(k.bytes_written) << " {\n";
    for (size_t j = 0; j < k.loads.size(); ++j) os << "    load in" << j << " = " << access_str(k.loads[j]) << "\n";
    std::string body = ir::print(k.body);
    std::istringstream lines(body);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("  ", 0) == 0) os << "  " << line << "\n";
    for (size_t j = 0; j < k.stores.size(); ++j) os << "    store out" << j << " -> " << access_str(k.stores[j]) << "\n";
    os << "  }\n";
  }
  os << "  return";
  for (size_t j = 0; j < p.outputs.size(); ++j) os << (j ? ", " : " ") << access_str(p.outputs[j]);
  os << "\n}\n";
  return os.str();
}

int64_t traffic_bytes(const KernelProgram& p, const Kernel& k) {
  for (int64_t e : k.loops)
    if (e == 0) return 0;  // (no iteration: nothing read or written, a broadcast operand neither)
  auto side = [&](const std::vector<Access>& accs) {
    std::vector<int64_t> per_buffer(p.buffers.size(), 0);  // distinct elements, summed over accesses
    for (const Access& a : accs) {
      if (a.buffer < 0) continue;
      int64_t n = 1;
      for (size_t d = 0; d < a.sizes.size(); ++d)
        if (a.strides[d] != 0) n *= a.sizes[d];
      for (int64_t e : a.sizes) n = e == 0 ? 0 : n;  // (an opaque op's empty operand)
      per_buffer[size_t(a.buffer)] += n * int64_t(itemsize(a.dtype));
    }
    int64_t total = 0;
    for (size_t b = 0; b < per_buffer.size(); ++b) {
      total += std::min(per_buffer[b], std::max<int64_t>(p.buffers[b].bytes(), 0));
    }
    return total;
  };
  return side(k.loads) + side(k.stores);
}

std::string kernel_summary(const Kernel& k) {
  std::string s = std::string(kernel_kind_name(k.kind)) + " ";
  std::vector<std::string_view> ops;  // each op once, in the body's order (constants left out)
  for (const auto& n : k.body.nodes()) {
    std::string_view name = ir::op_info(n->op).name;
    if (n->op != OpId::Constant && std::find(ops.begin(), ops.end(), name) == ops.end()) ops.push_back(name);
  }
  for (size_t j = 0; j < ops.size(); ++j) s += std::string(j ? "," : "") + std::string(ops[j]);
  if (ops.empty()) s += "copy";
  s += " ";
  for (size_t d = 0; d < k.loops.size(); ++d) s += (d ? "x" : "") + std::to_string(k.loops[d]);
  if (k.loops.empty()) s += "1";
  // the dtype it writes (or reads, when it writes nothing): eager ops of one name and size differ by it
  const std::vector<Access>& typed = k.stores.empty() ? k.loads : k.stores;
  if (!typed.empty()) s += " " + std::string(ir::short_name(typed[0].dtype));
  return s;
}

std::string stats(const KernelProgram& p) {
  std::ostringstream os;
  int64_t r = 0, w = 0;
  os << p.kernels.size() << " kernel" << (p.kernels.size() == 1 ? "" : "s") << "\n";
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    os << "  k" << i << " " << kernel_kind_name(k.kind) << " " << k.body.nodes().size() << " ops, reads "
       << k.bytes_read << " B, writes " << k.bytes_written << " B, traffic " << traffic_bytes(p, k) << " B\n";
    r += k.bytes_read;
    w += k.bytes_written;
  }
  os << "total: reads " << r << " B, writes " << w << " B, arena " << p.arena_bytes << " B, peak " << p.peak_bytes
     << " B\n";
  return os.str();
}

std::optional<std::string> verify_program(const KernelProgram& p) {
  auto fail = [](auto&&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return std::optional<std::string>(os.str());
  };
  auto check_access = [&](const Access& a, const std::string& where) -> std::optional<std::string> {
    if (a.buffer < 0) return std::nullopt;
    if (a.buffer >= int(p.buffers.size())) return fail(where, ": buffer b", a.buffer, " does not exist");
    if (a.sizes.size() != a.strides.size()) return fail(where, ": sizes and strides differ in length");
    const Buffer& b = p.buffers[size_t(a.buffer)];
    if (a.dtype != b.dtype && b.kind != BufferKind::Input)
      return fail(where, ": dtype ", short_name(a.dtype), " of buffer b", a.buffer, " which holds ", short_name(b.dtype));
    if (a.storage_relative || b.kind == BufferKind::Input) return std::nullopt;  // bounds known at run time
    int64_t lo = a.offset, hi = a.offset;
    for (size_t d = 0; d < a.sizes.size(); ++d) {
      if (a.sizes[d] == 0) return std::nullopt;
      (a.strides[d] < 0 ? lo : hi) += (a.sizes[d] - 1) * a.strides[d];
    }
    if (lo < 0 || hi >= b.numel) return fail(where, ": index reaches [", lo, ", ", hi, "] outside b", a.buffer, " (", b.numel, " elements)");
    return std::nullopt;
  };
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    std::string kn = "kernel k" + std::to_string(i);
    if (k.loads.size() != k.body.inputs().size()) return fail(kn, ": ", k.loads.size(), " loads for ", k.body.inputs().size(), " body inputs");
    if (k.stores.size() != k.body.outputs().size()) return fail(kn, ": ", k.stores.size(), " stores for ", k.body.outputs().size(), " body outputs");
    if (auto e = ir::verify(k.body)) return fail(kn, ": body: ", e->str());
    bool loop_space = k.kind != KernelKind::Opaque && k.kind != KernelKind::Control;
    for (size_t j = 0; j < k.loads.size(); ++j) {
      const Access& a = k.loads[j];
      std::string where = kn + " load in" + std::to_string(j);
      if (auto e = check_access(a, where)) return e;
      const ir::Type& t = k.body.inputs()[j]->type;
      if (a.buffer < 0) continue;
      if (t.dtype != a.dtype) return fail(where, ": body input is ", t.str());
      if (!t.sizes.empty() && t.sizes != a.sizes) return fail(where, ": body input is ", t.str(), " but the load is ", list(a.sizes));
      if (loop_space && a.sizes.size() != k.loops.size()) return fail(where, ": ", a.sizes.size(), " dims for ", k.loops.size(), " loops");
      if (loop_space)
        for (size_t d = 0; d < a.sizes.size(); ++d)
          if (a.sizes[d] != 1 && a.sizes[d] != k.loops[d]) return fail(where, ": size ", a.sizes[d], " in loop ", d, " of extent ", k.loops[d]);
    }
    for (size_t j = 0; j < k.stores.size(); ++j) {
      const Access& a = k.stores[j];
      std::string where = kn + " store " + std::to_string(j);
      if (a.buffer < 0) return fail(where, ": stores to a number");
      if (auto e = check_access(a, where)) return e;
      if (k.body.outputs()[j]->type.dtype != a.dtype) return fail(where, ": body output is ", k.body.outputs()[j]->type.str());
      // A kernel writing a buffer reads it only through the index it writes.
      for (const Access& l : k.loads)
        if (l.buffer == a.buffer && !l.same_index(a))
          return fail(where, ": writes b", a.buffer, " which the kernel also reads through another index");
    }
  }
  for (size_t j = 0; j < p.outputs.size(); ++j)
    if (auto e = check_access(p.outputs[j], "output " + std::to_string(j))) return e;
  // The arena: temporaries live at the same time never share bytes, except a kernel's in-place pair.
  std::vector<std::pair<int, int>> life(p.buffers.size(), {-1, -1});
  for (size_t i = 0; i < p.kernels.size(); ++i)
    for (const auto* accs : {&p.kernels[i].stores, &p.kernels[i].loads})
      for (const Access& a : *accs)
        if (a.buffer >= 0) {
          auto& l = life[size_t(a.buffer)];
          if (l.first < 0) l.first = int(i);
          l.second = int(i);
        }
  for (const Buffer& x : p.buffers)
    for (const Buffer& y : p.buffers) {
      if (x.id >= y.id || x.kind != BufferKind::Temp || y.kind != BufferKind::Temp) continue;
      if (x.arena_offset < 0 || y.arena_offset < 0) return fail("temporary without arena bytes");
      bool overlap = x.arena_offset < y.arena_offset + y.bytes() && y.arena_offset < x.arena_offset + x.bytes();
      auto lx = life[size_t(x.id)], ly = life[size_t(y.id)];
      if (!overlap || lx.first < 0 || ly.first < 0) continue;
      bool live_together = lx.first <= ly.second && ly.first <= lx.second;
      if (!live_together) continue;
      // Allowed only when one dies where the other is born, in a kernel reading and writing both identically.
      int k = lx.second == ly.first ? lx.second : (ly.second == lx.first ? ly.second : -1);
      if (k < 0) return fail("temporaries b", x.id, " and b", y.id, " share arena bytes while both are live");
      const Kernel& kern = p.kernels[size_t(k)];
      int from = lx.second == k ? x.id : y.id, to = from == x.id ? y.id : x.id;
      const Access* r = nullptr;
      const Access* w = nullptr;
      for (const Access& a : kern.loads)
        if (a.buffer == from) r = &a;
      for (const Access& a : kern.stores)
        if (a.buffer == to) w = &a;
      Access rs = r ? *r : Access{};
      rs.buffer = to;
      if (!r || !w || !rs.same_index(*w) || x.arena_offset != y.arena_offset)
        return fail("temporaries b", x.id, " and b", y.id, " share arena bytes in kernel k", k,
                    " without a same-index in-place read and write");
    }
  if (p.arena_bytes < 0 || p.peak_bytes < 0) return fail("negative arena or peak size");
  for (const Buffer& b : p.buffers)
    if (b.kind == BufferKind::Temp && b.arena_offset + b.bytes() > p.arena_bytes)
      return fail("b", b.id, " ends past the arena (", p.arena_bytes, " bytes)");
  return std::nullopt;
}

}  // namespace kiln::passes
