// kiln::compile: trace a C++ function of tensors into graphs, cache them by the inputs'
// signature, and replay them.
//
//   auto f = kiln::compile([](const Tensor& a, const Tensor& b) { return (a + b).relu(); });
//   Tensor y = f(x1, x2);   // first call: runs eagerly while recording a graph
//   Tensor z = f(x3, x4);   // same signature: replays the graph (no tracing)
//
// Arguments may be tensors, std::vector<Tensor>s and numbers (Scalars); the function may return a Tensor, a
// std::tuple of Tensors, a std::vector<Tensor>, or nothing. Tensors the function captures
// (by value or by reference) become graph inputs read at call time; they are held weakly, so
// releasing or rebinding a captured-by-reference tensor makes the next call trace again.
// Host values the function reads (C++ variables it captures) are baked into the graph when
// it is traced: pass them as arguments to have them part of the signature.
//
// Data-dependent control flow (if (t.sum() > 0), t.item<float>(), nonzero(t), ...) is a graph
// break: the graph recorded so far runs, the host value is handed to the C++ code, a guard on
// it is recorded, and tracing goes on in a new graph. Later calls replay the graphs, check the
// guards, and trace again along a new path when a guard fails (a trace tree), so each branch
// outcome is traced once. With fullgraph = true a break is an error instead.
// docs/compile.md describes the signature, guards, the recompile budget and explain().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <iterator>
#include <utility>
#include <vector>

#include "kiln/runtime/ops.h"
#include "kiln/runtime/symfloat.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/trace.h"

