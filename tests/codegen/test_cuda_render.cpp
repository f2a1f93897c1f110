// The CUDA backend's rendered kernels, checked without a GPU.
//
// Emulation: every kernel of a program is rendered and loaded as a module of kiln's emulated
// CUDA driver (tests/emulation: the source compiled for the host against cuda_emu.h, CUDA's
// built-ins on host threads: real barriers for __syncthreads, real lanes for the warp
// shuffles), and the program runs through the kernel program runner with each kernel
// launched through the driver API, on small grids so that the
// grid-stride and row loops go round more than once. Results are compared with the reference
// executor on the same inputs: every workload, ops across dtypes and layouts, every strategy.
// Golden checks read the rendered source for the properties the issue asks for (vector accesses
// on contiguous data, 32-bit indices where they fit), and NVRTC compiles every workload's
// kernels for sm_90 when it is installed (it needs no GPU).
#include <gtest/gtest.h>
#include <kiln/codegen/cuda.h>
#include <kiln/ir/exec.h>
#include <kiln/kiln.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>

#include <dlfcn.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../codegen/src/cuda/library.h"
#include "../common/close.h"
#include "../common/scoped_env.h"
#include "../emulation/emulated_driver.h"
#include "../passes/check_program.h"
#include "traced.h"
#include "workloads.h"

using namespace kiln;
namespace wl = kiln::workloads;

namespace {

using kiln::testing::Fn;

using kiln::testing::trace;

struct Case {
  std::string name;
  ir::Graph graph{"g"};
  std::shared_ptr<passes::KernelProgram> program;
  std::vector<codegen::CudaRender> kernels;
  std::vector<Tensor> inputs;  // the values to run on (else random ones of the graph's types)
  kiln::testing::Tolerance floor;
};

Case make_case(std::string name, ir::Graph g, const std::string& prefix, bool generic = false) {
  Case c;
  c.name = std::move(name);
  passes::Module m = passes::optimize(g, {});
  c.graph = std::move(g);
  c.program = std::make_shared<passes::KernelProgram>(std::move(*m.program));
  c.kernels = codegen::render_cuda(*c.program, prefix, generic);
  return c;
}

// ---- the emulator: rendered kernels compiled as host code ----

// Every rendered kernel of `cases` in one module of the emulated driver (tests/emulation: it
// compiles the source for the host, once per distinct source, and launches run on host
// threads; device pointers are host addresses, so kernels work on the runner's cpu buffers).
class Emulator {
 public:
  explicit Emulator(const std::vector<Case>& cases) {
    if (!cuda::emulated()) {
      error_ = "the emulated CUDA driver is not loaded: " + cuda_unavailable_reason();
      return;
    }
    std::ostringstream src;
    src << codegen::cuda_prelude();
    for (const Case& c : cases)
      for (const auto& r : c.kernels)
        if (r.kernel && !r.kernel->epilogue) src << r.kernel->body << "\n";  // (with its NAME_emu entry points)
    try {
      module_ = std::make_unique<cuda::Module>(src.str());
    } catch (const Error& e) {
      error_ = e.what();
    }
  }
  const std::string& error() const { return error_; }

  using Entry = std::function<void(void**, unsigned, unsigned)>;
  Entry entry(const std::string& name) const {
    void* f = module_->function(name);
    return [f](void** params, unsigned grid, unsigned block) { cuda::launch(f, grid, block, params); };
  }

  // cuLaunchKernel's convention: a pointer to each argument's value.
  static std::vector<void*> words(std::vector<uint64_t>& v) {
    std::vector<void*> p;
    for (uint64_t& x : v) p.push_back(&x);
    return p;
  }

  // The kernel implementations the program runner calls: each rendered kernel launched on
  // the emulator (small blocks and few of them), its status word raised as the backend would.
  std::vector<passes::KernelImpl> impls(const Case& c) const {
    std::vector<passes::KernelImpl> out(c.program->kernels.size());
    for (const auto& r : c.kernels) {
      if (!r.kernel || r.kernel->epilogue) continue;
      const codegen::CudaKernel k = *r.kernel;
      Entry main = entry(k.name), finish = k.finish.empty() ? nullptr : entry(k.finish);
      out[size_t(k.kernel)] = [k, main, finish](std::span<const Tensor> buffers, std::span<const ir::Slot> inputs) {
        std::vector<uint64_t> v = codegen::cuda_operand_params(k, buffers, inputs);
        uint64_t status = 0;
        v.push_back(uint64_t(reinterpret_cast<uintptr_t>(&status)));
        codegen::CudaLaunch l = codegen::cuda_launch_dims(k, 1, 64);
        if (l.parts) {  // two steps: the slots (poisoned), then their count
          std::vector<uint64_t> parts(codegen::cuda_parts_bytes(k, l) / sizeof(uint64_t), 0xdeadbeefdeadbeefull);
          v.push_back(uint64_t(reinterpret_cast<uintptr_t>(parts.data())));
          v.push_back(l.parts);
          main(words(v).data(), l.grid, l.block);
          finish(words(v).data(), l.finish_grid, l.block);
        } else {
          main(words(v).data(), l.grid, l.block);
        }
        if (status == 0) return;
        size_t bit = size_t(std::countr_zero(status));
        ASSERT_LT(bit, k.checks.size());
        KILN_FAIL(k.checks[bit].first, k.checks[bit].second);
      };
    }
    return out;
  }

 private:
  std::unique_ptr<cuda::Module> module_;
  std::string error_;
};

std::string show(const Tensor& t) {
  std::ostringstream o;
  o << t;
  return o.str();
}

// Runs each case on the emulator and on the reference executor, inputs and outputs compared.
// `compiled`: the cases whose kernels make the emulator's module (by default `cases`).
void expect_cases_match(const std::vector<Case>& cases, uint64_t seed = 7, const std::vector<Case>* compiled = nullptr) {
  Emulator emu(compiled ? *compiled : cases);
  ASSERT_TRUE(emu.error().empty()) << emu.error();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    int rendered = 0;
    for (const auto& r : c.kernels) rendered += r.kernel.has_value();
    std::vector<ir::Slot> in;
    if (c.inputs.empty()) {
      in = kiln::testing::random_inputs(c.graph, seed);
    } else {
      // (traced graphs take their tensor inputs in call order; host numbers became constants)
      for (const Tensor& t : c.inputs) {
        in.emplace_back();
        in.back().tensor = t;
      }
    }
    auto in_ref = kiln::testing::clone_slots(in), in_got = kiln::testing::clone_slots(in);
    std::vector<ir::Slot> want = ir::Executable(c.graph).run_slots(in_ref);
    std::vector<Tensor> got;
    try {
      got = passes::ProgramRunner(*c.program, emu.impls(c)).run(in_got);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.name << ": " << e.what() << "\n" << passes::print(*c.program);
      continue;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(kiln::testing::close(got[i], want[i].tensor, c.floor))
          << c.name << ": output " << i << "\n"
          << (got[i].numel() <= 256 ? show(got[i]) + "\nwant\n" + show(want[i].tensor) + "\n" : "")
          << passes::print(*c.program) << codegen::emit_cuda(*c.program, codegen::CudaEmit::Source);
    }
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].is_scalar) continue;
      EXPECT_TRUE(kiln::testing::close(in_got[i].tensor, in_ref[i].tensor)) << c.name << ": input " << i;
    }
    EXPECT_GT(rendered, 0) << c.name << ": no kernel was rendered\n" << passes::print(*c.program);
  }
}

std::vector<Case> workload_cases(bool generic = false) {
  std::vector<Case> cases;
  for (auto& [name, g] : kiln::testing::workload_graphs())
    cases.push_back(make_case(name, std::move(g), (generic ? "gw" : "w") + std::to_string(cases.size()) + "_k", generic));
  return cases;
}

TEST(CudaEmulation, EveryWorkloadMatchesTheReferenceExecutor) { expect_cases_match(workload_cases()); }
TEST(CudaEmulation, EveryWorkloadMatchesWithSizeGenericKernels) { expect_cases_match(workload_cases(true)); }

// ---- ops, dtypes, layouts ----

struct OpCase {
  std::string name;
  Fn fn;
  std::vector<Tensor> inputs;
};

Tensor values(DType dt, std::vector<int64_t> sizes, bool nonzero = false) {
  Tensor x;
  if (is_floating(dt)) x = (randn(sizes) * 3).to(dt);
  else if (dt == kBool) x = randint(0, 2, sizes).to(kBool);
  else x = randint(dt == kUInt8 ? 1 : -9, 10, sizes).to(dt);
  if (nonzero && !is_floating(dt)) x = where(x.eq(0), full({}, 1, TensorOptions(dt)), x);
  return x;
}

