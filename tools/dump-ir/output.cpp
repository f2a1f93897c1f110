// dump-ir: printing results: shapes, comment lines, a run's outputs as text or JSON.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dump_ir.h"

namespace kiln::dump_ir {

std::string shape_str(IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

// Prefixes every line with "// " (a comment in kiln's text form and in DOT).
std::string commented(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += (line.empty() ? "//" : "// " + line) + "\n";
  return out;
}

constexpr int64_t kTinyOutput = 16;  // outputs with at most this many elements are printed in full

static std::string describe_output(size_t i, const ir::Slot& s) {
  std::ostringstream o;
  o << "output " << i << ": ";
  if (s.is_scalar) {
    const Scalar& v = s.scalar;
    o << "number ";
    if (v.is_bool()) o << (v.to_bool() ? "true" : "false");
    else if (v.is_integral()) o << v.to_int();
    else o << v.to_double();
    return o.str();
  }
  const Tensor& t = s.tensor;
  o << ir::short_name(t.dtype()) << shape_str(t.sizes());
  if (t.numel() <= kTinyOutput) o << " = " << t;
  return o.str();
}

static json output_json(const ir::Slot& s) {
  if (s.is_scalar) {
    const Scalar& v = s.scalar;
    if (v.is_bool()) return {{"kind", "number"}, {"value", v.to_bool()}};
    if (v.is_integral()) return {{"kind", "number"}, {"value", v.to_int()}};
    return {{"kind", "number"}, {"value", v.to_double()}};
  }
  const Tensor& t = s.tensor;
  json j = {{"kind", "tensor"}, {"dtype", std::string(ir::short_name(t.dtype()))}, {"sizes", t.sizes().vec()}};
  if (t.numel() <= kTinyOutput) {
    std::vector<double> values = t.to_vector<double>();
    json arr = json::array();
    for (double v : values) {
      if (std::isnan(v)) arr.push_back("nan");
      else if (std::isinf(v)) arr.push_back(v > 0 ? "inf" : "-inf");
      else arr.push_back(v);
    }
    j["values"] = arr;
  }
  return j;
}

std::vector<ir::Slot> to_slots(const std::vector<Tensor>& ts) {
  std::vector<ir::Slot> out(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) out[i].tensor = ts[i];
  return out;
}

// The outputs, as comment lines (text, dot) or a JSON array.
void print_outputs(const std::vector<ir::Slot>& outs, const std::string& format, json* doc) {
  if (format == "json") {
    json arr = json::array();
    for (const auto& s : outs) arr.push_back(output_json(s));
    (*doc)["outputs"] = arr;
    return;
  }
  std::string text;
  for (size_t i = 0; i < outs.size(); ++i) text += describe_output(i, outs[i]) + "\n";
  std::cout << commented(text);
}

}  // namespace kiln::dump_ir