namespace kiln {

struct CompileOptions {
  // A graph break is an error (what and where), as torch.compile(fullgraph=True).
  bool fullgraph = false;
  // The recompile budget: how many times the function may be traced again after its first
  // trace, whatever the cause (a new input signature, a guard seeing a new value, a size guard
  // failing, a released capture). Past it, a call that needs a new trace runs eagerly (correct,
  // uncompiled), with one warning naming the causes; explain() and stats() say so.
  int recompile_limit = 8;
  // Dynamic dimensions: once this many input signatures are traced (or recompile_limit, if
  // fewer), the dimensions whose sizes varied among them are made dynamic: one graph serves all
  // their sizes, where the graph and the host code's reads of sizes allow (docs/compile.md).
  int dynamic_after = 3;
  // A traced graph is cut (no guard: the next graph goes on) once it holds this many ops, so
  // that a host loop unrolled into the trace costs compile time in proportion to its length
  // (the optimizer's work grows faster than linearly in one graph's size: per op, a 16384-op
  // graph cost 1.5x a 2048-op one; docs/perf-journal.md, "Compile time against trace length").
  // 0: never. Not under fullgraph. KILN_LOGS=perf_hints says where the long trace came from.
  int max_graph_ops = 2048;
  // A name for messages and explain(); default "compiled function".
  std::string name;
  // What runs the traced graphs. Compiled optimizes them (kiln/passes) and compiles their
  // kernels for the device their tensors live on: the LLVM backend for cpu tensors
  // (kiln/codegen/cpu.h), the CUDA backend for tensors on a GPU (kiln/codegen/cuda.h).
  // Reference runs them op by op on the reference executor (the eager ops), for comparison
  // and debugging. (Cpu is the old name of Compiled.)
  enum class Backend { Compiled, Cpu = Compiled, Reference };
  Backend backend = Backend::Compiled;
  // What one call of a compiled graph costs on a GPU. Default launches its kernels one by one.
  // ReduceOverhead (torch.compile's mode="reduce-overhead") replays them as one CUDA graph:
  // the inputs are copied into buffers the graph was captured over, the outputs copied out, so
  // each call's outputs are its own. Graphs with work on the host fall back to launches, and
  // explain() says why. No effect on the cpu.
  enum class Mode { Default, ReduceOverhead };
  Mode mode = Mode::Default;
  // Speculation past graph breaks: while a guard has only ever seen one value, the graph after
  // it is merged with the graph before it into one program (fused across the break) that runs
  // before the guard is read; its results are used when the guard holds and dropped when it
  // fails. Only for breaks whose next graph writes nothing (docs/compile.md).
  bool speculate = true;
};

struct CompileStats {
  uint64_t calls = 0;
  uint64_t hits = 0;            // calls answered by replaying cached graphs
  uint64_t misses = 0;          // calls whose signature had no cache entry
  uint64_t guard_failures = 0;  // replays that met a guard with an unseen value
  uint64_t compiles = 0;        // traces recorded (misses + guard failures + re-traces)
  uint64_t breaks = 0;          // graph breaks met while tracing
  uint64_t eager_calls = 0;     // calls run eagerly (nested in another trace, not replayable, or past the budget)
  uint64_t budget_eager_calls = 0;  // of those, calls that needed a trace past the recompile budget
                                      // (autograd records them; compiled functions do not yet)
  uint64_t speculated = 0;      // guards met with the next graph's results already computed
  uint64_t misspeculated = 0;   // guards that went another way than the speculated graph
};

// What explain() reports about one input signature.
struct Explanation {
  struct GraphInfo {
    std::string text;  // the graph in kiln's text form (str() shows a constant over 4 KiB by its size)
    size_t ops = 0;    // nodes other than constants
    std::string backend;  // what runs it: "cpu: 1 of 1 kernels compiled ...", "cuda:0: ...", or the reference executor and why
  };
  struct BreakInfo {
    std::string reason;  // e.g. "operator bool on a traced tensor"
    std::string where;   // file:line (function), or the code address for operator bool
  };
  std::string signature;             // the call's (explain() without arguments: "every signature")
  std::vector<std::string> signatures;  // explain() without arguments: each signature traced
  std::vector<GraphInfo> graphs;     // every graph of the trace tree (of every tree, without arguments)
  std::vector<BreakInfo> breaks;     // every distinct break
  std::vector<std::string> guards;   // every guard with the values seen
  std::vector<std::string> recompiles;  // each trace of this function and why (the newest 64)
  std::vector<std::string> size_guards;  // every guard on sizes the host code's reads made
  std::string budget;                // the recompile budget: used, left, and the causes of the retraces
  std::string eager_reason;          // non-empty when this signature always runs eagerly
  CompileStats stats;
  std::string str() const;
};
std::ostream& operator<<(std::ostream& os, const Explanation& e);

namespace detail {

// One argument of a call: a tensor or a number.
struct CallArg {
  Tensor tensor;
  Scalar scalar;
  bool is_tensor = false;
};

// The type-erased engine behind CompiledFunction: cache, trace trees, replay, statistics.
class Engine {
 public:
  Engine(CompileOptions options, std::source_location where);
  ~Engine();
  // Runs the function for these arguments: replays cached graphs, or calls `run_eager` (the
  // user's function on these arguments, returning its tensors flattened) under the tracer.
  std::vector<Tensor> call(std::span<const CallArg> args, const std::function<std::vector<Tensor>()>& run_eager);
  Explanation explain(std::span<const CallArg> args) const;
  Explanation explain() const;
  CompileStats stats() const;
  const CompileOptions& options() const;

  struct State;  // (frontend/src/engine.h)

