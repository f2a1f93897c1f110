#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;

TEST(Errors, MessagesNameOpShapesAndDims) {
  Tensor a = ones({2, 3}), b = ones({2, 4});
  expect_error([&] { a + b; },
               "[add] The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1");
  expect_error([&] { a.transpose(0, 2); }, "[transpose] Dimension out of range");
  expect_error([&] { a.permute({0, 0}); }, "[permute] repeated dim 0");
  expect_error([&] { a.narrow(1, 2, 5); }, "exceeds dimension size (3)");
  expect_error([&] { a.t().view({6}); }, "[view]");
  expect_error([&] { a.to(Device::cuda(0)); }, "cuda:0");
  expect_error([&] { Tensor u; u.sum(); }, "undefined tensor");
  expect_error([&] { -ones({2}, kBool); }, "Negation, the `-` operator, on a bool tensor is not supported");
  expect_error([&] { ones({2}, kBool) - ones({2}, kBool); }, "Subtraction, the `-` operator, with a bool tensor");
  expect_error([&] { add(ones({2}, kInt32), ones({2}, kInt32), 0.5); }, "alpha must not be a floating point");
  expect_error([&] { gelu(ones({2}), "fast"); }, "approximate argument must be either none or tanh");
  expect_error([&] { softmax(ones({2}, kInt64), 0); }, "not implemented for 'int64'");
  expect_error([&] { ones({2}).as_strided({3}, {2}); }, "[as_strided]");
  expect_error([&] { ones({2, 2}).expand({2}); }, "must be greater or equal to the number of dimensions");
  expect_error([&] { ones({2}).expand({1}); }, "must match the existing size (2)");
}

TEST(Errors, ExceptionsFromWorkerThreadsArrive) {
  // the integer zero-division is detected inside the threaded loop
  Tensor a = ones({1 << 18}, kInt64), z = zeros({1 << 18}, kInt64);
  expect_error([&] { div(a, z, "floor"); }, "ZeroDivisionError");
}