std::vector<Case> op_cases() {
  manual_seed(3);
  std::vector<OpCase> ops;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kInt8}) {
    std::string d(name(dt));
    bool fl = is_floating(dt);
    ops.push_back({"add_mul " + d, [](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1] * v[0]}; },
                   {values(dt, {1023}), values(dt, {1023})}});
    ops.push_back({"broadcast_sub " + d, [](const std::vector<Tensor>& v) { return std::vector{v[0] - v[1]}; },
                   {values(dt, {7, 33}), values(dt, {33})}});
    ops.push_back({"transposed " + d, [](const std::vector<Tensor>& v) { return std::vector{v[0].t() * v[1]}; },
                   {values(dt, {9, 13}), values(dt, {13, 9})}});
    ops.push_back({"maximum_minimum " + d, [](const std::vector<Tensor>& v) { return std::vector{maximum(v[0], v[1]), minimum(v[0], v[1])}; },
                   {values(dt, {100}), values(dt, {100})}});
    ops.push_back({"sum_rows " + d, [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {1})}; }, {values(dt, {5, 77})}});
    ops.push_back({"amax_amin " + d, [](const std::vector<Tensor>& v) { return std::vector{amax(v[0], {1}), amin(v[0], {0})}; },
                   {values(dt, {6, 40})}});
    ops.push_back({"where_cmp " + d, [](const std::vector<Tensor>& v) { return std::vector{where(v[0] > v[1], v[0], v[1])}; },
                   {values(dt, {65}), values(dt, {65})}});
    if (fl) {
      ops.push_back({"transcendental " + d,
                     [](const std::vector<Tensor>& v) { return std::vector{exp(v[0] * 0.1) + sin(v[0]) * tanh(v[0]) + log1p(abs(v[0]))}; },
                     {values(dt, {257})}});
      ops.push_back({"softmax " + d, [](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1), log_softmax(v[0], 0)}; },
                     {values(dt, {12, 50})}});
      ops.push_back({"mean_var " + d, [](const std::vector<Tensor>& v) { return std::vector{mean(v[0], {1}), var(v[0], {1})}; },
                     {values(dt, {4, 300})}});
      ops.push_back({"round_family " + d,
                     [](const std::vector<Tensor>& v) { return std::vector{floor(v[0]) + ceil(v[0]) + round(v[0]) + trunc(v[0])}; },
                     {values(dt, {99})}});
      // (a 16-bit product is rounded by eager but kept in float32 by a kernel: a conversion
      // to an integer right after it may differ by one, so the product is float32 and up)
      ops.push_back({"to_int " + d,
                     [](const std::vector<Tensor>& v) {
                       Tensor x = v[0].element_size() == 2 ? v[0] : v[0] * 10;
                       return std::vector{x.to(kInt32), v[0].to(kInt8)};
                     },
                     {values(dt, {64})}});
    } else {
      ops.push_back({"int_div " + d, [](const std::vector<Tensor>& v) { return std::vector{floor_divide(v[0], v[1]), remainder(v[0], v[1])}; },
                     {values(dt, {200}), values(dt, {200}, true)}});
      ops.push_back({"int_to_float " + d, [](const std::vector<Tensor>& v) { return std::vector{v[0].to(kFloat32) * 0.5}; },
                     {values(dt, {31})}});
      ops.push_back({"prod " + d, [](const std::vector<Tensor>& v) { return std::vector{prod(v[0], {1})}; }, {values(dt, {3, 5})}});
    }
  }
  ops.push_back({"any_all", [](const std::vector<Tensor>& v) { return std::vector{any(v[0], {1}), all(v[0], {1})}; }, {values(kBool, {9, 40})}});
  ops.push_back({"logical", [](const std::vector<Tensor>& v) { return std::vector{logical_and(v[0], v[1]), logical_xor(v[0], v[1]), logical_not(v[0])}; },
                 {values(kBool, {70}), values(kBool, {70})}});
  ops.push_back({"size_one", [](const std::vector<Tensor>& v) { return std::vector{v[0] * 2 + 1}; }, {values(kFloat32, {1})}});
  ops.push_back({"size_zero", [](const std::vector<Tensor>& v) { return std::vector{v[0] * 2 + 1}; }, {values(kFloat32, {0, 4})}});
  ops.push_back({"misaligned_slice", [](const std::vector<Tensor>& v) { return std::vector{v[0].slice(0, 1, 1024) * 3}; },
                 {values(kFloat32, {1024})}});
  ops.push_back({"inplace", [](const std::vector<Tensor>& v) {
                   Tensor x = v[0];
                   x.mul_(2).add_(v[1]);
                   return std::vector{x};
                 },
                 {values(kFloat32, {301}), values(kFloat32, {301})}});
  ops.push_back({"cumsum", [](const std::vector<Tensor>& v) { return std::vector{cumsum(v[0], 1), cumsum(v[1], 0)}; },
                 {values(kFloat32, {5, 37}), values(kInt64, {20, 3})}});
  std::vector<Case> cases;
  // host numbers: kernel parameters passed by value
  cases.push_back(make_case("host numbers",
                            ir::parse("graph @g(%x: f32[50]{1}, %s: scalar<f64>, %n: scalar<i64>) {\n"
                                      "  %0 = mul(%x, %s) : f32[50]{1}\n"
                                      "  %1 = add(%0, %n) {alpha=1} : f32[50]{1}\n"
                                      "  return %1\n}\n"),
                            "h_k"));
  for (const OpCase& op : ops)
    for (ir::Graph& g : trace(op.fn, {op.inputs})) {
      cases.push_back(make_case(op.name, std::move(g), "o" + std::to_string(cases.size()) + "_k"));
      cases.back().inputs = op.inputs;
      // eager rounds a 16-bit intermediate (y * x) that a kernel keeps in float32: with
      // operands up to 30 that costs up to half a unit of the intermediate's last place
      DType dt = op.inputs[0].dtype();
      if (dt == kBFloat16) cases.back().floor = {0, 0.35};
      if (dt == kFloat16) cases.back().floor = {0, 0.05};
    }
  return cases;
}

TEST(CudaEmulation, OpsAcrossDtypesAndLayoutsMatch) { expect_cases_match(op_cases()); }

// ---- every strategy ----

codegen::CudaStrategy strategy_of(const Case& c) {
  for (const auto& r : c.kernels)
    if (r.kernel) return r.kernel->strategy;
  ADD_FAILURE() << c.name << ": nothing rendered";
  return codegen::CudaStrategy::Elementwise;
}

struct Want {
  std::string name;
  Fn fn;
  std::vector<Tensor> inputs;
  codegen::CudaStrategy strategy;
  std::vector<Tensor> other;  // the same structure at other sizes (the same size-generic kernel)
};
std::vector<Want> strategy_wants() {
  manual_seed(11);
  using S = codegen::CudaStrategy;
  return {
      {"split sum", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0]), amax(v[0])}; }, {randn({200000})}, S::Split, {randn({150001})}},
      // a row store that needs no reduction, written by the partial step as it reads (early
      // stores: the speculated `if (x.sum() > 0) return x * 2;`), odd lengths for the tail
      {"split with early stores", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0]), v[0] * 2 + 1}; },
       {randn({200001})}, S::Split, {randn({150003})}},
      {"split with early stores f16", [](const std::vector<Tensor>& v) { return std::vector{amax(v[0]), exp(v[0])}; },
       {randn({70000}).to(kFloat16)}, S::Split, {randn({99998}).to(kFloat16)}},
      // few long contiguous rows: chunks of a block each (rows of 40000; per-channel means over
      // [N, C, H, W], two reduced loops; an early store beside a row sum)
      {"row split", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {1}), amax(v[0], {1})}; },
       {randn({3, 40000})}, S::RowSplit, {randn({5, 33333})}},
      {"row split over channels", [](const std::vector<Tensor>& v) { return std::vector{mean(v[0], {0, 2, 3})}; },
       {randn({4, 3, 70, 90})}, S::RowSplit, {randn({3, 2, 80, 90})}},
      {"row split with early stores", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {1}), v[0] * 3}; },
       {randn({2, 20001})}, S::RowSplit, {randn({3, 17000})}},
      {"split mean f64", [](const std::vector<Tensor>& v) { return std::vector{mean(v[0])}; }, {randn({70000}, TensorOptions(kFloat64))}, S::Split,
       {randn({99999}, TensorOptions(kFloat64))}},
      {"block rows", [](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1)}; }, {randn({3, 5000})}, S::BlockRow, {randn({5, 6001})}},
      {"warp rows", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {1}, true) * v[0]}; }, {randn({40, 100})}, S::WarpRow, {randn({33, 97})}},
      {"thread rows (columns)", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {0})}; }, {randn({50, 3000})}, S::ThreadRow, {randn({61, 2500})}},
      // rows strided in memory, too few for a thread each: chunks of rows, then a finishing kernel
      {"column split", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {0}), amax(v[0], {0})}; }, {randn({3000, 70})},
       S::ColumnSplit, {randn({2500, 33})}},
      // a per-row store reading another operand at the row (the finishing kernel loads it)
      {"column split mean + bias", [](const std::vector<Tensor>& v) { return std::vector{mean(v[0], {0}) + v[1]}; },
       {randn({4000, 20}), randn({20})}, S::ColumnSplit, {randn({2100, 40}), randn({40})}},
      // two reduced loops (the chunks cut their flattened index), integers
      {"column split 3d int64", [](const std::vector<Tensor>& v) { return std::vector{sum(v[0], {0, 1})}; },
       {randint(-100, 100, {64, 50, 24}, kInt64)}, S::ColumnSplit, {randint(-100, 100, {70, 40, 30}, kInt64)}},
      {"thread rows (scan)", [](const std::vector<Tensor>& v) { return std::vector{cumsum(v[0], 1)}; }, {randn({70, 33})}, S::ThreadRow, {randn({20, 50})}},
      {"elementwise 3d", [](const std::vector<Tensor>& v) { return std::vector{v[0].permute({2, 0, 1}) + 1}; }, {randn({5, 6, 7})}, S::Elementwise, {randn({3, 4, 9})}},
      // partial tiles on both sides; a broadcast operand read directly beside the staged one
      {"tiled transpose", [](const std::vector<Tensor>& v) { return std::vector{v[0].t() * v[1] + v[2]}; },
       {randn({70, 45}), randn({45, 70}), randn({70})}, S::Tiled,
       {randn({40, 33}), randn({33, 40}), randn({40})}},
      // a batch loop outside the tile, two staged operands in float16, two outputs
      {"tiled batched f16",
       [](const std::vector<Tensor>& v) {
         Tensor a = v[0].transpose(1, 2), b = v[1].permute({0, 2, 1});
         return std::vector{a - b, a.to(kFloat32) * b.to(kFloat32)};
       },
       {randn({3, 40, 33}).to(kFloat16), randn({3, 40, 33}).to(kFloat16)}, S::Tiled,
       {randn({2, 17, 50}).to(kFloat16), randn({2, 17, 50}).to(kFloat16)}},
      // integer division by zero checked inside a tile
      {"tiled int", [](const std::vector<Tensor>& v) { return std::vector{floor_divide(v[0].t(), v[1])}; },
       {randint(-50, 50, {32, 48}, kInt32), randint(1, 9, {48, 32}, kInt32)}, S::Tiled,
       {randint(-50, 50, {20, 36}, kInt32), randint(1, 9, {36, 20}, kInt32)}},
  };
}
std::vector<Case> strategy_cases(bool generic = false) {
  std::vector<Case> cases;
  for (const Want& w : strategy_wants())
    for (ir::Graph& g : trace(w.fn, {w.inputs})) {
      cases.push_back(make_case(w.name, std::move(g), "s" + std::to_string(cases.size()) + "_k", generic));
      cases.back().inputs = w.inputs;
    }
  return cases;
}