 private:
  std::unique_ptr<State> state_;
};

// Appends the call arguments an argument stands for: a tensor, a number, a SymFloat's tensor, or
// each tensor of a std::vector<Tensor>.
template <typename T>
void append_args(std::vector<CallArg>& out, const T& v) {
  CallArg a;
  if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    for (const Tensor& t : v) append_args(out, t);
    return;
  } else if constexpr (std::is_convertible_v<const T&, const Tensor&>) {
    a.tensor = v;
    a.is_tensor = true;
  } else if constexpr (std::is_same_v<T, SymFloat>) {
    a.tensor = v.tensor();  // a graph input: every value replays the same trace
    a.is_tensor = true;
  } else {
    a.scalar = Scalar(v);
  }
  out.push_back(std::move(a));
}

// The declared type of parameter I of a callable F, or void where it cannot be read (a generic
// lambda, an overloaded call operator, I past the parameters).
template <typename Sig> struct Parameters { using type = void; };
template <typename R, typename... A> struct Parameters<R (*)(A...)> { using type = std::tuple<A...>; };
template <typename R, typename... A> struct Parameters<R (*)(A...) noexcept> { using type = std::tuple<A...>; };
template <typename R, typename C, typename... A> struct Parameters<R (C::*)(A...)> { using type = std::tuple<A...>; };
template <typename R, typename C, typename... A> struct Parameters<R (C::*)(A...) const> { using type = std::tuple<A...>; };
template <typename R, typename C, typename... A> struct Parameters<R (C::*)(A...) noexcept> { using type = std::tuple<A...>; };
template <typename R, typename C, typename... A>
struct Parameters<R (C::*)(A...) const noexcept> { using type = std::tuple<A...>; };
template <typename F, typename = void> struct CallableParameters : Parameters<std::decay_t<F>> {};
template <typename F>
struct CallableParameters<F, std::void_t<decltype(&F::operator())>> : Parameters<decltype(&F::operator())> {};
template <typename Tuple, size_t I, typename = void> struct Element { using type = void; };
template <typename Tuple, size_t I>
struct Element<Tuple, I, std::enable_if_t<(I < std::tuple_size_v<Tuple>)>> { using type = std::tuple_element_t<I, Tuple>; };
template <typename F, size_t I>
using parameter_t = typename Element<std::conditional_t<std::is_void_v<typename CallableParameters<F>::type>, std::tuple<>,
                                                        typename CallableParameters<F>::type>,
                                     I>::type;

// An argument as the parameter it is passed to: a number for a SymFloat becomes a SymFloat;
// anything else is passed on as it is.
template <typename P, typename A>
decltype(auto) as_parameter(A&& a) {
  if constexpr (std::is_same_v<std::decay_t<P>, SymFloat> && std::is_arithmetic_v<std::decay_t<A>>)
    return SymFloat(double(a));
  else
    return std::forward<A>(a);
}

template <typename R> struct Returns;
template <> struct Returns<Tensor> {
  static std::vector<Tensor> flatten(Tensor t) { return {std::move(t)}; }
  static Tensor unflatten(std::vector<Tensor>&& v) { return std::move(v.at(0)); }
};
template <> struct Returns<std::vector<Tensor>> {
  static std::vector<Tensor> flatten(std::vector<Tensor> v) { return v; }
  static std::vector<Tensor> unflatten(std::vector<Tensor>&& v) { return std::move(v); }
};
// value_and_grad(f, argnums)'s result (transforms.h): the value, then the gradients.
template <> struct Returns<std::pair<Tensor, std::vector<Tensor>>> {
  static std::vector<Tensor> flatten(std::pair<Tensor, std::vector<Tensor>> p) {
    std::vector<Tensor> v{std::move(p.first)};
    for (Tensor& t : p.second) v.push_back(std::move(t));
    return v;
  }
  static std::pair<Tensor, std::vector<Tensor>> unflatten(std::vector<Tensor>&& v) {
    Tensor first = std::move(v.at(0));
    return {std::move(first), std::vector<Tensor>(std::make_move_iterator(v.begin() + 1), std::make_move_iterator(v.end()))};
  }
};
template <typename... Ts> struct Returns<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "a compiled function may return a tuple of Tensors only");
  static std::vector<Tensor> flatten(std::tuple<Ts...> t) {
    return std::apply([](auto&&... x) { return std::vector<Tensor>{std::move(x)...}; }, std::move(t));
  }
  static std::tuple<Ts...> unflatten(std::vector<Tensor>&& v) {
    return [&]<size_t... I>(std::index_sequence<I...>) { return std::tuple<Ts...>{std::move(v.at(I))...}; }(
        std::index_sequence_for<Ts...>{});
  }
};

}  // namespace detail

template <typename F>
class CompiledFunction {
 public:
  CompiledFunction(F fn, CompileOptions options, std::source_location where = std::source_location::current())
      : fn_(std::make_shared<F>(std::move(fn))),
        engine_(std::make_shared<detail::Engine>(std::move(options), where)) {}

