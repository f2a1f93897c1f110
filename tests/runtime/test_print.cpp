#include "test_util.h"

using namespace kiln;

TEST(Print, MatchesPyTorchFormat) {
  EXPECT_EQ(from_vector<float>({1, 2, 3}).str(), "tensor([1., 2., 3.])");
  EXPECT_EQ(from_vector<float>({1.5, -2.25}).str(), "tensor([ 1.5000, -2.2500])");
  EXPECT_EQ(arange(6).view({2, 3}).str(), "tensor([[0, 1, 2],\n        [3, 4, 5]])");
  EXPECT_EQ(arange(3, kInt32).str(), "tensor([0, 1, 2], dtype=torch.int32)");
  EXPECT_EQ(from_vector(std::vector<bool>{true, false}).str(), "tensor([ True, False])");
  EXPECT_EQ(scalar_tensor(2.5, kFloat64).str(), "tensor(2.5000, dtype=torch.float64)");
  EXPECT_EQ(from_vector<float>({1e-5, 1}).str(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(from_vector<float>({NAN, INFINITY, 1}).str(), "tensor([nan, inf, 1.])");
  EXPECT_EQ(zeros({0}).str(), "tensor([])");
  EXPECT_EQ(zeros({0, 3}, kInt64).str(), "tensor([], size=(0, 3), dtype=torch.int64)");
  EXPECT_EQ(arange(2000).str(), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(arange(8, kFloat32).view({2, 2, 2}).str(),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  EXPECT_EQ(arange(30).str(),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
            "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
}
