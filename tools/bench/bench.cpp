// kiln-bench: kiln compiled (kiln::compile) against kiln eager, and libtorch when built with it,
// on every workload of the registry (tools/workloads) and on saved graphs (--ir). Per workload:
// fresh random inputs, the compiled outputs checked against eager, then interleaved timed reps,
// the compulsory memory traffic against a STREAM copy measured in the same run, and the cold and
// warm compile time measured in child processes. A table, JSON records (--json) and an SVG chart
// (--svg). docs/bench.md describes every option and the JSON schema.
#include <kiln/exec/backend.h>
#include <kiln/codegen/cpu.h>
#include <kiln/exec/program.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>
#include <kiln/runtime/env.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bench.h"
#include "workloads.h"

using namespace kiln;
namespace wl = kiln::workloads;
using json = nlohmann::ordered_json;

namespace kiln::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const char* const kKilnAllocator = "kiln caching allocator";

struct Options {
  std::string filter, tier = "bench", dtype;
  std::vector<std::string> ir_files;
  std::vector<std::string> inputs;  // --input NAME=SIZES[:DTYPE] (every workload must have NAME)
  bool check = true, compile_time = true, libtorch = true, list = false, profile = false;
  RepPolicy policy;
  uint64_t seed = 12345;
  std::string json_file, svg_file, first_call;
  std::string trace_dir;  // --trace: each workload's kernel timeline, DIR/<workload>.trace.json
  std::string device = "cpu";  // cpu | cuda
  std::set<std::string> variants = {"eager", "compiled", "graphs"};  // the timed kiln variants
};

// One timed implementation's outcome.
struct VariantResult {
  VariantResult(std::string t, std::string v, std::string a, std::string c = "skipped")
      : tool(std::move(t)), variant(std::move(v)), allocator(std::move(a)), check(std::move(c)) {}
  std::string tool, variant, allocator;
  std::vector<double> seconds;
  std::string check;  // ok | failed | skipped
  json extra = json::object();    // tool-specific fields
};

struct WorkloadResult {
  std::string name, tier, dtype, inputs;
  double bytes = kNaN;
  CompileTimes compile;
  bool failed = false;
  std::string error;
  std::vector<VariantResult> variants;  // eager first
  std::vector<KernelProfile> kernels;   // --profile: the compiled variant's kernels, largest total first
  const VariantResult* find(const std::string& variant) const {
    for (const VariantResult& v : variants)
      if (v.variant == variant) return &v;
    return nullptr;
  }
};

struct Machine {
  int threads = 1;
  double stream_gbps = kNaN;  // the cpu's STREAM copy, or on a GPU its device-to-device copy
  std::string cpu;            // (on a GPU: the device's name)
  std::string device = "cpu";
};