  // A number passed where the function declares a SymFloat is made a SymFloat here, at the
  // call, so that it is a graph input (converted inside the traced function, it would be baked
  // into the graph). Works where the parameter types can be read: functions, function pointers
  // and lambdas with declared parameter types (not `auto`).
  template <typename... Args>
  auto operator()(Args&&... args) const {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return call(detail::as_parameter<detail::parameter_t<F, I>>(std::forward<Args>(args))...);
    }(std::index_sequence_for<Args...>{});
  }

  // What the function has seen so far: every signature's graphs, breaks and guards, every
  // recompile with its reason, the budget. Runs nothing.
  Explanation explain() const { return engine_->explain(); }
  // Runs the call (tracing it if needed: an in-place function performs its update once more)
  // and reports the graphs, breaks and guards of its signature, and every recompile.
  template <typename... Args>
  Explanation explain(Args&&... args) const {
    static_assert(sizeof...(Args) > 0);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return explain_call(detail::as_parameter<detail::parameter_t<F, I>>(std::forward<Args>(args))...);
    }(std::index_sequence_for<Args...>{});
  }
  CompileStats stats() const { return engine_->stats(); }

 private:
  template <typename... Args>
  auto call(Args&&... args) const {
    using R = std::decay_t<std::invoke_result_t<F&, Args&&...>>;
    std::vector<detail::CallArg> flat;
    flat.reserve(sizeof...(Args));
    (detail::append_args(flat, args), ...);
    auto run = [&]() -> std::vector<Tensor> {
      if constexpr (std::is_void_v<R>) {
        std::invoke(*fn_, std::forward<Args>(args)...);
        return {};
      } else {
        return detail::Returns<R>::flatten(std::invoke(*fn_, std::forward<Args>(args)...));
      }
    };
    std::vector<Tensor> out = engine_->call(flat, run);
    if constexpr (!std::is_void_v<R>) return detail::Returns<R>::unflatten(std::move(out));
  }
  template <typename... Args>
  Explanation explain_call(Args&&... args) const {
    call(args...);
    std::vector<detail::CallArg> flat;
    (detail::append_args(flat, args), ...);
    return engine_->explain(flat);
  }

  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::Engine> engine_;
};

template <typename F>
CompiledFunction<F> compile(F fn, CompileOptions options = {},
                            std::source_location where = std::source_location::current()) {
  return CompiledFunction<F>(std::move(fn), std::move(options), where);
}

template <typename F, typename... Args>
Explanation explain(const CompiledFunction<F>& f, Args&&... args) {
  return f.explain(std::forward<Args>(args)...);
}

// ---- structured control flow ----
namespace detail {
using BranchFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
std::vector<Tensor> cond_impl(const Tensor& pred, const BranchFn& then_fn, const BranchFn& else_fn,
                              const std::vector<Tensor>& operands, std::source_location where);
}  // namespace detail

// cond(pred, then_fn, else_fn, operands): then_fn(operands...) when the one-element tensor
// `pred` is true, else else_fn(operands...). Both functions take the operands as tensors and
// return a Tensor (or a tuple/vector of Tensors) of the same dtypes and shapes. While tracing,
// both branches are traced into one `cond` node of the graph, so there is no graph break; the
// branches must not write into their operands.
template <typename Then, typename Else, typename... Ts>
auto cond(const Tensor& pred, Then&& then_fn, Else&& else_fn, const Ts&... operands) {
  using R = std::decay_t<std::invoke_result_t<Then&, const Ts&...>>;
  static_assert(std::is_same_v<R, std::decay_t<std::invoke_result_t<Else&, const Ts&...>>>,
                "cond: both branches must return the same type");
  auto wrap = [](auto& fn) {
    return detail::BranchFn([&fn](const std::vector<Tensor>& ops) {
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return detail::Returns<R>::flatten(fn(ops[I]...));
      }(std::index_sequence_for<Ts...>{});
    });
  };
  auto out = detail::cond_impl(pred, wrap(then_fn), wrap(else_fn), std::vector<Tensor>{operands...},
                               std::source_location::current());
  return detail::Returns<R>::unflatten(std::move(out));
}

}  // namespace kiln
