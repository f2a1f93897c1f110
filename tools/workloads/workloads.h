// The workload registry: the 18 programs of the project's workload list
// written once, with their inputs at every size tier, for the tools (dump-ir, later bench) and
// the tests (tests/tools/test_workloads.cpp).
//
//   const auto& w = *kiln::workloads::find_workload("softmax");
//   std::vector<Tensor> in = w.make_inputs(Tier::Small, /*seed=*/0);
//   std::vector<Tensor> out = w.run(in);                       // eager
//   auto f = kiln::compile([&w](const std::vector<Tensor>& v) { return w.run(v); });
//   std::vector<Tensor> again = f(in);                         // traced, then replayed
//
// Each run function is the workload's program written as ordinary C++ over kiln ops, exactly
// as the list states it (a host `if` on a tensor for branch_sign, a host loop for
// unrolled_loop, in-place ops on the input for inplace_chain). Inputs are fresh random values
// (never zeros) drawn from kiln's Philox generator after kiln::manual_seed(seed), so a seed
// reproduces them; sizes use M = 2^20 elements.
#pragma once
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::workloads {

// The size tiers of the list: small for tests, bench for CPU measurements, gpu for GPU ones.
enum class Tier { Small, Bench, Gpu };
inline constexpr int kNumTiers = 3;
std::string_view tier_name(Tier t);
std::optional<Tier> tier_from_name(std::string_view s);

// How an input's values are drawn. Every kind gives nonzero values almost surely.
enum class Init {
  Normal,    // randn
  Uniform,   // rand, in [0, 1) (where_scale: half the elements above the 0.5 threshold)
  Positive,  // rand + 0.1, in [0.1, 1.1) (nbody masses)
  Wide,      // randn * 4 (inplace_chain: exercises relu and both clamp bounds)
};

// One input of a workload: its name in the list, dtype and sizes per tier.
struct InputDesc {
  std::string name;
  DType dtype = kFloat32;
  std::vector<int64_t> sizes[kNumTiers];  // indexed by Tier
  Init init = Init::Normal;
};

// A concrete input: name, dtype and sizes (what make_inputs builds, what --list prints).
struct InputSpec {
  std::string name;
  DType dtype = kFloat32;
  std::vector<int64_t> sizes;
  std::string str() const;  // "a: f32[1000]"
};

// Replaces one input's dtype and/or sizes (dump-ir and kiln-bench --input a=1024x1024:f32).
struct InputOverride {
  std::string name;
  std::optional<DType> dtype;
  std::optional<std::vector<int64_t>> sizes;
};
// NAME=SIZES[:DTYPE] or NAME=:DTYPE, SIZES as 1024x1024, [1024,1024], 1000, [] or scalar (0-d).
// Throws kiln::Error ("[workloads] --input 'SPEC': ...") for anything else.
InputOverride parse_input_override(const std::string& spec);
// A dtype by its short (f32) or long (float32) name.
std::optional<DType> parse_dtype(const std::string& s);

using RunFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Workload {
  std::string name;         // exactly as in workloads.md
  std::string description;  // the program, one line
  std::vector<InputDesc> inputs;
  RunFn run;                // the program over kiln ops; inputs in the order of `inputs`
  // The program writes into its inputs (inplace_chain): give each run its own copies.
  bool mutates_inputs = false;
  // How many distinct paths the program's trace tree has (branch_sign: 2, one per sign of
  // x.sum()); path_inputs() makes one input set per path.
  int paths = 1;
  // Makes `inputs` (fresh from make_inputs) take path `path` (branch_sign: the sign of the sum).
  std::function<void(std::vector<Tensor>& inputs, int path)> steer;

  // The inputs at a tier, with a dtype for every floating-point input (a workload's dtype
  // override, e.g. f16 for add_sin_cos_bf16) and per-input overrides applied. Throws
  // kiln::Error for an override naming no input of this workload.
  std::vector<InputSpec> input_specs(Tier tier, std::optional<DType> dtype = std::nullopt,
                                     const std::vector<InputOverride>& overrides = {}) const;
  // Fresh random inputs for those specs, drawn after kiln::manual_seed(seed).
  std::vector<Tensor> make_inputs(Tier tier, uint64_t seed, std::optional<DType> dtype = std::nullopt,
                                  const std::vector<InputOverride>& overrides = {}) const;
  // One input set per path of the program (seeds seed, seed + 1, ...), each steered onto its
  // path: running the program on all of them traces its whole trace tree.
  std::vector<std::vector<Tensor>> path_inputs(Tier tier, uint64_t seed, std::optional<DType> dtype = std::nullopt,
                                               const std::vector<InputOverride>& overrides = {}) const;
};

// Every workload, in the order of the list.
const std::vector<Workload>& all_workloads();
// The workload of that name, or nullptr.
const Workload* find_workload(std::string_view name);

// Random values for one input spec, as make_inputs draws them (integer and bool dtypes get
// nonzero random integers / random booleans).
Tensor make_tensor(const InputSpec& spec, Init init);

// Random inputs of a graph's input types (a saved graph that kiln-bench --ir times, a graph the
// pipeline fuzz test runs), the same for the same seed: make_tensor's normal values over a
// buffer viewed with each input's sizes and strides, and 1.5, 3 or true for a scalar input.
// kiln::Error where a type's strides cannot be viewed (a hand-written graph's).
std::vector<ir::Slot> graph_inputs(const ir::Graph& g, uint64_t seed);

}  // namespace kiln::workloads