TEST(CudaEmulation, EveryStrategyMatches) {
  std::vector<Want> wants = strategy_wants();
  std::vector<Case> cases = strategy_cases();
  ASSERT_EQ(cases.size(), wants.size());
  for (size_t i = 0; i < wants.size(); ++i)
    EXPECT_EQ(codegen::cuda_strategy_name(strategy_of(cases[i])), codegen::cuda_strategy_name(wants[i].strategy)) << wants[i].name;
  expect_cases_match(cases);
}

// Size-generic kernels (render_cuda's `generic`): each strategy's case rendered at its sizes and
// at other sizes of the same structure is one body (up to its entry points' names), and the
// kernel compiled for the first sizes, launched with the size arguments of the second, computes
// the second's results.
TEST(CudaEmulation, SizeGenericKernelsServeOtherSizes) {
  std::vector<Want> wants = strategy_wants();
  std::vector<Case> first, second;
  for (const Want& w : wants) {
    std::vector<ir::Graph> a = trace(w.fn, {w.inputs}), b = trace(w.fn, {w.other});
    ASSERT_EQ(a.size(), 1u) << w.name;
    ASSERT_EQ(b.size(), 1u) << w.name;
    const std::string n = std::to_string(first.size());
    first.push_back(make_case(w.name, std::move(a[0]), "ga" + n + "_k", true));
    first.back().inputs = w.inputs;
    second.push_back(make_case(w.name + " at other sizes", std::move(b[0]), "gb" + n + "_k", true));
    second.back().inputs = w.other;
  }
  for (size_t i = 0; i < wants.size(); ++i) {
    SCOPED_TRACE(wants[i].name);
    EXPECT_EQ(codegen::cuda_strategy_name(strategy_of(second[i])), codegen::cuda_strategy_name(wants[i].strategy));
    ASSERT_EQ(first[i].kernels.size(), second[i].kernels.size());
    int rendered = 0;
    for (size_t j = 0; j < first[i].kernels.size(); ++j) {
      auto& ka = first[i].kernels[j].kernel;
      auto& kb = second[i].kernels[j].kernel;
      ASSERT_EQ(ka.has_value(), kb.has_value());
      if (!ka) continue;
      ++rendered;
      EXPECT_TRUE(ka->generic && kb->generic);
      EXPECT_NE(ka->size_args, kb->size_args) << "the sizes differ, so must their arguments";
      std::string body = kb->body;
      for (size_t at = body.find(kb->name); at != std::string::npos; at = body.find(kb->name, at + ka->name.size()))
        body.replace(at, kb->name.size(), ka->name);
      EXPECT_EQ(body, ka->body) << "not the same kernel at other sizes";
      // (the second case launches the first's kernel)
      if (!kb->finish.empty()) kb->finish = ka->finish;
      kb->name = ka->name;
    }
    EXPECT_GT(rendered, 0);
  }
  expect_cases_match(second, 7, &first);
  expect_cases_match(first);
}

TEST(CudaEmulation, IntegerDivisionByZeroRaisesEagersError) {
  Fn fn = [](const std::vector<Tensor>& v) { return std::vector{floor_divide(v[0], v[1])}; };
  std::vector<Tensor> in = {full({40}, 7, TensorOptions(kInt32)), full({40}, 2, TensorOptions(kInt32))};
  std::vector<Case> cases;
  for (ir::Graph& g : trace(fn, {in})) cases.push_back(make_case("div", std::move(g), "d_k"));
  Emulator emu(cases);
  ASSERT_TRUE(emu.error().empty()) << emu.error();
  std::vector<ir::Slot> slots(2);
  Tensor b = full({40}, 2, TensorOptions(kInt32));
  b.slice(0, 17, 18).fill_(0);
  slots[0].tensor = in[0];
  slots[1].tensor = b;
  try {
    passes::ProgramRunner(*cases[0].program, emu.impls(cases[0])).run(slots);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeroDivisionError"), std::string::npos) << e.what();
  }
}

// ---- memcheck: the sanitizer build ----

// Under the sanitizer build the emulated driver is a memcheck: kernels are compiled with
// AddressSanitizer and each device allocation's bytes past its size are poisoned, so every
// emulated test of the suite fails where a kernel reads or writes outside its buffers. Here a
// kernel reading one float past a 10-float buffer dies with ASan's report; the last element
// reads fine. (Skipped in the other builds.)
TEST(CudaEmulationDeathTest, AKernelReadingPastItsBufferFailsUnderTheSanitizer) {
  if (!dlsym(RTLD_DEFAULT, "__asan_poison_memory_region")) GTEST_SKIP() << "needs the AddressSanitizer build (KILN_SANITIZE=ON)";
  if (!cuda::emulated()) GTEST_SKIP() << "the emulated CUDA driver is not loaded";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string source = codegen::cuda_prelude() + R"(
extern "C" __global__ void kiln_past_end(const float* p, float* out, unsigned long long at) { out[0] = p[at]; }
#if defined(KILN_CUDA_EMULATION)
extern "C" void kiln_past_end_emu(void** a, unsigned grid, unsigned block) {
  kiln_emu::launch(grid, block, [&] {
    if (threadIdx.x == 0) kiln_past_end(*(const float**)a[0], *(float**)a[1], *(unsigned long long*)a[2]);
  });
}
extern "C" const int kiln_past_end_emu_params = 3;
#endif
)";
  auto read_at = [&](uint64_t at) {
    cuda::Module m(source);
    void* f = m.function("kiln_past_end");
    void* p = cuda::allocate(10 * sizeof(float));
    void* out = cuda::allocate(sizeof(float));
    uint64_t v[3] = {uint64_t(reinterpret_cast<uintptr_t>(p)), uint64_t(reinterpret_cast<uintptr_t>(out)), at};
    void* params[3] = {&v[0], &v[1], &v[2]};
    cuda::launch(f, 1, 32, params);
    cuda::synchronize();
    cuda::release(p, 10 * sizeof(float));
    cuda::release(out, sizeof(float));
  };
  read_at(9);
  // (ASan names a read of the poisoned tail use-after-poison, one past the block an overflow)
  EXPECT_DEATH(read_at(10), "AddressSanitizer: (use-after-poison|heap-buffer-overflow).*\n.*\n.*in kiln_past_end");
}

// ---- the rendered source ----

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string source_of(const Fn& fn, const std::vector<Tensor>& in) {
  auto graphs = trace(fn, {in});
  passes::Module m = passes::optimize(graphs[0], {});
  return codegen::emit_cuda(*m.program, codegen::CudaEmit::Source);
}

TEST(CudaSource, ContiguousOperandsUseVectorAccessesAndThirtyTwoBitIndices) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0] + sin(v[1])}; }, {randn({4096}), randn({4096})});
  EXPECT_NE(s.find("4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("reinterpret_cast<const kiln_vec<float, 4>*>(p0 + base)"), std::string::npos) << s;
  EXPECT_NE(s.find("*reinterpret_cast<kiln_vec<float, 4>*>(s2 + base)"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned n = (unsigned)n_items;"), std::string::npos) << s;
  // past the parameters (the status word is a 64-bit pointer) and before the host emulation's
  // entry point, nothing 64-bit
  std::string body = s.substr(s.find("status) {"));
  body = body.substr(0, body.find("#if defined(KILN_CUDA_EMULATION)"));
  EXPECT_EQ(body.find("long long"), std::string::npos) << "64-bit index math where 32 bits fit:\n" << body;
  // half storage: 8 elements per 16 bytes, computed in float
  std::string h = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0] * v[0]}; }, {randn({4096}).to(kFloat16)});
  EXPECT_NE(h.find("kiln_vec<unsigned short, 8>"), std::string::npos) << h;
  EXPECT_NE(h.find("kiln_h2f("), std::string::npos) << h;
}

TEST(CudaSource, StridedOperandsGetIndexMathAndNoVectorAccess) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].slice(1, 0, 128, 2) + v[1]}; },
                            {randn({64, 130}), randn({64, 64})});
  std::string body = s.substr(s.find("extern \"C\""));
  EXPECT_EQ(body.find("kiln_vec"), std::string::npos) << body;
  EXPECT_NE(body.find("% 64u"), std::string::npos) << body;
  EXPECT_NE(body.find("(int)c1 * 2]"), std::string::npos) << body;
}

