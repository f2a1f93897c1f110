// dump-ir --run: random inputs for a graph, and the kernel program checked against the reference
// executor output by output.
#include <kiln/exec/backend.h>
#include <kiln/codegen/cpu.h>
#include <kiln/exec/program.h>
#include <kiln/passes/kernel.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>

#include "workloads.h"

#include "dump_ir.h"

namespace kiln::dump_ir {

namespace wl = kiln::workloads;

// Random values for one graph input: a number, or a tensor with the type's sizes and strides
// (a view over a random buffer large enough for them).
ir::Slot random_input(const ir::Value& v, uint64_t seed, size_t index) {
  manual_seed(seed + index);
  const ir::Type& t = v.type;
  ir::Slot s;
  KILN_CHECK(t.device.is_cpu(), "run", "input %", v.name, " is on ", t.device.str(), "; --run runs on the CPU only");
  if (t.is_scalar() || t.wrapped) {
    s.is_scalar = true;
    if (t.dtype == kBool) s.scalar = Scalar(true);
    else if (is_floating(t.dtype)) s.scalar = Scalar(randn({}, kFloat64).item<double>());
    else s.scalar = Scalar(randint(1, 11, {}, kInt64).item<int64_t>());
    return s;
  }
  int64_t extent = 1;
  bool empty = false;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] == 0) empty = true;
    extent += (t.sizes[d] - 1) * std::max<int64_t>(t.strides[d], 0);
  }
  if (empty) {
    s.tensor = empty_strided(t.sizes, t.strides, t.dtype);
    return s;
  }
  wl::InputSpec spec{v.name, t.dtype, {extent}};
  s.tensor = wl::make_tensor(spec, wl::Init::Normal).as_strided(t.sizes, t.strides, 0);
  return s;
}

static Tolerance tolerance(DType d) {
  switch (d) {
    case kFloat32: return {1e-4, 1e-5};
    case kFloat64: return {1e-10, 1e-10};
    case kFloat16: case kBFloat16: return {1e-2, 1e-2};
    default: return {0, 0};  // integers and bool: exact
  }
}

std::string Check::result() const {
  if (!problem.empty()) return what + ": " + problem;
  std::ostringstream s;
  s << what << " max abs diff " << std::setprecision(3) << max_diff;
  if (tol.rtol == 0 && tol.atol == 0) s << " (exact)";
  else s << " (rtol " << tol.rtol << ", atol " << tol.atol << ")";
  return s.str();
}

std::string Check::str() const { return "check " + where + ": " + result() + (ok ? ": ok" : ": MISMATCH"); }

json Check::to_json() const {
  json j = {{"where", where}, {"what", what}, {"ok", ok}, {"rtol", tol.rtol}, {"atol", tol.atol}};
  if (!problem.empty()) j["problem"] = problem;
  else if (std::isnan(max_diff)) j["max_abs_diff"] = "nan";
  else if (std::isinf(max_diff)) j["max_abs_diff"] = "inf";
  else j["max_abs_diff"] = max_diff;
  return j;
}