// Workloads whose float results differ more between orders of evaluation: transcendental
// chains, reductions and matmuls get the looser tolerance.
bool loose_check(const std::string& workload) {
  static const std::set<std::string> exact_enough = {"poly", "where_scale", "broadcast_bias", "transpose_add",
                                                     "unrolled_loop", "inplace_chain", "branch_sign"};
  return !exact_enough.count(workload);
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

double total_bytes(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double n = 0;
  for (const auto* v : {&a, &b})
    for (const Tensor& t : *v) n += double(t.numel()) * double(t.element_size());
  return n;
}

std::string join_specs(const std::vector<wl::InputSpec>& specs) {
  std::string s;
  for (const wl::InputSpec& sp : specs) s += (s.empty() ? "" : ", ") + sp.str();
  return s;
}

std::string dtype_label(const std::vector<wl::InputSpec>& specs) {
  for (const wl::InputSpec& s : specs)
    if (is_floating(s.dtype)) return std::string(ir::short_name(s.dtype));
  return specs.empty() ? "" : std::string(ir::short_name(specs[0].dtype));
}

std::optional<DType> dtype_override(const Options& o) {
  if (o.dtype.empty()) return std::nullopt;
  return ir::dtype_from_short_name(o.dtype);
}

wl::Tier tier_of(const Options& o) { return *wl::tier_from_name(o.tier); }

std::vector<wl::InputOverride> overrides_of(const Options& o) {
  std::vector<wl::InputOverride> v;
  for (const std::string& spec : o.inputs) v.push_back(wl::parse_input_override(spec));
  return v;
}

std::vector<std::string> child_args(const Options& o) {
  std::vector<std::string> a = {"--tier", o.tier, "--seed", std::to_string(o.seed), "--device", o.device};
  if (!o.dtype.empty()) a.insert(a.end(), {"--dtype", o.dtype});
  for (const std::string& spec : o.inputs) a.insert(a.end(), {"--input", spec});
  return a;
}

// ---------------------------------------------------------------- one registry workload

WorkloadResult run_workload(const wl::Workload& w, const Options& o) {
  WorkloadResult r;
  r.name = w.name;
  r.tier = o.tier;
  std::vector<wl::InputSpec> specs = w.input_specs(tier_of(o), dtype_override(o), overrides_of(o));
  r.inputs = join_specs(specs);
  r.dtype = dtype_label(specs);
  r.variants.push_back({"kiln", "eager", kKilnAllocator});
  r.variants.push_back({"kiln", "compiled", kKilnAllocator});
  // Compile time first, while this process holds no inputs.
  if (o.compile_time) r.compile = measure_compile_times(w.name, child_args(o));

  const int paths = std::max(1, w.paths);
  std::vector<std::vector<Tensor>> pristine = w.path_inputs(tier_of(o), o.seed, dtype_override(o), overrides_of(o));
  std::vector<std::vector<Tensor>> sets = w.mutates_inputs ? std::vector<std::vector<Tensor>>{} : pristine;
  if (w.mutates_inputs)
    for (const auto& s : pristine) sets.push_back(clone_all(s));
  auto fresh = [&](int p) { return w.mutates_inputs ? clone_all(pristine[size_t(p)]) : pristine[size_t(p)]; };
  // On a GPU (--device cuda) every kiln variant takes device copies of the inputs, each timed
  // call ends with a synchronize, and compiled outputs are checked against cpu eager; a third
  // variant replays the compiled graphs as CUDA graphs (reduce_overhead).
  const bool gpu = o.device == "cuda";
  auto on_device = [&](std::vector<Tensor> v) {
    if (gpu)
      for (Tensor& t : v) t = t.to(Device::cuda());
    return v;
  };
  auto to_host = [&](std::vector<Tensor> v) {
    if (gpu)
      for (Tensor& t : v) t = t.to(Device::cpu());
    return v;
  };
  auto sync = [gpu] {
    if (gpu) cuda::synchronize();
  };
  if (gpu) {
    r.variants[0].allocator = r.variants[1].allocator = "CUDA stream-ordered pool";
    for (auto& s : sets) s = on_device(s);
    for (auto& s : pristine) s = on_device(s);
  }
  auto f = kiln::compile([&w](const std::vector<Tensor>& v) { return w.run(v); }, CompileOptions{.name = w.name});
  CompileOptions graph_opts{.name = w.name};
  graph_opts.mode = CompileOptions::Mode::ReduceOverhead;
  auto fg = kiln::compile([&w](const std::vector<Tensor>& v) { return w.run(v); }, graph_opts);
  const bool loose = loose_check(w.name);

  // The reference outputs (and the traffic), then the check of every other variant.
  std::vector<std::vector<Tensor>> ref;
  for (int p = 0; p < paths; ++p) {
    std::vector<Tensor> in = to_host(fresh(p));  // (the reference is cpu eager)
    ref.push_back(w.run(in));
    if (p == 0) r.bytes = total_bytes(in, ref.back());
  }
  auto check_variant = [&](VariantResult& v, const std::function<std::vector<Tensor>(int)>& outputs) {
    if (!o.check) return true;
    for (int p = 0; p < paths; ++p) {
      CheckResult c = compare_outputs(ref[size_t(p)], outputs(p), loose);
      if (!c.ok) {
        v.check = "failed";
        r.error += (r.error.empty() ? "" : "; ") + v.variant + (paths > 1 ? " (path " + std::to_string(p) + ")" : "") +
                   " differs from eager: " + c.message;
        return false;
      }
    }
    v.check = "ok";
    return true;
  };
  // (a variant left out by --variants is neither checked nor timed; compiled is always checked)
  const bool time_eager = o.variants.count("eager") > 0, time_graphs = gpu && o.variants.count("graphs") > 0;
  r.variants[0].check = o.check && time_eager ? "ok" : "skipped";
  if (gpu) {
    r.variants.push_back({"kiln", "compiled_graphs", "CUDA stream-ordered pool"});
    if ((time_eager && !check_variant(r.variants[0], [&](int p) { return to_host(w.run(fresh(p))); })) ||
        (time_graphs && !check_variant(r.variants.back(), [&](int p) { return to_host(fg(fresh(p))); })))
      r.failed = true;
  }
  if (!check_variant(r.variants[1], [&](int p) { return to_host(f(fresh(p))); }) || r.failed) {
    r.failed = true;
    for (VariantResult& v : r.variants) v.check = "failed";
    return r;
  }

  auto restore = [&](int call) {
    if (!w.mutates_inputs) return;
    const size_t p = size_t(call % paths);
    for (size_t i = 0; i < sets[p].size(); ++i) sets[p][i].copy_(pristine[p][i]);
    // (a device copy is only enqueued: without the wait, the call's closing synchronize
    // would wait for it too, and the copy's time would count as the call's)
    sync();
  };
  std::vector<Tensor> eager_out, comp_out, graph_out;
  Timed eager{"eager", restore, [&](int c) { eager_out = w.run(sets[size_t(c % paths)]); sync(); }, [&] { eager_out.clear(); }};
  Timed comp{"compiled", restore, [&](int c) { comp_out = f(sets[size_t(c % paths)]); sync(); }, [&] { comp_out.clear(); }};
  Timed graphs{"compiled_graphs", restore, [&](int c) { graph_out = fg(sets[size_t(c % paths)]); sync(); },
               [&] { graph_out.clear(); }};
  std::vector<Timed*> timed;
  std::vector<size_t> timed_results;  // indices into r.variants (which may still grow)
  if (time_eager) timed.push_back(&eager), timed_results.push_back(0);
  if (o.variants.count("compiled")) timed.push_back(&comp), timed_results.push_back(1);
  if (time_graphs) timed.push_back(&graphs), timed_results.push_back(2);

#ifdef KILN_BENCH_LIBTORCH
  std::optional<libtorch::Program> lt;
  if (o.libtorch && !gpu && libtorch::has_program(w.name)) {
    r.variants.push_back({"libtorch", "libtorch", "libtorch CPU allocator over " + malloc_name()});
    r.variants.back().extra["libtorch_version"] = libtorch::version();
    bool ok = false, error = false;
    try {
      lt = libtorch::make(w.name, pristine, w.mutates_inputs);
      ok = check_variant(r.variants.back(), lt->outputs);
    } catch (const std::exception& e) {
      // libtorch may lack a kernel (--dtype f16): its record is skipped, with the reason
      std::string what = e.what();
      error = true;
      r.variants.back().check = "skipped";
      r.variants.back().extra["error"] = what.substr(0, what.find('\n'));
      r.error += (r.error.empty() ? "" : "; ") + std::string("libtorch cannot run it: ") + what.substr(0, what.find('\n'));
    }
    if (ok) {
      timed.push_back(&lt->timed);
      timed_results.push_back(r.variants.size() - 1);
    } else {
      r.failed = r.failed || !error;  // a mismatch fails the exit status; kiln's variants are still timed
      lt.reset();
    }
  }
#endif
  ref.clear();
  time_interleaved(timed, RepPolicy{std::max(o.policy.warmup, paths), o.policy.reps, o.policy.min_time,
                                    o.policy.max_reps});
  for (size_t i = 0; i < timed.size(); ++i) r.variants[timed_results[i]].seconds = timed[i]->seconds;
  if (o.profile) {
    // Each kernel alone (kiln/runtime/profile.h): the compiled variant once more, its calls back
    // to back (on a GPU the queue stays ahead of the kernels, so the events between them time
    // the kernels rather than their launches), the kernels of this workload's programs kept.
    // (the call count goes on from the timed calls', so that a program whose paths alternate
    // keeps its rhythm: a speculation predicted from it stays predicted)
    Profiler prof;
    const int calls = std::max(o.policy.reps, 2 * paths);
    for (int c = comp.calls; c < comp.calls + calls; ++c) {
      restore(c);
      comp_out = f(sets[size_t(c % paths)]);
    }
    sync();
    comp_out.clear();
    ProfileReport rep = prof.stop();
    for (const KernelProfile& k : rep.kernels)
      if (k.name.rfind(w.name + " @", 0) == 0) r.kernels.push_back(k);
    if (!o.trace_dir.empty()) {
      std::filesystem::create_directories(o.trace_dir);
      const std::string file = (std::filesystem::path(o.trace_dir) / (w.name + ".trace.json")).string();
      std::ofstream(file) << rep.chrome_trace();
      KILN_CHECK(std::filesystem::file_size(file) > 0, "bench", "cannot write ", file);
    }
  }
  CompileStats st = f.stats();
  r.variants[1].extra["compile_stats"] = {{"calls", st.calls}, {"hits", st.hits}, {"compiles", st.compiles},
                                          {"eager_calls", st.eager_calls}};
  if (paths > 1) r.variants[0].extra["paths"] = r.variants[1].extra["paths"] = paths;
  return r;
}

// ---------------------------------------------------------------- a saved graph (--ir)

WorkloadResult run_ir_file(const std::string& path, const Options& o) {
  WorkloadResult r;
  r.name = std::filesystem::path(path).stem().string();
  r.tier = "ir";
  r.variants.push_back({"kiln", "eager", kKilnAllocator});
  r.variants.push_back({"kiln", "compiled", kKilnAllocator});
  r.variants[0].extra["ir_file"] = r.variants[1].extra["ir_file"] = path;
  // (compiled for the CPU where kiln has its LLVM backend, else the kernel interpreter)
  const bool codegen = codegen::has_cpu_codegen();
  r.variants[1].extra["engine"] = codegen ? "optimizer + CPU backend (passes::optimize, codegen::compile_cpu)"
                                          : "optimizer + kernel interpreter (passes::optimize, exec::ProgramRunner; "
                                            "kiln built without LLVM)";
  std::ifstream in(path);
  KILN_CHECK(in, "bench", "cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  ir::Graph g = first != std::string::npos && text[first] == '{' ? ir::from_json(text) : ir::parse(text);
  if (auto err = ir::verify(g)) KILN_FAIL("bench", path, ": ", err->str());
  std::vector<ir::Slot> ins = wl::graph_inputs(g, o.seed);
  for (const ir::Slot& s : ins) {
    if (s.is_scalar) continue;
    r.inputs += (r.inputs.empty() ? "" : ", ") + std::string(ir::short_name(s.tensor.dtype())) + "[";
    for (int64_t d = 0; d < s.tensor.dim(); ++d) r.inputs += (d ? ", " : "") + std::to_string(s.tensor.size(d));
    r.inputs += "]";
    if (r.dtype.empty()) r.dtype = ir::short_name(s.tensor.dtype());
  }
  ir::Executable exe(g);
  auto t0 = std::chrono::steady_clock::now();
  passes::Module m = passes::optimize(g);
  std::shared_ptr<exec::CompiledProgram> compiled;
  std::optional<exec::ProgramRunner> interpreted;
  if (codegen) {
    std::vector<ir::Type> types;
    for (const ir::Value* v : g.inputs()) types.push_back(v->type);
    compiled = exec::compile_program(m.program, std::move(types), Device::cpu());
  } else {
    interpreted.emplace(*m.program);
  }
  auto run_compiled = [&] {
    return compiled ? compiled->run(std::span<const ir::Slot>(ins)) : interpreted->run(std::span<const ir::Slot>(ins));
  };
  r.compile.cold_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto tensors = [](std::vector<ir::Slot> slots) {
    std::vector<Tensor> ts;
    for (ir::Slot& s : slots) ts.push_back(s.is_scalar ? scalar_tensor(s.scalar) : std::move(s.tensor));
    return ts;
  };
  std::vector<Tensor> want = tensors(exe.run_slots(ins));
  std::vector<Tensor> ins_t;
  for (const ir::Slot& s : ins)
    if (!s.is_scalar) ins_t.push_back(s.tensor);
  r.bytes = total_bytes(ins_t, want);
  r.variants[0].check = o.check ? "ok" : "skipped";
  if (o.check) {
    std::vector<Tensor> got = run_compiled();
    for (size_t i = 0; i < got.size() && i < want.size(); ++i)
      if (got[i].dtype() != want[i].dtype() && want[i].dim() == 0) got[i] = got[i].to(want[i].dtype());
    CheckResult c = compare_outputs(want, got, true);
    r.variants[1].check = c.ok ? "ok" : "failed";
    if (!c.ok) {
      r.failed = true;
      r.error = "compiled differs from eager: " + c.message;
      r.variants[0].check = "failed";
      return r;
    }
  }
  want.clear();
  std::vector<ir::Slot> eager_out;
  std::vector<Tensor> comp_out;
  Timed eager{"eager", nullptr, [&](int) { eager_out = exe.run_slots(ins); }, [&] { eager_out.clear(); }};
  Timed comp{"compiled", nullptr, [&](int) { comp_out = run_compiled(); },
             [&] { comp_out.clear(); }};
  std::vector<Timed*> timed;
  if (o.variants.count("eager")) timed.push_back(&eager);
  if (o.variants.count("compiled")) timed.push_back(&comp);
  time_interleaved(timed, o.policy);
  r.variants[0].seconds = eager.seconds;
  r.variants[1].seconds = comp.seconds;
  return r;
}

// ---------------------------------------------------------------- output

double med_ms(const VariantResult* v) { return v && !v->seconds.empty() ? median(v->seconds) * 1e3 : kNaN; }

std::string cell(double v, const char* format) {
  if (!std::isfinite(v)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string gbps_cell(double bytes, double ms, double stream) {
  if (!std::isfinite(ms) || !std::isfinite(bytes)) return "-";
  double g = bytes / (ms * 1e-3) / 1e9;
  return cell(g, "%.1f") + " (" + cell(100 * g / stream, "%.0f") + "%)";
}

bool have_libtorch(const std::vector<WorkloadResult>& rs) {
  for (const WorkloadResult& r : rs)
    if (r.find("libtorch")) return true;
  return false;
}

void print_header(bool libtorch_column) {
  std::printf("%-18s %10s %11s %8s %15s %15s", "workload", "eager ms", "compiled ms", "speedup", "eager GB/s", "compiled GB/s");
  if (libtorch_column) std::printf(" %11s %9s", "libtorch ms", "vs lt");
  std::printf(" %9s %9s %15s  %s\n", "cold ms", "warm ms", "beyond eager", "check");
}

void print_row(const WorkloadResult& r, const Machine& m, bool libtorch_column) {
  const double e = med_ms(r.find("eager")), c = med_ms(r.find("compiled"));
  std::printf("%-18s %10s %11s %8s %15s %15s", r.name.c_str(), cell(e, "%.3f").c_str(), cell(c, "%.3f").c_str(),
              cell(e / c, "%.2fx").c_str(), gbps_cell(r.bytes, e, m.stream_gbps).c_str(),
              gbps_cell(r.bytes, c, m.stream_gbps).c_str());
  if (libtorch_column) {
    const double l = med_ms(r.find("libtorch"));
    std::printf(" %11s %9s", cell(l, "%.3f").c_str(), cell(l / c, "%.2fx").c_str());
  }
  std::string check = r.failed ? "FAILED" : r.variants.empty() ? "-" : r.find("compiled")->check;
  const std::string beyond = r.compile.cold_over_eager_ms && r.compile.warm_over_eager_ms
                                 ? cell(*r.compile.cold_over_eager_ms, "%.1f") + " / " + cell(*r.compile.warm_over_eager_ms, "%.1f")
                                 : "-";
  std::printf(" %9s %9s %15s  %s\n", cell(r.compile.cold_ms.value_or(kNaN), "%.1f").c_str(),
              cell(r.compile.warm_ms.value_or(kNaN), "%.1f").c_str(), beyond.c_str(), check.c_str());
  if (const VariantResult* g = r.find("compiled_graphs"); g && !g->seconds.empty()) {
    const double gm = med_ms(g);
    std::printf("  %-16s %10s %11s %8s %15s %15s\n", "(CUDA graphs)", "", cell(gm, "%.3f").c_str(), cell(e / gm, "%.2fx").c_str(),
                "", gbps_cell(r.bytes, gm, m.stream_gbps).c_str());
  }
  for (const KernelProfile& k : r.kernels)
    std::printf("  %7lld x %9.2f us %12lld B %8.1f GB/s (%3.0f%% of copy)  %s\n", static_cast<long long>(k.calls),
                1e3 * k.mean_ms(), static_cast<long long>(k.bytes), k.gbps(), 100 * k.gbps() / m.stream_gbps,
                k.name.c_str());
  if (!r.error.empty()) std::printf("  %s: %s\n", r.failed ? "FAILED" : "note", r.error.c_str());
  std::fflush(stdout);
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json records(const std::vector<WorkloadResult>& rs, const Machine& m) {
  json out = json::array();
  out.push_back({{"tool", "machine"}, {"device", m.device}, {"stream_gbps", num_or_null(m.stream_gbps)}, {"cpu", m.cpu},
                 {"threads", m.threads}, {"malloc", malloc_name()}, {"blas", blas_library()},
                 {"omp_wait_policy", std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : ""}});
  for (const WorkloadResult& r : rs)
    for (const VariantResult& v : r.variants) {
      const double med = med_ms(&v);
      const bool kiln = v.tool == "kiln";
      json j = {{"tool", v.tool},
                {"variant", v.variant},
                {"workload", r.name},
                {"tier", r.tier},
                {"dtype", r.dtype},
                {"inputs", r.inputs},
                {"median_ms", num_or_null(med)},
                {"min_ms", v.seconds.empty() ? json(nullptr) : json(*std::min_element(v.seconds.begin(), v.seconds.end()) * 1e3)},
                {"reps", v.seconds.size()},
                {"bytes", num_or_null(r.bytes)},
                {"gbps", num_or_null(r.bytes / (med * 1e-3) / 1e9)},
                {"stream_gbps", num_or_null(m.stream_gbps)},
                {"compile_cold_ms", kiln && v.variant == "compiled" ? num_or_null(r.compile.cold_ms.value_or(kNaN)) : json(nullptr)},
                {"compile_warm_ms", kiln && v.variant == "compiled" ? num_or_null(r.compile.warm_ms.value_or(kNaN)) : json(nullptr)},
                {"compile_cold_over_eager_ms", kiln && v.variant == "compiled" ? num_or_null(r.compile.cold_over_eager_ms.value_or(kNaN)) : json(nullptr)},
                {"compile_warm_over_eager_ms", kiln && v.variant == "compiled" ? num_or_null(r.compile.warm_over_eager_ms.value_or(kNaN)) : json(nullptr)},
                {"check", v.check},
                {"threads", m.threads},
                {"device", m.device},
                {"allocator", v.allocator}};
      if (r.failed && !r.error.empty()) j["error"] = r.error;
      if (kiln && v.variant == "compiled" && !r.kernels.empty()) {
        json ks = json::array();
        for (const KernelProfile& k : r.kernels)
          ks.push_back({{"name", k.name}, {"calls", k.calls}, {"mean_ms", k.mean_ms()}, {"min_ms", k.min_ms},
                        {"bytes", k.bytes}, {"gbps", k.gbps()}, {"share_of_copy", num_or_null(k.gbps() / m.stream_gbps)}});
        j["kernels"] = std::move(ks);
      }
      for (auto& [k, val] : v.extra.items()) j[k] = val;
      out.push_back(std::move(j));
    }
  return out;
}

std::string chart(const std::vector<WorkloadResult>& rs, const Machine& m, const Options& o) {
  std::vector<std::string> names;
  Series comp{"kiln compiled", {}}, lt{"libtorch", {}};
  for (const WorkloadResult& r : rs) {
    names.push_back(r.name);
    const double e = med_ms(r.find("eager"));
    auto speedup = [&](const char* variant) -> std::optional<double> {
      double v = e / med_ms(r.find(variant));
      return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
    };
    comp.values.push_back(speedup("compiled"));
    lt.values.push_back(speedup("libtorch"));
  }
  std::vector<Series> series = {comp};
  if (have_libtorch(rs)) series.push_back(lt);
  return speedup_svg("kiln-bench: tier " + o.tier + ", " + std::to_string(m.threads) + " threads, " + m.cpu, names, series);
}

// ---------------------------------------------------------------- --first-call (the child)

// Times the first call of a fresh compiled function (trace, optimize, codegen or cache load) on
// every path of the workload, after one eager run per path warmed the process (allocator,
// threads), and prints "first_call_ms X". A trace runs the program eagerly, so the child also
// times a second eager run of every path just before ("eager_ms X"): what the first call costs
// beyond it is what the compiler and its cache add. On a GPU (--device cuda) the inputs live on
// the device and each clock stops after the device finished: the cold first call includes
// NVRTC compiling the program's kernels, the warm one loading their CUBINs from the disk cache
// (the eager run before both compiled the eager ops' own kernels).
int first_call_main(const Options& o) {
  const wl::Workload* w = wl::find_workload(o.first_call);
  KILN_CHECK(w, "bench", "no workload named '", o.first_call, "'");
  std::vector<std::vector<Tensor>> sets = w->path_inputs(tier_of(o), o.seed, dtype_override(o), overrides_of(o));
  const bool gpu = o.device == "cuda";
  if (gpu)
    for (auto& s : sets)
      for (Tensor& t : s) t = t.to(Device::cuda());
  auto done = [&] {
    if (gpu) cuda::synchronize();
  };
  auto copies = [&] {
    std::vector<std::vector<Tensor>> args;
    for (const auto& s : sets) args.push_back(w->mutates_inputs ? clone_all(s) : s);
    return args;
  };
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (const auto& a : copies()) w->run(a);
  std::vector<std::vector<Tensor>> args = copies();
  done();
  auto t0 = std::chrono::steady_clock::now();
  for (const auto& a : args) w->run(a);
  done();
  const double eager_ms = since(t0);
  args = copies();
  done();
  t0 = std::chrono::steady_clock::now();
  auto f = kiln::compile([w](const std::vector<Tensor>& v) { return w->run(v); }, CompileOptions{.name = w->name});
  for (const auto& a : args) f(a);
  done();
  const double ms = since(t0);
  std::printf("first_call_ms %.6f\neager_ms %.6f\ncompiles %llu\n", ms, eager_ms,
              (unsigned long long)f.stats().compiles);
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  using namespace kiln::bench;
  Options o;
  CLI::App app{"kiln-bench: kiln compiled vs kiln eager (and libtorch when built with it) on the workload "
               "registry and saved graphs (docs/bench.md)"};
  app.add_option("--filter", o.filter, "comma-separated workload names, or 'all' (default: all, or none with --ir)");
  app.add_option("--tier", o.tier, "input sizes: small, bench or gpu")->capture_default_str()->check(CLI::IsMember({"small", "bench", "gpu"}));
  app.add_option("--dtype", o.dtype, "override every floating-point input's dtype")
      ->check(CLI::IsMember({"f32", "f64", "f16", "bf16"}));
  app.add_option("--input", o.inputs, "override one input of the workloads: NAME=SIZES[:DTYPE] (SIZES as 4096x1024), "
                 "as dump-ir's; repeatable");
  app.add_option("--ir", o.ir_files, "a saved graph (text or JSON) to benchmark as well; repeatable")
      ->check(CLI::ExistingFile);
  app.add_flag("--check,!--no-check", o.check, "check compiled (and libtorch) outputs against eager first (default on)");
  app.add_option("--warmup", o.policy.warmup, "untimed calls of each variant first")->capture_default_str();
  app.add_option("--reps", o.policy.reps, "at least this many timed calls of each variant")->capture_default_str();
  app.add_option("--min-time", o.policy.min_time, "and at least this many seconds of them")->capture_default_str();
  app.add_option("--max-reps", o.policy.max_reps, "but at most this many")->capture_default_str();
  app.add_flag("!--no-compile-time", o.compile_time, "skip the cold/warm compile time (child processes)");
  app.add_flag("!--no-libtorch", o.libtorch, "skip the libtorch peer (when built with it)");
  app.add_option("--seed", o.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--device", o.device, "where kiln runs: cpu, or cuda (eager and compiled on the GPU, plus compiled "
                 "with CUDA graphs; no compile-time children or libtorch there)")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--variants", o.variants, "the kiln variants to time, of eager, compiled and graphs (CUDA graphs, "
                 "on a GPU); compiled is checked either way")
      ->delimiter(',')->check(CLI::IsMember({"eager", "compiled", "graphs"}));
  app.add_flag("--profile", o.profile, "time each kernel of the compiled variant alone (kiln::Profiler) in one more "
               "round of calls, and print them under the workload's row");
  app.add_option("--trace", o.trace_dir, "write each workload's kernel timeline (as --profile times it) to "
                 "DIR/<workload>.trace.json (chrome://tracing, Perfetto)");
  app.add_option("--json", o.json_file, "write the records to this file (a JSON array)");
  app.add_option("--svg", o.svg_file, "write the speedup chart to this file");
  app.add_flag("--list", o.list, "print the workloads and their inputs at --tier, and exit");
  app.add_option("--first-call", o.first_call)->group("");  // hidden: the compile-time child
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad command line: 2
  }
  o.profile = o.profile || !o.trace_dir.empty();  // (--trace profiles)
  o.policy.warmup = std::max(o.policy.warmup, 0);
  o.policy.reps = std::max(o.policy.reps, 1);
  o.policy.max_reps = std::max(o.policy.max_reps, o.policy.reps);

  try {
    if (!o.first_call.empty()) return first_call_main(o);
    KILN_CHECK(!(o.profile && profile::active()), "bench", "--profile and KILN_PROFILE=1 both record kernels: use one");
    std::vector<const kiln::workloads::Workload*> selected;
    const auto& all = kiln::workloads::all_workloads();
    if (o.filter == "all" || (o.filter.empty() && o.ir_files.empty())) {
      for (const auto& w : all) selected.push_back(&w);
    } else {
      std::stringstream ss(o.filter);
      for (std::string name; std::getline(ss, name, ',');) {
        if (name.empty()) continue;
        const auto* w = kiln::workloads::find_workload(name);
        if (!w) {
          std::string names;
          for (const auto& x : all) names += (names.empty() ? "" : ", ") + x.name;
          std::fprintf(stderr, "kiln-bench: no workload named '%s' (known: %s)\n", name.c_str(), names.c_str());
          return 2;
        }
        selected.push_back(w);
      }
    }
    if (o.list) {
      for (const auto* w : selected)
        std::printf("%-18s %s\n", w->name.c_str(),
                    join_specs(w->input_specs(tier_of(o), dtype_override(o), overrides_of(o))).c_str());
      return 0;
    }

    Machine m;
    m.threads = kiln::env::num_threads();
    m.cpu = cpu_model();
#ifdef KILN_BENCH_LIBTORCH
    if (o.libtorch) libtorch::set_threads(m.threads);
#endif
    if (o.device == "cuda") {
      KILN_CHECK(cuda_is_available(), "bench", "--device cuda: ", cuda_unavailable_reason());
      m.device = "cuda:0";
      cuda::DeviceInfo d = cuda::device_info();
      m.cpu = d.name + " (sm_" + std::to_string(d.arch) + ", " + std::to_string(d.multiprocessors) + " SMs)";
      // 512 MiB, far beyond the L2; on the emulated driver (host memory, a memcpy: its number
      // means nothing) 16 MiB, which keeps the tests that start kiln-bench there short.
      const int mib = cuda::emulated() ? 16 : 512;
      m.stream_gbps = cuda_copy_gbps(size_t(mib) << 20);
      std::printf("kiln-bench: tier %s%s on %s\n", o.tier.c_str(), o.dtype.empty() ? "" : (", dtype " + o.dtype).c_str(),
                  m.cpu.c_str());
      std::printf("device-to-device copy (2 x %d MiB, median of 10, CUDA events): %.1f GB/s\n", mib, m.stream_gbps);
    } else {
      m.stream_gbps = stream_copy_gbps(m.threads);
      std::printf("kiln-bench: tier %s%s, %d threads (KILN_NUM_THREADS / OMP_NUM_THREADS), %s\n", o.tier.c_str(),
                  o.dtype.empty() ? "" : (", dtype " + o.dtype).c_str(), m.threads, m.cpu.c_str());
      std::printf("STREAM copy (2 x 128 MiB float32, %d threads, median of 10): %.1f GB/s; malloc: %s\n", m.threads,
                  m.stream_gbps, malloc_name().c_str());
      std::printf("BLAS: %s\n", blas_library().c_str());
    }
#ifdef KILN_BENCH_LIBTORCH
    if (o.libtorch && o.device == "cpu") std::printf("libtorch %s, %d threads\n", libtorch::version().c_str(), libtorch::threads());
#else
    std::printf("libtorch: not built in (see docs/bench.md)\n");
#endif
    if (o.device == "cuda") o.libtorch = false;  // (Debian's libtorch runs on the cpu only)
    const bool lt_column = o.libtorch &&
#ifdef KILN_BENCH_LIBTORCH
                           true;
#else
                           false;
#endif
    print_header(lt_column);
    std::vector<WorkloadResult> results;
    auto guarded = [&](const std::string& name, const std::function<WorkloadResult()>& fn) {
      WorkloadResult r;
      try {
        r = fn();
      } catch (const std::exception& e) {
        r = WorkloadResult{};
        r.name = name;
        r.tier = o.tier;
        r.failed = true;
        r.error = e.what();
        r.variants.push_back({"kiln", "eager", kKilnAllocator, "failed"});
        r.variants.push_back({"kiln", "compiled", kKilnAllocator, "failed"});
      }
      print_row(r, m, lt_column);
      results.push_back(std::move(r));
    };
    for (const auto* w : selected) guarded(w->name, [&] { return run_workload(*w, o); });
    for (const std::string& f : o.ir_files)
      guarded(std::filesystem::path(f).stem().string(), [&] { return run_ir_file(f, o); });
    if (!o.ir_files.empty() && (!o.dtype.empty() || !o.inputs.empty()))
      std::printf("note: --dtype and --input apply to the registry's workloads; a saved graph (--ir) runs with the "
                  "dtypes and sizes it names\n");
    for (const WorkloadResult& r : results)
      if (!r.compile.error.empty() && !r.compile.cold_ms)
        std::printf("note: %s: no compile time: %s\n", r.name.c_str(), r.compile.error.c_str());

    if (!o.json_file.empty()) {
      std::ofstream f(o.json_file);
      f << records(results, m).dump(1) << "\n";
      if (!f) throw kiln::Error("cannot write " + o.json_file);
    }
    if (!o.svg_file.empty()) {
      std::ofstream f(o.svg_file);
      f << chart(results, m, o);
      if (!f) throw kiln::Error("cannot write " + o.svg_file);
    }
    int failed = 0;
    for (const WorkloadResult& r : results) failed += r.failed;
    if (failed) std::printf("%d of %zu workloads FAILED\n", failed, results.size());
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-bench: %s\n", e.what());
    return 1;
  }
}