// A broadcast operand of a specialised kernel is read per run of the innermost loop: a bias
// over rows as a vector at the vector's column, a column over columns as one element per
// vector. The runs must hold whole vectors (rows of 130 floats: two per vector; of 131: none).
TEST(CudaSource, BroadcastOperandsAreReadPerRunOfTheInnermostLoop) {
  auto add2 = [](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; };
  std::string bias = source_of(add2, {randn({64, 128}), randn({128})});
  EXPECT_NE(bias.find("reinterpret_cast<const kiln_vec<float, 4>*>(p0 + base)"), std::string::npos) << bias;
  EXPECT_NE(bias.find("reinterpret_cast<const kiln_vec<float, 4>*>(p1 + (int)c1)"), std::string::npos) << bias;
  std::string col = source_of(add2, {randn({64, 128}), randn({64, 1})});
  EXPECT_NE(col.find("kiln_vec<float, 4>*>(p0 + base)"), std::string::npos) << col;
  EXPECT_EQ(col.find("kiln_vec<float, 4>*>(p1"), std::string::npos) << col;
  EXPECT_NE(col.find("= p1[(int)c0];"), std::string::npos) << col;
  std::string two = source_of(add2, {randn({64, 130}), randn({130})});
  EXPECT_NE(two.find("kiln_vec<float, 2>*>(p1 + (int)c1)"), std::string::npos) << two;
  std::string none = source_of(add2, {randn({64, 131}), randn({131})});
  none = none.substr(none.find("extern \"C\""));
  EXPECT_EQ(none.find("kiln_vec"), std::string::npos) << none;
  // a narrowed matrix, rows 134 apart: its runs start two elements off a 16-byte line
  std::string narrowed = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].narrow(1, 0, 128) - v[1]}; },
                                   {randn({64, 134}), randn({128})});
  EXPECT_NE(narrowed.find("kiln_vec<float, 2>*>(p0 + "), std::string::npos) << narrowed;
}

// A size-generic kernel reads broadcast operands per run too (eager m + bias): one body for
// every size, whose vector path also checks when it runs what a specialised kernel knows from
// its sizes: the runs hold whole vectors (L1 % 4) and a run operand's other strides keep its
// vectors aligned (a weight over a batch, a slice of rows 68 apart: its row stride S1_1).
TEST(CudaSource, SizeGenericKernelsReadBroadcastOperandsPerRun) {
  auto generic = [](const kiln::testing::Fn& fn, std::vector<Tensor> in) {
    passes::Module m = passes::optimize(trace(fn, {in})[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program, "kiln_k", true);
    EXPECT_TRUE(r.size() == 1 && r[0].kernel && r[0].kernel->generic);
    return r.size() == 1 && r[0].kernel ? r[0].kernel->body : std::string();
  };
  auto add2 = [](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; };
  const std::string a = generic(add2, {randn({30, 40}), randn({40})}), b = generic(add2, {randn({53, 44}), randn({44})});
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find("if (kiln_aligned(p0, 16) && kiln_aligned(p1, 16) && kiln_aligned(s2, 16) && L1 % 4u == 0u) {"),
            std::string::npos)
      << a;
  EXPECT_NE(a.find("reinterpret_cast<const kiln_vec<float, 4>*>(p1 + (int)c1)"), std::string::npos) << a;
  const std::string w = generic([](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1].narrow(1, 0, 64)}; },
                                 {randn({3, 33, 64}), randn({33, 68})});
  EXPECT_NE(w.find("L2 % 4u == 0u && S1_1 % 4 == 0) {"), std::string::npos) << w;
}

// A row loop without a row cache counts its iterations on entry, so that the compiler unrolls
// it into groups of four loads with no bounds check between them (one load in flight per
// thread otherwise: row_sum at 72% of the copy's bandwidth on an H100). Parenthesised: the
// start and step are expressions.
TEST(CudaSource, RowLoopsCountTheirIterationsAndUnrollByFour) {
  // (rows of 50 runs of 100 elements 128 apart: element by element)
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].narrow(2, 0, 100).sum({1, 2})}; },
                            {randn({300, 50, 128})});
  EXPECT_NE(s.find("block-per-row"), std::string::npos) << s;
  EXPECT_EQ(s.find("kiln_vec<float"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned en = ((unsigned)threadIdx.x) < 5000u ? (5000u - ((unsigned)threadIdx.x) + (blockDim.x) - 1) / "
                   "(blockDim.x) : 0;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("#pragma unroll 4\n      for (unsigned ek = 0; ek < en; ++ek) {"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned e = ((unsigned)threadIdx.x) + ek * (blockDim.x);"), std::string::npos) << s;
}

// A reduction pass over contiguous rows reads 16 bytes per load (four of them in flight per
// thread in the unrolled loop), where the row's start is aligned; the rest of the row, or a
// row whose start is not aligned, element by element. The whole-tensor split reduction too.
TEST(CudaSource, ReductionPassesOverContiguousRowsReadSixteenBytesPerLoad) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({1})}; }, {randn({300, 5001})});
  EXPECT_NE(s.find("block-per-row, 300 rows, 4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned nvr = kiln_aligned(p0 + (int)row * 5001, 16) ? 5001u / 4u : 0u;"), std::string::npos) << s;
  EXPECT_NE(s.find("#pragma unroll 4\n      for (unsigned qk = 0; qk < qn; ++qk) {"), std::string::npos) << s;
  EXPECT_NE(s.find("const kiln_vec<float, 4> l0 = *reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)row * 5001 + base);"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const unsigned e = (nvr * 4u + (unsigned)threadIdx.x) + ek * (blockDim.x);"), std::string::npos) << s;

  std::string d = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum()}; }, {randn({100000}).to(kFloat64)});
  EXPECT_NE(d.find("split, 100000 elements, 2-wide vector accesses"), std::string::npos) << d;
  EXPECT_NE(d.find("reinterpret_cast<const kiln_vec<double, 2>*>(p0 + 0 + base)"), std::string::npos) << d;

  // float16 with float32: as many elements per load as the widest dtype's 16 bytes hold
  std::string h = source_of([](const std::vector<Tensor>& v) { return std::vector{(v[0] * v[1]).sum({1})}; },
                            {randn({64, 4096}).to(kFloat16), randn({64, 4096})});
  EXPECT_NE(h.find("kiln_vec<unsigned short, 4> l0"), std::string::npos) << h;
  EXPECT_NE(h.find("kiln_vec<float, 4> l1"), std::string::npos) << h;
}

// RowSplit's chunks go by vectors from their start (a multiple of 32 elements) where the row's
// operands are aligned, the early stores too; else, and past the chunk's whole vectors, element
// by element from where the vectors end (never before the chunk's start).
TEST(CudaSource, RowSplitChunksReadSixteenBytesPerLoad) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({1}), v[0] * 3}; },
                            {randn({3, 40001})});
  EXPECT_NE(s.find("row-split, 3 rows of 40001 elements in chunks, 4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned nv0 = kiln_aligned(p0 + (int)row * 40001, 16) && kiln_aligned(s2 + (int)row * 40001, 16) ? "
                   "hi / 4u : lo / 4u;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const unsigned nv0e = nv0 * 4u > lo ? nv0 * 4u : lo;"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned q = (lo / 4u + (unsigned)threadIdx.x) + qk * (blockDim.x);"), std::string::npos) << s;
  EXPECT_NE(s.find("*reinterpret_cast<kiln_vec<float, 4>*>(s2 + (int)row * 40001 + base) = w2;"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned e = (nv0e + (unsigned)threadIdx.x) + ek * (blockDim.x);"), std::string::npos) << s;
}

// Size-generic kernels (eager ops on GPU tensors) read their reduction passes by vectors too,
// the row's length and its stride read from parameters: one body for rows of 5001 and of 2900.
// Not over two reduced loops (a slice's, which do not merge into one), whose contiguity
// depends on the sizes.
TEST(CudaSource, SizeGenericReductionPassesReadVectorsToo) {
  auto render = [](const kiln::testing::Fn& fn, std::vector<Tensor> in) {
    auto graphs = trace(fn, {std::move(in)});
    passes::Module mod = passes::optimize(graphs.at(0), {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*mod.program, "kiln_k", true);
    EXPECT_TRUE(r.at(0).kernel.has_value());
    return r[0].kernel.value_or(codegen::CudaKernel{});
  };
  auto row_sums = [](const std::vector<Tensor>& v) { return std::vector{v[0].sum({1})}; };
  codegen::CudaKernel a = render(row_sums, {randn({300, 5001})}), b = render(row_sums, {randn({7, 2900})});
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(a.vector, 4);
  EXPECT_NE(a.body.find("const unsigned nvr = kiln_aligned(p0 + (int)row * S0_0, 16) ? row_len / 4u : 0u;"), std::string::npos)
      << a.body;
  EXPECT_NE(a.body.find("reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)row * S0_0 + base)"), std::string::npos) << a.body;
  codegen::CudaKernel two =
      render([](const std::vector<Tensor>& v) { return std::vector{v[0].narrow(2, 0, 99).sum({1, 2})}; }, {randn({20, 50, 100})});
  EXPECT_EQ(two.vector, 1);
  EXPECT_EQ(two.body.find("kiln_vec<float"), std::string::npos) << two.body;
}

// A transposed operand is staged through shared memory, read along its own contiguous dim
// (lanes tx walk it: stride 1), and read back transposed while the store walks its rows.
TEST(CudaSource, TransposedOperandsAreStagedThroughSharedMemory) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].t() + v[1]}; },
                            {randn({4096, 4096}), randn({4096, 4096})});
  EXPECT_NE(s.find("tiled, 16384 tiles of 32 x 32"), std::string::npos) << s;
  EXPECT_NE(s.find("__shared__ float tile0[32][33];"), std::string::npos) << s;
  EXPECT_NE(s.find("st0[kk] = p0[(int)ct + (int)ca * 4096];"), std::string::npos) << s;
  EXPECT_NE(s.find("tile0[k][tx] = st0[kk];"), std::string::npos) << s;
  EXPECT_NE(s.find("= tile0[tx][k];"), std::string::npos) << s;
  EXPECT_NE(s.find("s2[(int)ct * 4096 + (int)ca] = "), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned ct = bt + k, ca = ba + tx;"), std::string::npos) << s;
  // each warp's rows of a tile four at a time: loaded into registers in one unrolled loop (their
  // loads in flight together), stored or used in the next
  EXPECT_EQ(count_of(s, "for (unsigned k0 = ty; k0 < 32u; k0 += 4u * ny) {"), 2u) << s;
  EXPECT_EQ(count_of(s, "#pragma unroll\n      for (unsigned kk = 0; kk < 4u; ++kk) {"), 4u) << s;
  // y is read where it is stored: straight from memory, ahead of the stores. Its rows of the
  // computing loop's first step are read before the staging, so that its loads and the
  // staged ones are in flight together across the barrier; later steps (blocks of fewer than
  // 256 threads) read theirs in the loop.
  EXPECT_EQ(count_of(s, "ld1[kk] = p1[(int)ct * 4096 + (int)ca];"), 2u) << s;
  EXPECT_LT(s.find("ld1[kk] = p1[(int)ct * 4096 + (int)ca];"), s.find("st0[kk] = p0[")) << s;
  EXPECT_NE(s.find("if (k0 != ty) {"), std::string::npos) << s;
  EXPECT_NE(s.find("= ld1[kk];"), std::string::npos) << s;
}

