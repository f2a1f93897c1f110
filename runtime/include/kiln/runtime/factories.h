// Tensor factories, as in libtorch: kiln::zeros({2, 3}), kiln::arange(10), kiln::randn({4}, kFloat64).
#pragma once
#include <cstdint>
#include <vector>

#include "tensor.h"

namespace kiln {

Tensor empty(IntArrayRef sizes, TensorOptions opts = {});
// A tensor with the given sizes and strides (elements), big enough for every index.
Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions opts = {});
Tensor zeros(IntArrayRef sizes, TensorOptions opts = {});
Tensor ones(IntArrayRef sizes, TensorOptions opts = {});
// Without a dtype the fill value decides it: bool, int64 or float32.
Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions opts = {});
Tensor scalar_tensor(const Scalar& value, TensorOptions opts = {});
// arange: int64 when every bound is an integer, else float32; the size is ceil((end-start)/step).
Tensor arange(const Scalar& end, TensorOptions opts = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, TensorOptions opts = {});
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, TensorOptions opts = {});
Tensor logspace(const Scalar& start, const Scalar& end, int64_t steps, double base = 10.0,
                TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});

// ---- random: a counter-based Philox4x32-10 stream, reproducible from manual_seed ----
void manual_seed(uint64_t seed);
Tensor rand(IntArrayRef sizes, TensorOptions opts = {});   // uniform [0, 1)
Tensor randn(IntArrayRef sizes, TensorOptions opts = {});  // standard normal
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions opts = {});
Tensor randint(int64_t high, IntArrayRef sizes, TensorOptions opts = {});
Tensor randperm(int64_t n, TensorOptions opts = {});

// ---- *_like: same sizes (dense, row-major), dtype and device unless opts say otherwise ----
Tensor empty_like(const Tensor& t, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t, TensorOptions opts = {});
Tensor ones_like(const Tensor& t, TensorOptions opts = {});
Tensor full_like(const Tensor& t, const Scalar& value, TensorOptions opts = {});
Tensor rand_like(const Tensor& t, TensorOptions opts = {});
Tensor randn_like(const Tensor& t, TensorOptions opts = {});

// ---- from host data ----
// Copies `values` into a new tensor of the given sizes (default: 1-d).
template <typename T>
Tensor from_vector(const std::vector<T>& values, IntArrayRef sizes = {});
Tensor from_vector(const std::vector<bool>& values, IntArrayRef sizes = {});
// Wraps `data` without copying. `deleter` (optional) runs when the last tensor viewing it goes.
Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions opts = {},
                 Storage::Deleter deleter = nullptr);
Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions opts = {},
                 Storage::Deleter deleter = nullptr);

}  // namespace kiln
