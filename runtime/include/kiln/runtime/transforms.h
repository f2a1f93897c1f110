// JAX's gradient transforms: functions of tensors to the functions that give their gradients.
//
//   auto loss = [](const Tensor& w, const Tensor& x) { return (x.matmul(w).tanh()).sum(); };
//   auto dloss = kiln::grad(loss);                 // dloss(w, x): d loss / d w, w's shape
//   auto both = kiln::value_and_grad(loss);        // both(w, x): {loss(w, x), d loss / d w}
//   auto dwx = kiln::grad(loss, {0, 1});           // dwx(w, x): {d/dw, d/dx}
//   auto step = kiln::compile(kiln::value_and_grad(loss));   // forward and backward, one graph
//
// The function must return a one-element tensor (a loss). The arguments at `argnums` (default:
// the first) must be tensors; they are differentiated as the function reads them: each is a
// fresh leaf (the caller's tensor is not touched, nor its .grad), the function runs with grad
// mode on, and autograd gives the gradients. An argument the result does not depend on gets
// zeros, as in JAX. Tensors the function captures are constants to the transform.
//
// Nesting: an argument that already requires grad (an outer transform's leaf, or the caller's
// own parameter) is differentiated in place and the gradient keeps its history, so
// grad(grad(f)) gives the second derivative. Otherwise the results carry no history, and a
// compiled transform replays (compile.h).
#pragma once
#include <array>
#include <cstddef>
#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd.h"
#include "error.h"
#include "factories.h"
#include "tensor.h"

namespace kiln {

namespace detail {

// Differentiates f at the tensors of `args` named by `argnums`: the value (without history
// unless nested) and one gradient per argnum.
template <typename F, typename... Args>
std::pair<Tensor, std::vector<Tensor>> value_and_grads(const F& f, const std::vector<size_t>& argnums,
                                                       const char* who, Args&&... args) {
  constexpr size_t n = sizeof...(Args);
  std::array<bool, n> wanted{};
  for (size_t a : argnums) {
    KILN_CHECK(a < n, who, "argnums names argument ", a, " of a call with ", n, " arguments");
    wanted[a] = true;
  }
  std::array<Tensor, n> leaves;
  bool nested = false;
  // Each argument as f sees it: a wanted tensor becomes a leaf (or stays, when it already
  // requires grad); anything else is passed through.
  auto prepare = [&]<size_t I, typename A>(std::integral_constant<size_t, I>, A&& a) -> decltype(auto) {
    if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
      if (!wanted[I]) return Tensor(a);
      KILN_CHECK(a.defined(), who, "argument ", I, " is an undefined tensor");
      KILN_CHECK(is_floating(a.dtype()), who, "argument ", I, " is ", name(a.dtype()),
                 ": only floating-point tensors have gradients");
      if (a.requires_grad()) {
        nested = true;
        leaves[I] = a;
      } else {
        leaves[I] = a.detach().requires_grad_();
      }
      return Tensor(leaves[I]);
    } else {
      KILN_CHECK(!wanted[I], who, "argnums names argument ", I, ", which is not a tensor");
      return std::forward<A>(a);
    }
  };
  Tensor value;
  {
    AutoGradMode on(true);
    auto tuple = std::forward_as_tuple(std::forward<Args>(args)...);
    // (each leaf goes to its argument's slot, whatever order the arguments are prepared in)
    auto prepared = [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<decltype(prepare(std::integral_constant<size_t, I>{}, std::get<I>(tuple)))...>(
          prepare(std::integral_constant<size_t, I>{}, std::get<I>(tuple))...);
    }(std::make_index_sequence<n>{});
    value = std::apply(f, std::move(prepared));
  }
  KILN_CHECK(value.defined() && value.numel() == 1, who, "the function must return a one-element tensor (a loss), got ",
             value.defined() ? "shape " + detail::shape_str(value.sizes().vec()) : std::string("an undefined tensor"));
  std::vector<Tensor> inputs;
  for (size_t a : argnums) inputs.push_back(leaves[a]);
  std::vector<Tensor> grads(inputs.size());
  if (value.requires_grad()) {
    AutoGradMode on(nested);
    grads = autograd::grad({value}, inputs, {}, /*retain_graph=*/nested, /*create_graph=*/nested,
                           /*allow_unused=*/true);
  }
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined()) grads[i] = zeros_like(inputs[i]).detach();
  return {nested ? value : value.detach(), std::move(grads)};
}

template <typename F, bool WithValue, bool Many>
class GradTransform {
 public:
  GradTransform(F f, std::vector<size_t> argnums) : f_(std::move(f)), argnums_(std::move(argnums)) {}
  template <typename... Args>
  auto operator()(Args&&... args) const {
    auto [value, grads] = value_and_grads(f_, argnums_, WithValue ? "value_and_grad" : "grad", std::forward<Args>(args)...);
    if constexpr (WithValue && Many) {
      return std::pair<Tensor, std::vector<Tensor>>(std::move(value), std::move(grads));
    } else if constexpr (WithValue) {
      return std::tuple<Tensor, Tensor>(std::move(value), std::move(grads[0]));
    } else if constexpr (Many) {
      return grads;
    } else {
      return std::move(grads[0]);
    }
  }

 private:
  F f_;
  std::vector<size_t> argnums_;
};

}  // namespace detail

// d f / d (argument 0): a function of f's arguments returning a tensor of that argument's shape.
template <typename F>
auto grad(F f) {
  return detail::GradTransform<F, false, false>(std::move(f), {0});
}
// The gradients with respect to the arguments `argnums`, in that order (a std::vector<Tensor>).
template <typename F>
auto grad(F f, std::initializer_list<size_t> argnums) {
  return detail::GradTransform<F, false, true>(std::move(f), argnums);
}
// {f(args...), d f / d (argument 0)}, a std::tuple<Tensor, Tensor>.
template <typename F>
auto value_and_grad(F f) {
  return detail::GradTransform<F, true, false>(std::move(f), {0});
}
// {f(args...), the gradients with respect to `argnums`}, a std::pair<Tensor, std::vector<Tensor>>.
template <typename F>
auto value_and_grad(F f, std::initializer_list<size_t> argnums) {
  return detail::GradTransform<F, true, true>(std::move(f), argnums);
}

}  // namespace kiln