// KILN_CUDA_TILE=64: 64 x 64 tiles, a lane taking two columns of a row (lx = tx + 32 c), a
// step's loads in registers [kk * 2 + c]; the transposed reads still fall in 32 banks (rows of
// 65). The tiles stay 32 wide where a loop is shorter than 64 or the staged tiles would take
// more than 40 KiB of shared memory (three float32 operands, or two float64 ones).
TEST(CudaSource, WideTilesTakeTwoColumnsPerLane) {
  kiln::testing::ScopedEnv wide("KILN_CUDA_TILE", "64");
  auto add_t = [](const std::vector<Tensor>& v) { return std::vector{v[0].t() + v[1]}; };
  std::string s = source_of(add_t, {randn({4096, 4096}), randn({4096, 4096})});
  EXPECT_NE(s.find("tiled, 4096 tiles of 64 x 64"), std::string::npos) << s;
  EXPECT_NE(s.find("__shared__ float tile0[64][65];"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned lx = tx + c * 32u;"), std::string::npos) << s;
  EXPECT_NE(s.find("st0[kk * 2u + c] = p0[(int)ct + (int)ca * 4096];"), std::string::npos) << s;
  EXPECT_NE(s.find("tile0[k][lx] = st0[kk * 2u + c];"), std::string::npos) << s;
  EXPECT_NE(s.find("= tile0[lx][k];"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned ct = bt + k, ca = ba + lx;"), std::string::npos) << s;
  EXPECT_NE(s.find("float ld1[8] = {};"), std::string::npos) << s;
  EXPECT_EQ(count_of(s, "ld1[kk * 2u + c] = p1[(int)ct * 4096 + (int)ca];"), 2u) << s;
  EXPECT_EQ(count_of(s, "for (unsigned k0 = ty; k0 < 64u; k0 += 4u * ny) {"), 2u) << s;
  EXPECT_EQ(count_of(s, "for (unsigned c = 0; c < 2u; ++c) {"), 5u) << s;
  auto tiles_of = [&](const kiln::testing::Fn& fn, const std::vector<Tensor>& in) {
    std::string src = source_of(fn, in);
    const size_t at = src.find(" tiles of ");
    return at == std::string::npos ? std::string("not tiled") : src.substr(at + 10, 7);
  };
  EXPECT_EQ(tiles_of(add_t, {randn({40, 4096}), randn({4096, 40})}), "32 x 32");
  auto staged = [](int n) {
    return [n](const std::vector<Tensor>& v) {
      Tensor r = v[0];
      for (int j = 0; j < n; ++j) r = r + v[size_t(j) + 1].t();
      return std::vector{r};
    };
  };
  EXPECT_EQ(tiles_of(staged(2), {randn({256, 256}), randn({256, 256}), randn({256, 256})}), "64 x 64");
  EXPECT_EQ(tiles_of(staged(3), {randn({256, 256}), randn({256, 256}), randn({256, 256}), randn({256, 256})}), "32 x 32");
  auto f64 = [](std::vector<int64_t> s) { return randn(s).to(kFloat64); };
  EXPECT_EQ(tiles_of(staged(1), {f64({256, 256}), f64({256, 256})}), "64 x 64");
  EXPECT_EQ(tiles_of(staged(2), {f64({256, 256}), f64({256, 256}), f64({256, 256})}), "32 x 32");
  // anything but 32 or 64 is refused, naming the variable
  kiln::testing::ScopedEnv odd("KILN_CUDA_TILE", "48");
  try {
    source_of(add_t, {randn({256, 256}), randn({256, 256})});
    ADD_FAILURE() << "KILN_CUDA_TILE=48 was accepted";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CUDA_TILE=48"), std::string::npos) << e.what();
  }
}

// The grid of a grid-stride kernel: at most KILN_CUDA_GRID_PER_SM blocks per SM, or with 0 (the
// default) one block per step of work (a tile here); a split reduction keeps its own count.
// (The emulated driver sets 8 where the variable is unset: the default is read with it unset.)
TEST(CudaLaunchDims, TheGridPerSmComesFromTheEnvironment) {
  auto kernel_of = [](const kiln::testing::Fn& fn, std::vector<Tensor> in) {
    passes::Module m = passes::optimize(trace(fn, {in})[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program);
    return r.size() == 1 && r[0].kernel ? *r[0].kernel : codegen::CudaKernel{};
  };
  const codegen::CudaKernel tiled = kernel_of([](const std::vector<Tensor>& v) { return std::vector{v[0].t() + v[1]}; },
                                              {randn({4096, 4096}), randn({4096, 4096})});
  const codegen::CudaKernel split =
      kernel_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum()}; }, {randn({4096, 4096})});
  ASSERT_EQ(tiled.strategy, codegen::CudaStrategy::Tiled);
  ASSERT_EQ(split.strategy, codegen::CudaStrategy::Split);
  ASSERT_EQ(tiled.items, 16384);
  // (RowSplit: enough chunks per row for 8 blocks per SM, each at least 8192 elements; per-channel
  // statistics over [8, 64, 56, 56] are 64 rows of 25088: 17 chunks wanted, 3 long enough)
  const codegen::CudaKernel rows =
      kernel_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({0, 2, 3})}; }, {randn({8, 64, 56, 56})});
  ASSERT_EQ(rows.strategy, codegen::CudaStrategy::RowSplit);
  const codegen::CudaLaunch rl = codegen::cuda_launch_dims(rows, 132);
  EXPECT_EQ(rl.parts, 3u);
  EXPECT_EQ(rl.grid, 64u * 3);
  EXPECT_EQ(rl.finish_grid, 1u);
  EXPECT_EQ(codegen::cuda_launch_dims(rows, 1).parts, 1u);  // (one SM: a chunk per row already fills it)
  {
    kiln::testing::ScopedEnv unset("KILN_CUDA_GRID_PER_SM", nullptr);
    EXPECT_EQ(codegen::cuda_launch_dims(tiled, 132).grid, 16384u);
    EXPECT_EQ(codegen::cuda_launch_dims(split, 132).grid, 132u * 4);
  }
  {
    kiln::testing::ScopedEnv eight("KILN_CUDA_GRID_PER_SM", "8");
    EXPECT_EQ(codegen::cuda_launch_dims(tiled, 132).grid, 132u * 8);
    EXPECT_EQ(codegen::cuda_launch_dims(split, 132).grid, 132u * 4);
  }
  {
    kiln::testing::ScopedEnv four("KILN_CUDA_GRID_PER_SM", "4");
    EXPECT_EQ(codegen::cuda_launch_dims(tiled, 132).grid, 132u * 4);
  }
  for (const char* bad : {"-1", "many", "8x", "2000"}) {
    kiln::testing::ScopedEnv b("KILN_CUDA_GRID_PER_SM", bad);
    try {
      codegen::cuda_launch_dims(tiled, 132);
      ADD_FAILURE() << "KILN_CUDA_GRID_PER_SM=" << bad << " was accepted";
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("KILN_CUDA_GRID_PER_SM=") + bad), std::string::npos) << e.what();
    }
  }
}

// Layernorm over rows of `n` (the mean, the variance, the stores: three passes over each row),
// its kernel's body without the emulation entry points.
std::string layernorm_body(int64_t n) {
  std::string s = source_of(
      [](const std::vector<Tensor>& v) {
        Tensor mean = v[0].mean({-1}, true), var = v[0].var({-1}, 0, true);
        return std::vector{(v[0] - mean) / sqrt(var + 1e-5) * v[1] + v[2]};
      },
      {randn({300, n}), randn({n}), randn({n})});
  std::string body = s.substr(s.find("// kernel k0"));
  return body.substr(0, body.find("#if defined(KILN_CUDA_EMULATION)"));
}