// Compares the program's output `got` with the reference's `want` (allclose-style:
// |got - want| <= atol + rtol * |want|; NaN equals NaN; ints and bool exactly).
static Check compare(std::string where, const ir::Slot& want, const Tensor& got) {
  Check c;
  c.where = std::move(where);
  if (want.is_scalar) {
    c.what = "number";
    if (got.numel() != 1) {
      c.ok = false;
      c.problem = "the program returned " + std::string(ir::short_name(got.dtype())) + shape_str(got.sizes()) +
                  " for a number";
      return c;
    }
    c.tol = tolerance(got.dtype());
    double a = got.to_vector<double>()[0], b = want.scalar.to_double();
    c.max_diff = (a == b || (std::isnan(a) && std::isnan(b))) ? 0 : std::fabs(a - b);
    c.ok = !std::isnan(c.max_diff) && c.max_diff <= c.tol.atol + c.tol.rtol * std::fabs(b);
    return c;
  }
  const Tensor& ref = want.tensor;
  c.what = std::string(ir::short_name(ref.dtype())) + shape_str(ref.sizes());
  if (got.dtype() != ref.dtype() || got.sizes().vec() != ref.sizes().vec()) {
    c.ok = false;
    c.problem = "the program returned " + std::string(ir::short_name(got.dtype())) + shape_str(got.sizes());
    return c;
  }
  c.tol = tolerance(ref.dtype());
  if (!is_floating(ref.dtype())) {
    std::vector<int64_t> a = got.to_vector<int64_t>(), b = ref.to_vector<int64_t>();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) {
        c.ok = false;
        c.max_diff = std::max(c.max_diff, std::fabs(double(a[i]) - double(b[i])));
      }
    return c;
  }
  std::vector<double> a = got.to_vector<double>(), b = ref.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    double d = std::fabs(a[i] - b[i]);  // NaN when one side is NaN, inf when one is infinite
    if (std::isnan(d) || !(d <= c.tol.atol + c.tol.rtol * std::fabs(b[i]))) c.ok = false;
    if (std::isnan(d) || std::isnan(c.max_diff)) c.max_diff = std::numeric_limits<double>::quiet_NaN();
    else c.max_diff = std::max(c.max_diff, d);
  }
  return c;
}

// Runs the module's kernel program and the unoptimized graph `reference` on the same inputs
// (`make_inputs` is called once per run: fresh inputs, since a graph may write into them) and
// compares every output: the program on the kernel interpreter, then, where kiln has its LLVM
// backend and the pipeline laid out and planned the program as kiln::compile's does, the same
// program compiled for the CPU ("compiled output N"). Returns the interpreted program's outputs.
std::vector<Tensor> run_and_check(const passes::Module& m, const ir::Graph& reference,
                                  const std::function<std::vector<ir::Slot>()>& make_inputs,
                                  const std::string& prefix, std::vector<Check>& checks) {
  KILN_CHECK(m.program != nullptr, "run", "the pipeline built no kernel program");
  std::vector<ir::Slot> ref_in = make_inputs();
  std::vector<ir::Slot> want = ir::Executable(reference).run_slots(ref_in);
  auto check_all = [&](const std::vector<Tensor>& got, const std::string& label) {
    for (size_t i = 0; i < std::max(want.size(), got.size()); ++i) {
      std::string where = prefix + label + "output " + std::to_string(i);
      if (i >= got.size() || i >= want.size()) {
        Check c;
        c.where = where;
        c.what = i < want.size() ? "reference output" : "program output";
        c.ok = false;
        c.problem = i < want.size() ? "missing from the program's outputs" : "not returned by the reference";
        checks.push_back(c);
        continue;
      }
      checks.push_back(compare(where, want[i], got[i]));
    }
  };
  std::vector<ir::Slot> prog_in = make_inputs();
  exec::ProgramRunner runner(*m.program);
  std::vector<Tensor> got = runner.run(std::span<const ir::Slot>(prog_in));
  check_all(got, "");
  if (codegen::has_cpu_codegen() && m.program->laid_out && m.program->planned) {
    std::vector<ir::Type> types;
    for (const ir::Value* v : reference.inputs()) types.push_back(v->type);
    std::shared_ptr<exec::CompiledProgram> compiled = exec::compile_program(m.program, std::move(types), Device::cpu());
    std::vector<ir::Slot> compiled_in = make_inputs();
    check_all(compiled->run(std::span<const ir::Slot>(compiled_in)), "compiled ");
  }
  return got;
}

// The first failed check as the error of exit status 3 (after everything is printed), or nothing.
void fail_on_mismatch(const std::string& target, const std::vector<Check>& checks) {
  for (const Check& c : checks)
    if (!c.ok)
      throw Failure(target + ": --run: " + c.where + " of the kernel program differs from the reference executor's: " +
                        c.result(),
                    kMismatchExit);
}

}  // namespace kiln::dump_ir
