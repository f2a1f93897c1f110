// The CUDA backend's rendered kernels, checked without a GPU.
//
// Emulation: every kernel of a program is rendered and loaded as a module of kiln's emulated
// CUDA driver (tests/emulation: the source compiled for the host against cuda_emu.h, CUDA's
// built-ins on host threads: real barriers for __syncthreads, real lanes for the warp
// shuffles), and the program runs through the kernel program runner with each kernel
// launched through the driver API, on small grids so that the
// grid-stride and row loops go round more than once. Results are compared with the reference
// executor on the same inputs: every workload, ops across dtypes and layouts, every strategy.
// NVRTC compiles every workload's kernels for sm_90 when it is installed (it needs no GPU).
// test_cuda_source.cpp, in the same binary, reads the rendered source for the properties the
// issue asks for (vector accesses on contiguous data, 32-bit indices where they fit).
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
#include "../common/nvrtc.h"
#include "../common/scoped_env.h"
#include "../common/one_op_graphs.h"
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
  std::vector<exec::KernelImpl> impls(const Case& c) const {
    std::vector<exec::KernelImpl> out(c.program->kernels.size());
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
      got = exec::ProgramRunner(*c.program, emu.impls(c)).run(in_got);
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

// Every elementwise op and reduction of the op table (ops.def) on its own
// (tests/common/one_op_graphs.h): an op added to the table whose CUDA rendering is missing fails
// here (no kernel rendered, or one that does not compile or match) instead of running on the
// host unnoticed.
TEST(CudaEmulation, EveryElementwiseOpAndReductionOfTheTableMatches) {
  std::vector<Case> cases;
  for (int o = 0; o < ir::num_ops(); ++o) {
    const OpId op = OpId(o);
    const ir::Category cat = ir::op_info(op).category;
    if (cat != ir::Category::Elementwise && cat != ir::Category::Reduction) continue;
    cases.push_back(make_case("op " + std::string(ir::op_info(op).name), kiln::testing::graph_with(op),
                              "op" + std::to_string(o) + "_k"));
  }
  EXPECT_GT(cases.size(), size_t(70));
  expect_cases_match(cases);
}

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
    exec::ProgramRunner(*cases[0].program, emu.impls(cases[0])).run(slots);
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
  KILN_NEEDS_NVRTC();
  expect_every_kernel_compiles_for_sm90(false);
}
TEST(CudaNvrtc, EveryWorkloadsSizeGenericKernelsCompileForSm90) {
  KILN_NEEDS_NVRTC();
  expect_every_kernel_compiles_for_sm90(true);
}

// Row groups compile: n-body's kernel in two and three dimensions, and a per-row scale beside a
// row every copy shares (the later copies with no vector operand of their own), by blocks and
// by warps.
TEST(CudaNvrtc, RowGroupsCompileForSm90) {
  KILN_NEEDS_NVRTC();
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
  KILN_NEEDS_NVRTC();
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
  KILN_NEEDS_NVRTC();
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
  KILN_NEEDS_NVRTC();
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

// A CUBIN's cache key: the same kernel for the same architecture is one key; another
// architecture or another source is another. (The NVRTC and driver versions enter it too, next
// to the architecture in cuda_kernel_key; one process cannot vary them.)
TEST(CudaCubinCache, TheKeyNamesTheArchitectureAndTheSource) {
  auto key_of = [](const Fn& fn, const std::vector<Tensor>& in, int arch) {
    passes::Module m = passes::optimize(trace(fn, {in})[0], {});
    auto rendered = codegen::render_cuda(*m.program, "key_probe_k");
    EXPECT_TRUE(rendered[0].kernel);
    return rendered[0].kernel ? codegen::cuda_kernel_key(*rendered[0].kernel, arch) : codegen::CacheKey{};
  };
  auto add = [](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; };
  auto mul = [](const std::vector<Tensor>& v) { return std::vector{v[0] * v[1]}; };
  const std::vector<Tensor> in = {randn({1000}), randn({1000})};
  const codegen::CacheKey a90 = key_of(add, in, 90);
  EXPECT_EQ(key_of(add, in, 90), a90);
  EXPECT_FALSE(key_of(add, in, 80) == a90) << "the architecture is not in the key";
  EXPECT_FALSE(key_of(mul, in, 90) == a90) << "the source is not in the key";
}

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
// (docs/perf-journal.md, "CUBIN: NVRTC compile vs a warm process's disk load"); no test asserts
// on them.
TEST(CudaCubinCache, ASecondProcessLoadsCubinsFromDisk) {
  KILN_NEEDS_NVRTC();
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