// A warp-per-row kernel of several passes over its rows (layernorm: the mean, the variance,
// the stores) reads each row once: the lanes keep their elements in registers (an unrolled
// pass, `it` a constant in each copy). The weight and bias, the same for every row, are read
// where they are used. Where every operand is contiguous along the row, a lane owns four
// neighbouring floats per step and reads and writes them 16 bytes at a time; the kernel checks
// once that its operands are aligned (then so is every row: 1000 is whole vectors) and walks
// the rows element by element otherwise.
TEST(CudaSource, WarpRowsKeepTheirRowInRegistersAcrossPasses) {
  std::string body = layernorm_body(1000);
  EXPECT_NE(body.find("warp-per-row, 300 rows, 4-wide vector accesses"), std::string::npos) << body;
  const size_t split = body.find("  } else {\n");
  ASSERT_NE(split, std::string::npos) << body;
  EXPECT_NE(body.find("if (kiln_aligned(p0, 16) && kiln_aligned(p1, 16) && kiln_aligned(p2, 16) && kiln_aligned(s3, 16)) {"),
            std::string::npos)
      << body;
  const std::string vec = body.substr(0, split), scalar = body.substr(split);
  // by vectors: eight steps of four elements per lane
  EXPECT_NE(vec.find("float rc0[32];  // row cache"), std::string::npos) << vec;
  EXPECT_NE(vec.find("const unsigned b = (it * 32u + (unsigned)(threadIdx.x & 31u)) * 4u;"), std::string::npos) << vec;
  EXPECT_EQ(count_of(vec, "live ? *reinterpret_cast<const kiln_vec<float, 4>*>(rp0 + b) : "), 1u) << vec;  // the row: once
  EXPECT_EQ(count_of(vec, "rc0[it * 4 + u] = v0;"), 1u) << vec;
  EXPECT_EQ(count_of(vec, "= rc0[it * 4 + u];"), 2u) << vec;  // then from registers in the two later passes
  EXPECT_EQ(count_of(vec, "live ? *reinterpret_cast<const kiln_vec<float, 4>*>(rp1 + b) : "), 1u) << vec;  // the weight: not cached
  EXPECT_EQ(count_of(vec, "if (live) *reinterpret_cast<kiln_vec<float, 4>*>(rp3 + b) = w3;"), 1u) << vec;
  EXPECT_EQ(vec.find("p0["), std::string::npos) << vec;
  EXPECT_EQ(vec.find("s3["), std::string::npos) << vec;
  // element by element
  EXPECT_NE(scalar.find("float rc0[32];  // row cache"), std::string::npos) << scalar;
  EXPECT_EQ(count_of(scalar, "p0["), 1u) << scalar;
  EXPECT_EQ(count_of(scalar, "= rc0[it];"), 2u) << scalar;
  EXPECT_EQ(count_of(scalar, "p1[(int)e]"), 1u) << scalar;
  EXPECT_EQ(count_of(scalar, "s3[(int)row * 1000 + (int)e] = "), 1u) << scalar;
  EXPECT_EQ(scalar.find("kiln_vec"), std::string::npos) << scalar;
  EXPECT_EQ(count_of(body, "#pragma unroll\n"), 9u) << body;  // three passes each, and the vectors' lanes
  EXPECT_EQ(body.find("rc1"), std::string::npos) << body;
  // rows that are not whole vectors, or rows a stride apart that is not, only the second loop
  for (int64_t n : {1002, 1003}) {
    std::string odd = layernorm_body(n);
    EXPECT_EQ(odd.find("kiln_vec"), std::string::npos) << odd;
    EXPECT_NE(odd.find("float rc0[32];  // row cache"), std::string::npos) << odd;
  }
  std::string sliced = source_of([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0].narrow(1, 0, 1024), 1)}; },
                                 {randn({30, 1030})});
  EXPECT_NE(sliced.find("float rc0[32];  // row cache"), std::string::npos) << sliced;
  EXPECT_EQ(sliced.find("kiln_vec<float"), std::string::npos) << sliced;
}

// Rows past 2048 go one per block; a block-per-row kernel of several passes keeps its row in
// shared memory instead (layernorm over 4096: the mean, the variance, the stores), each thread
// reading back the positions it wrote. Its passes go by 16-byte vectors, the stores too, where
// the kernel finds its operands aligned (checked once, before the rows: every row must split
// between vectors and elements the same way, for each thread to own the same cache slots row
// after row), the elements past the whole vectors one by one. Rows past 32 KiB of cache are
// read once per pass.
TEST(CudaSource, BlockRowsKeepTheirRowInSharedMemoryAcrossPasses) {
  std::string body = layernorm_body(4096);
  EXPECT_NE(body.find("block-per-row, 300 rows, 4-wide vector accesses"), std::string::npos) << body;
  EXPECT_NE(body.find("alignas(16) __shared__ float rs0[4096];  // row cache"), std::string::npos) << body;
  EXPECT_LT(body.find("const unsigned nvr = kiln_aligned(p0, 16) && kiln_aligned(p1, 16) && kiln_aligned(p2, 16) && "
                      "kiln_aligned(s3, 16) ? 4096u / 4u : 0u;"),
            body.find("for (unsigned row = "))
      << body;
  // the row: once, by vectors and then element by element; into the cache likewise, a vector
  // (c0) at a time
  EXPECT_EQ(count_of(body, "reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)row * 4096 + base)"), 1u) << body;
  EXPECT_EQ(count_of(body, "p0["), 1u) << body;
  EXPECT_EQ(count_of(body, "c0.v[u] = v0;"), 1u) << body;
  EXPECT_EQ(count_of(body, "*reinterpret_cast<kiln_vec<float, 4>*>(rs0 + base) = c0;"), 1u) << body;
  EXPECT_EQ(count_of(body, "rs0[e] = v0;"), 1u) << body;
  // then from shared memory in the two later passes
  EXPECT_EQ(count_of(body, "const kiln_vec<float, 4> c0 = *reinterpret_cast<const kiln_vec<float, 4>*>(rs0 + base);"), 2u)
      << body;
  EXPECT_EQ(count_of(body, "= c0.v[u];"), 2u) << body;
  EXPECT_EQ(count_of(body, "= rs0[e];"), 2u) << body;
  // the weight: not cached; the stores by vectors
  EXPECT_EQ(count_of(body, "reinterpret_cast<const kiln_vec<float, 4>*>(p1 + 0 + base)"), 1u) << body;
  EXPECT_EQ(count_of(body, "p1[(int)e]"), 1u) << body;
  EXPECT_EQ(count_of(body, "*reinterpret_cast<kiln_vec<float, 4>*>(s3 + (int)row * 4096 + base) = w3;"), 1u) << body;
  // rows 4098 floats apart: no row but the first starts on a 16-byte line, so no vectors
  std::string apart = source_of([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0].narrow(1, 0, 4096), 1)}; },
                                {randn({30, 4098})});
  EXPECT_NE(apart.find("__shared__ float rs0[4096];  // row cache"), std::string::npos) << apart;
  EXPECT_EQ(apart.find("kiln_vec<float"), std::string::npos) << apart;
  // size-generic (an eager softmax): the rows' stride checked with the data's alignment
  auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1)}; }, {{randn({30, 3000})}});
  passes::Module m = passes::optimize(graphs[0], {});
  std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program, "kiln_k", true);
  ASSERT_TRUE(r.size() == 1 && r[0].kernel);
  EXPECT_NE(r[0].kernel->body.find("alignas(16) __shared__ float rs0[4096];  // row cache"), std::string::npos)
      << r[0].kernel->body;
  EXPECT_NE(r[0].kernel->body.find("const unsigned nvr = kiln_aligned(p0, 16) && kiln_aligned(s1, 16) && S0_0 % 4 == 0 && "
                                   "S1_0 % 4 == 0 ? row_len / 4u : 0u;"),
            std::string::npos)
      << r[0].kernel->body;
  std::string wide = source_of([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1)}; }, {randn({4, 9000})});
  EXPECT_NE(wide.find("block-per-row"), std::string::npos) << wide;
  EXPECT_EQ(wide.find("row cache"), std::string::npos) << wide;
}

// Row groups: n-body's forces over [2, N, N] summed over the last dim go to one block per body
// i for both components, the square root of the distance and the masses' product computed
// once for them (once in the vector pass, once past it), each component with its own vector of
// positions, accumulator and store. Warps take groups too. None where nothing along the row is
// shared, where the outer loop is longer than four, or where too few groups would be left to
// fill the GPU (512 blocks, 4096 warps); none with KILN_CUDA_ROW_GROUPS=0.
TEST(CudaSource, RowGroupsComputeWhatTheirRowsShareOnce) {
  const wl::Workload& nbody = *wl::find_workload("nbody_forces");
  auto forces = [&nbody](const std::vector<Tensor>& v) { return nbody.run(v); };
  std::string s = source_of(forces, {randn({2, 3000}), rand({3000}) + 0.1});
  EXPECT_NE(s.find("block-per-row, 3000 groups of 2 rows, 4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("for (unsigned row = (unsigned)blockIdx.x; row < 3000u; row += (unsigned)gridDim.x) {"), std::string::npos) << s;
  EXPECT_EQ(count_of(s, "= sqrt("), 2u) << s;
  EXPECT_EQ(count_of(s, " / v21;"), 2u) << s;  // (the masses over the squared distance)
  // (the row's vectors only where every copy's row starts on a 16-byte line)
  EXPECT_NE(s.find("const unsigned nvr = kiln_aligned(p0 + 0, 16) && kiln_aligned(p2 + 0, 16) && kiln_aligned(p4 + 0, 16) && "
                   "kiln_aligned(p7 + 0, 16) && kiln_aligned(p0 + (int)1u * 3000, 16) ? 3000u / 4u : 0u;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const kiln_vec<float, 4> l0_0 = *reinterpret_cast<const kiln_vec<float, 4>*>(p0 + 0 + base);"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const kiln_vec<float, 4> l0_1 = *reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)1u * 3000 + base);"),
            std::string::npos)
      << s;
  for (const char* want : {"double acc32_0 = (double)0;", "double acc32_1 = (double)0;", "s8[(int)row] = v33_0;",
                           "s8[(int)1u * 3000 + (int)row] = v33_1;"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  {
    kiln::testing::ScopedEnv off("KILN_CUDA_ROW_GROUPS", "0");
    std::string one = source_of(forces, {randn({2, 3000}), rand({3000}) + 0.1});
    EXPECT_NE(one.find("block-per-row, 6000 rows, 4-wide vector accesses"), std::string::npos) << one;
    kiln::testing::ScopedEnv bad("KILN_CUDA_ROW_GROUPS", "2");
    EXPECT_THROW(source_of(forces, {randn({2, 3000}), rand({3000}) + 0.1}), Error);
  }
  std::string three = source_of(forces, {randn({3, 3000}), rand({3000}) + 0.1});
  EXPECT_NE(three.find("block-per-row, 3000 groups of 3 rows"), std::string::npos) << three;
  EXPECT_EQ(count_of(three, "= sqrt("), 2u) << three;

  std::string plain = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({2})}; }, {randn({2, 1100, 2100})});
  EXPECT_NE(plain.find("block-per-row, 2200 rows"), std::string::npos) << plain;
  // (arithmetic, which fusion recomputes over a broadcast: an exponential it would not)
  auto shared_div = [](const std::vector<Tensor>& v) { return std::vector{(v[0] / (v[1] * v[1] + 1)).sum({2})}; };
  std::string divs = source_of(shared_div, {randn({4, 1024, 2100}), randn({1024, 2100})});
  EXPECT_NE(divs.find("block-per-row, 1024 groups of 4 rows"), std::string::npos) << divs;
  EXPECT_EQ(count_of(divs, " * v"), 2u) << divs;  // (v1 * v1: once in the vector pass, once past it)
  std::string five = source_of(shared_div, {randn({5, 1100, 2100}), randn({1100, 2100})});
  EXPECT_NE(five.find("block-per-row, 5500 rows"), std::string::npos) << five;
  std::string few = source_of(shared_div, {randn({2, 500, 2100}), randn({500, 2100})});
  EXPECT_NE(few.find("block-per-row, 1000 rows"), std::string::npos) << few;
  std::string warps = source_of(shared_div, {randn({2, 4096, 100}), randn({4096, 100})});
  EXPECT_NE(warps.find("warp-per-row, 4096 groups of 2 rows"), std::string::npos) << warps;
  std::string few_warps = source_of(shared_div, {randn({2, 4000, 100}), randn({4000, 100})});
  EXPECT_NE(few_warps.find("warp-per-row, 8000 rows"), std::string::npos) << few_warps;
  // a per-row scale that moves along loop 0 beside a row shared by every copy: the only
  // vector operand is the first copy's, so the later copies add nothing to the alignment check
  std::string scale = source_of([](const std::vector<Tensor>& v) { return std::vector{(v[0] * (v[1] * v[1])).sum({2})}; },
                                {randn({2, 1024, 1}), randn({1024, 2100})});
  EXPECT_NE(scale.find("block-per-row, 1024 groups of 2 rows, 4-wide vector accesses"), std::string::npos) << scale;
  EXPECT_NE(scale.find("const unsigned nvr = kiln_aligned(p0 + (int)row * 2100, 16) ? 2100u / 4u : 0u;"), std::string::npos)
      << scale;
  std::string nothing_shared = source_of([](const std::vector<Tensor>& v) { return std::vector{(v[0] * v[1]).sum({2})}; },
                                         {randn({2, 1100, 2100}), randn({1100, 2100})});
  EXPECT_NE(nothing_shared.find("block-per-row, 2200 rows"), std::string::npos) << nothing_shared;
}

TEST(CudaSource, IndicesPastTwoToThe31UseSixtyFourBits) {
  // Rendering needs no memory: a graph with 3e9 elements is only typed.
  ir::Graph g = ir::parse("graph @big(%x: f32[3000000000]{1}) {\n  %0 = mul(%x, %x) : f32[3000000000]{1}\n  return %0\n}\n");
  passes::Module m = passes::optimize(g, {});
  std::string s = codegen::emit_cuda(*m.program, codegen::CudaEmit::Source);
  EXPECT_NE(s.find("64-bit indices"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned long long n = (unsigned long long)n_items;"), std::string::npos) << s;
}

// Contiguous elementwise kernels take their element count as a parameter: every size of the
// same op on the same dtypes is one kernel (one CUBIN, one module), so a new size compiles
// nothing. (Below 2^31 elements; past it the 64-bit variant is a second kernel.) Kernels whose
// operands need coordinates (a transpose, a broadcast row) keep their sizes in the body.
TEST(CudaSource, ContiguousElementwiseKernelsServeEverySize) {
  auto body_of = [](int64_t n) {
    auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{v[0] * v[1] + 1}; }, {{randn({n}), randn({n})}});
    passes::Module m = passes::optimize(graphs[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program);
    EXPECT_TRUE(r.at(0).kernel && r[0].kernel->size_param) << n;
    return r[0].kernel ? r[0].kernel->body : std::string();
  };
  const std::string a = body_of(1000), b = body_of(77777), c = body_of(3000);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(a.find("1000"), std::string::npos) << a;
  auto broadcast = trace([](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; }, {{randn({30, 40}), randn({40})}});
  passes::Module m = passes::optimize(broadcast[0], {});
  std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program);
  ASSERT_TRUE(r.at(0).kernel);
  EXPECT_FALSE(r[0].kernel->size_param);
}

// A size-generic kernel names no size: x[:, ::2] + b at two sizes is one body, its loop extents
// and non-unit strides read from parameters (unit strides stay constants); the specialised
// kernel keeps its sizes. A contiguous kernel takes only its element count either way.
TEST(CudaSource, SizeGenericKernelsNameNoSize) {
  auto render = [](int64_t m, int64_t n, bool generic) {
    auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{v[0].slice(1, 0, v[0].size(1), 2) + v[1]}; },
                        {{randn({m, 2 * n}), randn({n})}});
    passes::Module mod = passes::optimize(graphs[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*mod.program, "kiln_k", generic);
    EXPECT_TRUE(r.at(0).kernel.has_value());
    return r[0].kernel.value_or(codegen::CudaKernel{});
  };
  codegen::CudaKernel a = render(30, 41, true), b = render(53, 67, true), fixed = render(30, 41, false);
  EXPECT_EQ(a.body, b.body);
  EXPECT_TRUE(a.generic && a.size_param);
  // n_items, the extents, the divisor of the inner one, x's strides, the store's row stride
  EXPECT_EQ(a.size_args, (std::vector<int64_t>{30 * 41, 30, 41, int64_t(codegen::cuda_divisor_magic(41)), 82, 2, 41}));
  std::string body = a.body.substr(0, a.body.find("#if defined(KILN_CUDA_EMULATION)"));
  for (const char* size : {"30", "41", "82", "1230"}) EXPECT_EQ(body.find(size), std::string::npos) << size << "\n" << body;
  for (const char* p : {"long long size0", "long long size1", "long long stride0_0", "long long stride0_1", "long long stride2_0"})
    EXPECT_NE(body.find(p), std::string::npos) << p << "\n" << body;
  EXPECT_NE(body.find("kiln_udiv(r0, div1), c1 = r0 - q1 * L1;"), std::string::npos) << body;
  EXPECT_NE(body.find("p1[(int)c1]"), std::string::npos) << "a unit stride is a constant\n" << body;
  EXPECT_FALSE(fixed.generic);
  EXPECT_NE(fixed.body.find("% 41u"), std::string::npos) << fixed.body;
  EXPECT_TRUE(fixed.size_args.empty());
  auto contiguous = trace([](const std::vector<Tensor>& v) { return std::vector{v[0] * v[1]}; }, {{randn({999}), randn({999})}});
  passes::Module mod = passes::optimize(contiguous[0], {});
  std::vector<codegen::CudaRender> r = codegen::render_cuda(*mod.program, "kiln_k", true);
  ASSERT_TRUE(r.at(0).kernel);
  EXPECT_EQ(r[0].kernel->size_args, std::vector<int64_t>{999});
}

// The multiply-and-shift divisors of size-generic kernels are exact for every dividend below
// 2^31: each divisor below 3000, powers of two and their neighbours, large ones, against edge
// and random dividends (the same arithmetic as kiln_udiv, which the emulation tests run).
TEST(CudaSource, FastDivisorsAreExactBelowTwoToThe31) {
  auto udiv = [](uint32_t r, uint64_t md) {
    uint32_t hi = uint32_t((uint64_t(r) * uint32_t(md)) >> 32);
    return (hi + r) >> uint32_t(md >> 32);
  };
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d < 3000; ++d) divisors.push_back(d);
  for (int s = 1; s < 31; ++s)
    for (int64_t e : {-1, 0, 1}) divisors.push_back((int64_t(1) << s) + e);
  for (int64_t d : {int64_t(2147483647), int64_t(2147483646), int64_t(1000000007), int64_t(65537 * 3)}) divisors.push_back(d);
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  size_t wrong = 0;
  for (int64_t d : divisors) {
    if (d >= (int64_t(1) << 31)) continue;
    const uint64_t md = codegen::cuda_divisor_magic(d);
    std::vector<uint32_t> rs = {0, 1, uint32_t(d - 1), uint32_t(d), 0x7fffffffu, 0x7ffffffeu};
    for (uint32_t k : {1u, 2u, 3u, 1000u}) {
      uint64_t m = uint64_t(d) * k;
      if (m < 0x80000000u) rs.insert(rs.end(), {uint32_t(m - 1), uint32_t(m), uint32_t(m + 1 < 0x80000000u ? m + 1 : m)});
    }
    for (int j = 0; j < 64; ++j) rs.push_back(uint32_t(next() >> 33));
    for (uint32_t r : rs)
      if (udiv(r, md) != r / uint32_t(d) && wrong++ < 10) ADD_FAILURE() << r << " / " << d << " gave " << udiv(r, md);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_THROW(codegen::cuda_divisor_magic(0), Error);
  EXPECT_THROW(codegen::cuda_divisor_magic(int64_t(1) << 31), Error);
}

// ---- NVRTC ----

// Every kernel of every workload, and of the strategy cases (whose sizes pick the split,
// block and thread strategies the small workloads do not reach), as CUBINs for sm_90.
void expect_every_kernel_compiles_for_sm90(bool generic) {
  std::vector<Case> cases = workload_cases(generic);
  for (Case& c : strategy_cases(generic)) cases.push_back(std::move(c));
  std::map<std::string, int> strategies;
  for (const Case& c : cases)
    for (const auto& r : c.kernels) {
      if (!r.kernel) continue;
      SCOPED_TRACE(c.name + " " + r.kernel->name);
      EXPECT_EQ(r.kernel->generic, generic);
      codegen::CudaBinary b;
      ASSERT_NO_THROW(b = codegen::cuda_cubin(*r.kernel, 90));
      ASSERT_GE(b.cubin.size(), 64u);
      EXPECT_EQ(b.cubin.substr(0, 4), std::string("\x7f" "ELF"));
      EXPECT_NE(b.cubin.find(r.kernel->name), std::string::npos);
      strategies[std::string(codegen::cuda_strategy_name(r.kernel->strategy))]++;
    }
  EXPECT_EQ(strategies.size(), 8u) << "every strategy compiled";
}
TEST(CudaNvrtc, EveryWorkloadsKernelsCompileForSm90) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  expect_every_kernel_compiles_for_sm90(false);
}
TEST(CudaNvrtc, EveryWorkloadsSizeGenericKernelsCompileForSm90) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  expect_every_kernel_compiles_for_sm90(true);
}

// Row groups compile: n-body's kernel in two and three dimensions, and a per-row scale beside a
// row every copy shares (the later copies with no vector operand of their own), by blocks and
// by warps.
TEST(CudaNvrtc, RowGroupsCompileForSm90) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  const wl::Workload& nbody = *wl::find_workload("nbody_forces");
  auto forces = [&nbody](const std::vector<Tensor>& v) { return nbody.run(v); };
  auto scaled = [](const std::vector<Tensor>& v) { return std::vector{(v[0] * (v[1] * v[1])).sum({2})}; };
  const std::vector<std::pair<Fn, std::vector<Tensor>>> cases{
      {forces, {randn({2, 3000}), rand({3000}) + 0.1}},
      {forces, {randn({3, 3000}), rand({3000}) + 0.1}},
      {scaled, {randn({2, 1024, 1}), randn({1024, 2100})}},
      {scaled, {randn({4, 4096, 1}), randn({4096, 100})}},
  };
  for (const auto& [fn, in] : cases) {
    auto graphs = trace(fn, {in});
    passes::Module m = passes::optimize(graphs[0], {});
    ASSERT_NE(codegen::emit_cuda(*m.program, codegen::CudaEmit::Source).find(" groups of "), std::string::npos);
    std::string ptx;
    ASSERT_NO_THROW(ptx = codegen::emit_cuda(*m.program, codegen::CudaEmit::Ptx, 90));
    EXPECT_NE(ptx.find(".target sm_90"), std::string::npos) << ptx.substr(0, 2000);
  }
}

// The gather kernel of gather and index_select (codegen/src/cuda/library.cpp) is written by
// hand, not rendered: NVRTC compiles it for every element size and both index widths.
TEST(CudaNvrtc, TheGatherKernelCompilesForSm90) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  for (DType dt : {kBool, kFloat16, kFloat32, kInt64}) {
    Tensor x = empty({6, 5}, dt), index = zeros({4, 5}, kInt64), out = empty({4, 5}, dt);
    codegen::CudaKernel k = codegen::cuda_gather_kernel(x.t(), 1, index.t(), out.t());
    EXPECT_TRUE(k.index32);
    // past 2^31 elements of reach: 64-bit index math (sizes only: nothing is allocated)
    Tensor wide = empty({1}, dt).expand({3, 1000000000});
    codegen::CudaKernel w = codegen::cuda_gather_kernel(wide, 0, zeros({1}, kInt64).expand({3, 1000000000}), wide);
    EXPECT_FALSE(w.index32);
    for (const codegen::CudaKernel* c : {&k, &w}) {
      SCOPED_TRACE(std::string(name(dt)) + (c->index32 ? " 32-bit" : " 64-bit"));
      codegen::CudaBinary b;
      ASSERT_NO_THROW(b = codegen::cuda_cubin(*c, 90));
      EXPECT_EQ(b.cubin.substr(0, 4), std::string("\x7f" "ELF"));
      EXPECT_NE(b.cubin.find(c->name), std::string::npos);
    }
  }
}

// dump-ir --emit=ptx: NVRTC's PTX for compute_90, one entry per rendered kernel; a kernel
// asked for twice comes from the process's memory cache.
TEST(CudaNvrtc, PtxAndTheMemoryCache) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1)}; }, {{randn({8, 40})}});
  passes::Module m = passes::optimize(graphs[0], {});
  std::string ptx = codegen::emit_cuda(*m.program, codegen::CudaEmit::Ptx, 90);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos) << ptx.substr(0, 2000);
  EXPECT_NE(ptx.find(".visible .entry kiln_k0("), std::string::npos) << ptx.substr(0, 2000);
  EXPECT_NE(ptx.find("shfl.sync.bfly"), std::string::npos) << "the warp butterfly";
  auto rendered = codegen::render_cuda(*m.program, "cache_probe_k");
  ASSERT_TRUE(rendered[0].kernel);
  codegen::cuda_cubin(*rendered[0].kernel, 90);
  EXPECT_EQ(int(codegen::cuda_cubin(*rendered[0].kernel, 90).from), int(codegen::CudaBinary::From::Memory));
}

// A bfloat16 store: one cvt.rn.bf16.f32 per element on sm_80 and later; before sm_80, which has
// no such instruction, the rounding by hand (no cvt to bf16 in the PTX).
TEST(CudaNvrtc, Bfloat16StoresConvertInOneInstructionFromSm80) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{sin(v[0]) + v[1]}; },
                      {{randn({1000}).to(kBFloat16), randn({1000}).to(kBFloat16)}});
  passes::Module m = passes::optimize(graphs[0], {});
  std::string sm90 = codegen::emit_cuda(*m.program, codegen::CudaEmit::Ptx, 90);
  EXPECT_NE(sm90.find("cvt.rn.bf16.f32"), std::string::npos) << sm90.substr(0, 3000);
  std::string sm75 = codegen::emit_cuda(*m.program, codegen::CudaEmit::Ptx, 75);
  EXPECT_NE(sm75.find(".target sm_75"), std::string::npos) << sm75.substr(0, 2000);
  EXPECT_EQ(sm75.find("cvt.rn.bf16"), std::string::npos) << sm75.substr(0, 3000);
}

// ---- CUBINs on disk, across processes ----

// The child: every workload's kernels through cuda_cubin in a process of its own (the parent
// points KILN_CACHE_DIR at a fresh directory); prints per kernel where the CUBIN came from and
// how long the call took, and the totals.
TEST(CudaCubinCache, Child) {
  if (!std::getenv("KILN_CUBIN_CACHE_CHILD")) GTEST_SKIP() << "run by CudaCubinCache.ASecondProcessLoadsCubinsFromDisk";
  int compiled = 0, disk = 0, memory = 0;
  double compiled_ms = 0, disk_ms = 0;
  std::set<std::string> seen;
  for (const Case& c : workload_cases())
    for (const auto& r : c.kernels) {
      if (!r.kernel || !seen.insert(r.kernel->body).second) continue;
      codegen::CudaBinary b = codegen::cuda_cubin(*r.kernel, 90);
      compiled += b.from == codegen::CudaBinary::From::Compiled;
      disk += b.from == codegen::CudaBinary::From::Disk;
      memory += b.from == codegen::CudaBinary::From::Memory;
      (b.from == codegen::CudaBinary::From::Disk ? disk_ms : compiled_ms) += b.ms;
    }
  std::printf("cubins compiled=%d disk=%d memory=%d compiled_ms=%.1f disk_ms=%.2f\n", compiled, disk, memory, compiled_ms,
              disk_ms);
}

// Runs the child in a new process with `cache_dir`; returns its output.
std::string run_cubin_child(const std::string& cache_dir) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();  // (not the shell's)
  std::string cmd = "KILN_CUBIN_CACHE_CHILD=1 KILN_CACHE_DIR='" + cache_dir + "' '" + self +
                    "' --gtest_filter=CudaCubinCache.Child 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}

// A first process compiles every workload kernel's CUBIN with NVRTC and stores it; a second
// process, with an empty memory cache, loads each from disk instead. The times are printed
// (docs/perf.md); no test asserts on them.
TEST(CudaCubinCache, ASecondProcessLoadsCubinsFromDisk) {
  if (!cuda::nvrtc_is_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln-cubin-cache-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string first = run_cubin_child(dir.string()), second = run_cubin_child(dir.string());
  std::smatch m1, m2;
  std::regex line(R"(cubins compiled=(\d+) disk=(\d+) memory=(\d+))");
  ASSERT_TRUE(std::regex_search(first, m1, line)) << first;
  ASSERT_TRUE(std::regex_search(second, m2, line)) << second;
  EXPECT_GT(std::stoi(m1[1]), 10) << first;
  EXPECT_EQ(std::stoi(m1[2]), 0) << first;
  EXPECT_EQ(std::stoi(m2[1]), 0) << second;
  EXPECT_EQ(std::stoi(m2[2]), std::stoi(m1[1])) << second;
  int entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) entries += e.path().extension() == ".cubin";
  EXPECT_EQ(entries, std::stoi(m1[1]));
  auto summary = [](const std::string& out) {
    size_t at = out.find("cubins");
    return out.substr(at, out.find('\n', at) - at);
  };
  std::printf("first process: %s\nsecond process: %s\n", summary(first).c_str(), summary(second).c_str());
  fs::remove_all(dir);
}

}  // namespace
