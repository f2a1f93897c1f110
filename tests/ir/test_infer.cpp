// Type inference against the eager kernels it mirrors, and the verifier's type errors.
#include <gtest/gtest.h>
#include <kiln/ir/graph.h>
#include <kiln/ir/infer.h>
#include <kiln/runtime/factories.h>
#include <kiln/runtime/ops.h>

#include <functional>
#include <limits>

using namespace kiln;
using namespace kiln::ir;

namespace {

using Sizes = std::vector<int64_t>;

// A tensor with the given layout (ones, so that integer division and indices stay valid).
Tensor make(DType dt, Sizes sizes, Sizes strides = {}) {
  if (strides.empty()) return ones(sizes, dt);
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) extent += (sizes[i] - 1) * strides[i];
  return ones({extent}, dt).as_strided(sizes, strides, 0);
}

// An operand as the eager op received it: a tensor or a Python-style number.
struct In {
  Tensor t;
  std::optional<Scalar> s;
  In(Tensor x) : t(std::move(x)) {}
  In(Scalar x) : s(x) {}
};
Type type_of(const In& in) {
  if (!in.s) return Type::tensor(in.t.dtype(), in.t.sizes().vec(), in.t.strides().vec());
  Type t = Type::tensor(in.s->is_bool() ? kBool : in.s->is_integral() ? kInt64 : kFloat64, {}, {});
  t.wrapped = true;
  return t;
}
Type type_of(const Tensor& t) { return type_of(In(t)); }

std::vector<Type> types_of(const std::vector<In>& ins) {
  std::vector<Type> ts;
  for (const In& in : ins) ts.push_back(type_of(in));
  return ts;
}

// infer_types must give exactly the dtype, sizes and strides of what the eager op returns.
void expect_eager(OpId op, std::vector<In> ins, std::vector<Attr> attrs, const std::function<std::vector<Tensor>()>& eager) {
  SCOPED_TRACE(std::string(op_info(op).name));
  std::vector<Tensor> outs = eager();
  std::vector<Type> inferred = infer_types(op, types_of(ins), attrs);
  ASSERT_EQ(inferred.size(), outs.size());
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(inferred[i].str(), type_of(outs[i]).str()) << "result " << i;
}
// ... and refuse what the eager op refuses.
void expect_both_fail(OpId op, std::vector<In> ins, std::vector<Attr> attrs, const std::function<void()>& eager,
                      const std::string& needle) {
  SCOPED_TRACE(std::string(op_info(op).name));
  EXPECT_THROW(eager(), Error);
  try {
    infer_types(op, types_of(ins), attrs);
    ADD_FAILURE() << "inference accepted what eager refuses";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("[infer] " + std::string(op_info(op).name) + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
}

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }
AttrValue str(const char* s) { return std::string(s); }

}  // namespace

TEST(IrInfer, PromotionMatchesEager) {
  Tensor i8 = make(kInt8, {2, 3}), i32 = make(kInt32, {2, 3}), b = make(kBool, {4});
  expect_eager(OpId::Add, {i8, Scalar(1000)}, {{"alpha", int64_t(1)}}, [&] { return one(add(i8, Scalar(1000))); });
  expect_eager(OpId::Add, {i8, Scalar(2.5)}, {}, [&] { return one(add(i8, Scalar(2.5))); });
  Tensor d0 = make(kFloat64, {});
  expect_eager(OpId::Add, {i32, d0}, {}, [&] { return one(add(i32, d0)); });  // a 0-d tensor of a higher category
  Tensor i64_0d = make(kInt64, {});
  expect_eager(OpId::Mul, {i8, i64_0d}, {}, [&] { return one(mul(i8, i64_0d)); });  // same category: int8 wins
  expect_eager(OpId::Mul, {b, Scalar(2.5)}, {}, [&] { return one(mul(b, Scalar(2.5))); });
  expect_eager(OpId::Add, {b, Scalar(true)}, {{"alpha", true}}, [&] { return one(add(b, Scalar(true), true)); });
  Tensor h = make(kFloat16, {2, 3}), bf = make(kBFloat16, {3});
  expect_eager(OpId::Sub, {h, bf}, {}, [&] { return one(sub(h, bf)); });
  expect_eager(OpId::Div, {i32, i32}, {{"rounding_mode", NoneAttr{}}}, [&] { return one(div(i32, i32)); });
  expect_eager(OpId::Div, {i32, i32}, {{"rounding_mode", str("floor")}}, [&] { return one(div(i32, i32, "floor")); });
  expect_eager(OpId::Div, {Scalar(1), i8}, {}, [&] { return one(div(Scalar(1), i8)); });
  Tensor u8 = make(kUInt8, {3});
  expect_eager(OpId::Eq, {u8, Scalar(-1)}, {}, [&] { return one(eq(u8, Scalar(-1))); });
  expect_eager(OpId::BitwiseAnd, {i8, Scalar(true)}, {}, [&] { return one(bitwise_and(i8, Scalar(true))); });
  expect_eager(OpId::Pow, {i32, Scalar(2.0)}, {}, [&] { return one(pow(i32, Scalar(2.0))); });
  expect_eager(OpId::Pow, {Scalar(2), i8}, {}, [&] { return one(pow(Scalar(2), i8)); });
  expect_eager(OpId::Atan2, {i32, i8}, {}, [&] { return one(atan2(i32, i8)); });
  expect_eager(OpId::Hypot, {h, bf}, {}, [&] { return one(hypot(h, bf)); });
  expect_eager(OpId::LogAddExp, {i8, h}, {}, [&] { return one(logaddexp(i8, h)); });
  expect_both_fail(OpId::Hypot, {i32, i8}, {}, [&] { hypot(i32, i8); }, "not implemented for 'int32'");
  expect_both_fail(OpId::LogAddExp, {i8, i8}, {}, [&] { logaddexp(i8, i8); }, "not implemented for 'int8'");
  expect_eager(OpId::Maximum, {i8, h}, {}, [&] { return one(maximum(i8, h)); });
  expect_eager(OpId::LogicalXor, {i8, h}, {}, [&] { return one(logical_xor(i8, h)); });
  expect_eager(OpId::Sqrt, {i32}, {}, [&] { return one(kiln::sqrt(i32)); });
  expect_eager(OpId::Floor, {i32}, {}, [&] { return one(kiln::floor(i32)); });
  expect_eager(OpId::NanToNum, {i32}, {}, [&] { return one(nan_to_num(i32)); });
  expect_eager(OpId::IsNan, {h}, {}, [&] { return one(kiln::isnan(h)); });
  expect_eager(OpId::Gelu, {h}, {{"approximate", str("none")}}, [&] { return one(gelu(h)); });
}

TEST(IrInfer, ElementwiseOutputsAreRowMajorAndBroadcast) {
  // a transposed operand does not make a transposed result: eager allocates with empty()
  Tensor t = make(kFloat32, {3, 2}, {1, 3}), row = make(kFloat32, {2});
  expect_eager(OpId::Neg, {t}, {}, [&] { return one(neg(t)); });
  expect_eager(OpId::Add, {t, row}, {}, [&] { return one(add(t, row)); });
  expect_eager(OpId::Exp, {t}, {}, [&] { return one(kiln::exp(t)); });
  Tensor c = make(kBool, {2, 1}), col = make(kFloat32, {2, 1});
  expect_eager(OpId::Where, {c, row, Scalar(0)}, {}, [&] { return one(where(c, row, Scalar(0))); });
  expect_eager(OpId::Clamp, {col, Scalar(0.5)}, {{"has_max", false}, {"has_min", true}},
               [&] { return one(clamp(col, Scalar(0.5))); });
  Tensor i = make(kInt32, {4});
  expect_eager(OpId::Clamp, {i, Scalar(0.5)}, {{"has_min", true}}, [&] { return one(clamp(i, Scalar(0.5))); });
  Tensor hi = scalar_tensor(3);
  expect_eager(OpId::Clamp, {i, row.view({2, 1}), hi}, {{"has_max", true}, {"has_min", true}},
               [&] { return one(clamp(i, std::optional<Tensor>(row.view({2, 1})), std::optional<Tensor>(hi))); });
  Tensor m = make(kBool, {2, 2});
  expect_eager(OpId::MaskedFill, {row, m}, {{"value", int64_t(1)}}, [&] { return one(masked_fill(row, m, 1)); });
  expect_eager(OpId::Lerp, {row, row, Scalar(0.5)}, {}, [&] { return one(lerp(row, row, Scalar(0.5))); });
  expect_eager(OpId::Addcmul, {row, col, row}, {{"value", 2.0}}, [&] { return one(addcmul(row, col, row, 2.0)); });
  // cast: a fresh tensor, or the operand itself when the dtype already matches
  expect_eager(OpId::Cast, {t}, {{"dtype", kFloat16}}, [&] { return one(t.to(kFloat16)); });
  expect_eager(OpId::Cast, {t}, {{"dtype", kFloat32}}, [&] { return one(t.to(kFloat32)); });
  expect_eager(OpId::Fill, {t}, {{"value", 2.5}}, [&] { return one(full_like(t, 2.5)); });
}

TEST(IrInfer, ReductionsMatchEager) {
  Tensor i32 = make(kInt32, {2, 3}), f = make(kFloat32, {3, 2}, {1, 3}), d = make(kFloat64, {2, 3, 4});
  expect_eager(OpId::Sum, {i32}, {{"dims", IntList{1}}, {"keepdim", true}}, [&] { return one(sum(i32, {1}, true)); });
  expect_eager(OpId::Sum, {f}, {}, [&] { return one(sum(f)); });
  expect_eager(OpId::Sum, {i32}, {{"dims", IntList{-1, 0}}, {"dtype", kFloat16}}, [&] { return one(sum(i32, {-1, 0}, false, kFloat16)); });
  expect_eager(OpId::Mean, {d}, {{"dims", IntList{0, 2}}}, [&] { return one(mean(d, {0, 2})); });
  expect_eager(OpId::Prod, {make(kBool, {3})}, {}, [&] { return one(prod(make(kBool, {3}))); });
  expect_eager(OpId::Any, {make(kUInt8, {3})}, {}, [&] { return one(any(make(kUInt8, {3}))); });
  expect_eager(OpId::All, {f}, {{"dims", IntList{0}}}, [&] { return one(all(f, {0})); });
  expect_eager(OpId::LogSumExp, {i32}, {{"dims", IntList{1}}}, [&] { return one(logsumexp(i32, {1})); });
  expect_eager(OpId::Norm, {f}, {{"dims", IntList{1}}, {"keepdim", true}, {"p", 2.0}}, [&] { return one(norm(f, 2, {1}, true)); });
  expect_eager(OpId::Var, {d}, {{"correction", int64_t(0)}, {"dims", IntList{1}}}, [&] { return one(var(d, {1}, 0)); });
  expect_eager(OpId::Std, {d}, {}, [&] { return one(kiln::std(d)); });
  expect_eager(OpId::MaxDim, {f}, {{"dim", int64_t(1)}, {"keepdim", true}}, [&] {
    auto [v, i] = max(f, 1, true);
    return std::vector<Tensor>{v, i};
  });
  expect_eager(OpId::MinDim, {make(kInt8, {})}, {{"dim", int64_t(-1)}}, [&] {
    auto [v, i] = min(make(kInt8, {}), -1);
    return std::vector<Tensor>{v, i};
  });
  expect_eager(OpId::Aminmax, {f}, {{"dims", IntList{1}}, {"keepdim", true}}, [&] {
    auto [lo, hi] = aminmax(f, 1, true);
    return std::vector<Tensor>{lo, hi};
  });
  expect_eager(OpId::Aminmax, {make(kBool, {4})}, {}, [&] {
    auto [lo, hi] = aminmax(make(kBool, {4}));
    return std::vector<Tensor>{lo, hi};
  });
  expect_eager(OpId::Argmax, {f}, {{"keepdim", true}}, [&] { return one(argmax(f, std::nullopt, true)); });
  expect_eager(OpId::Argmin, {d}, {{"dim", int64_t(2)}}, [&] { return one(argmin(d, 2)); });
  expect_eager(OpId::Softmax, {f}, {{"dim", int64_t(0)}}, [&] { return one(softmax(f, 0)); });
  expect_eager(OpId::Cumsum, {make(kBool, {5})}, {{"dim", int64_t(0)}}, [&] { return one(cumsum(make(kBool, {5}), 0)); });
  Tensor e = make(kFloat32, {0, 3});
  expect_eager(OpId::Amax, {e}, {{"dims", IntList{1}}}, [&] { return one(amax(e, {1})); });
  expect_both_fail(OpId::Amax, {e}, {}, [&] { amax(e); }, "numel() == 0");
  expect_both_fail(OpId::Mean, {i32}, {}, [&] { mean(i32); }, "Got: int32");
  expect_both_fail(OpId::Aminmax, {e}, {}, [&] { aminmax(e); }, "numel() == 0");
  expect_both_fail(OpId::Sum, {i32}, {{"dims", IntList{1, -1}}}, [&] { sum(i32, {1, -1}); }, "appears multiple times");
  expect_both_fail(OpId::Sum, {i32}, {{"dims", IntList{2}}}, [&] { sum(i32, {2}); }, "Dimension out of range");
}

TEST(IrInfer, ViewsComputeStridesAsTensorDoes) {
  Tensor x = make(kFloat32, {2, 3, 4}), p = x.permute({1, 0, 2});
  expect_eager(OpId::View, {x}, {{"sizes", IntList{4, -1}}}, [&] { return one(x.view({4, -1})); });
  expect_eager(OpId::View, {p}, {{"sizes", IntList{3, 2, 2, 2}}}, [&] { return one(p.view({3, 2, 2, 2})); });
  expect_both_fail(OpId::View, {p}, {{"sizes", IntList{3, 8}}}, [&] { p.view({3, 8}); }, "view size");
  expect_eager(OpId::Transpose, {x}, {{"dim0", int64_t(-1)}, {"dim1", int64_t(0)}}, [&] { return one(x.transpose(-1, 0)); });
  expect_eager(OpId::Permute, {p}, {{"dims", IntList{2, 0, 1}}}, [&] { return one(p.permute({2, 0, 1})); });
  expect_eager(OpId::Slice, {x}, {{"dim", int64_t(2)}, {"end", int64_t(100)}, {"start", int64_t(-3)}, {"step", int64_t(2)}},
               [&] { return one(x.slice(2, -3, 100, 2)); });
  expect_eager(OpId::Select, {p}, {{"dim", int64_t(1)}, {"index", int64_t(-1)}}, [&] { return one(p.select(1, -1)); });
  Tensor col = make(kFloat32, {3, 1});
  expect_eager(OpId::Expand, {col}, {{"sizes", IntList{2, -1, 4}}}, [&] { return one(col.expand({2, -1, 4})); });
  Tensor s = make(kFloat32, {1, 3, 1}, {7, 1, 1});
  expect_eager(OpId::Squeeze, {s}, {{"dims", IntList{}}}, [&] { return one(s.squeeze()); });
  expect_eager(OpId::Squeeze, {s}, {{"dims", IntList{-1}}}, [&] { return one(s.squeeze(-1)); });
  expect_eager(OpId::Unsqueeze, {p}, {{"dim", int64_t(1)}}, [&] { return one(p.unsqueeze(1)); });
  expect_eager(OpId::Unsqueeze, {p}, {{"dim", int64_t(-1)}}, [&] { return one(p.unsqueeze(-1)); });
  expect_eager(OpId::Diagonal, {x}, {{"dim1", int64_t(1)}, {"dim2", int64_t(2)}, {"offset", int64_t(-1)}},
               [&] { return one(x.diagonal(-1, 1, 2)); });
  expect_eager(OpId::Diagonal, {x}, {{"offset", int64_t(7)}}, [&] { return one(x.diagonal(7)); });
  expect_eager(OpId::AsStrided, {x}, {{"sizes", IntList{3, 3}}, {"strides", IntList{1, 0}}},
               [&] { return one(x.as_strided({3, 3}, {1, 0})); });
  expect_both_fail(OpId::Select, {x}, {{"dim", int64_t(0)}, {"index", int64_t(2)}}, [&] { x.select(0, 2); }, "out of bounds");
  expect_both_fail(OpId::Expand, {x}, {{"sizes", IntList{2, 5, 4}}}, [&] { x.expand({2, 5, 4}); }, "must match");
}

TEST(IrInfer, OpaqueOpsMatchEager) {
  Tensor t = make(kFloat32, {3, 2}, {1, 3}), odd = make(kFloat32, {1, 3}, {7, 1});
  expect_eager(OpId::Contiguous, {t}, {}, [&] { return one(t.contiguous()); });
  expect_eager(OpId::Contiguous, {odd}, {}, [&] { return one(odd.contiguous()); });  // already contiguous: itself
  expect_eager(OpId::Clone, {odd}, {}, [&] { return one(odd.clone()); });
  Tensor a3 = make(kFloat32, {2, 3, 4}), v4 = make(kFloat32, {4}), b3 = make(kFloat32, {2, 4, 5});
  Tensor a4 = make(kFloat32, {2, 1, 3, 4}), b2 = make(kFloat32, {4, 2}), b3b = make(kFloat32, {5, 4, 2});
  expect_eager(OpId::Matmul, {a3, v4}, {}, [&] { return one(matmul(a3, v4)); });
  expect_eager(OpId::Matmul, {v4, b3}, {}, [&] { return one(matmul(v4, b3)); });
  expect_eager(OpId::Matmul, {a4, b3b}, {}, [&] { return one(matmul(a4, b3b)); });
  expect_eager(OpId::Matmul, {a3, b2}, {}, [&] { return one(matmul(a3, b2)); });
  expect_eager(OpId::Matmul, {v4, v4}, {}, [&] { return one(matmul(v4, v4)); });
  expect_eager(OpId::Matmul, {b2.t(), v4}, {}, [&] { return one(matmul(b2.t(), v4)); });
  expect_eager(OpId::Matmul, {v4, b2}, {}, [&] { return one(matmul(v4, b2)); });
  expect_eager(OpId::Bmm, {a3, b3}, {}, [&] { return one(bmm(a3, b3)); });
  Tensor m = make(kFloat64, {3, 4}), n = make(kFloat64, {4, 2}), bias = make(kFloat64, {2});
  expect_eager(OpId::Addmm, {bias, m, n}, {{"beta", 0.5}}, [&] { return one(addmm(bias, m, n, 0.5)); });
  expect_both_fail(OpId::Mm, {m, t}, {}, [&] { mm(m, t); }, "cannot be multiplied");
  expect_both_fail(OpId::Matmul, {make(kFloat32, {2, 3, 0}), make(kFloat32, {0, 4})}, {},
                   [&] { matmul(make(kFloat32, {2, 3, 0}), make(kFloat32, {0, 4})); }, "invalid for input of size 0");
  Tensor i32 = make(kInt32, {2, 3}), f = make(kFloat32, {1, 3});
  expect_eager(OpId::Cat, {i32, f, make(kInt64, {0})}, {{"dim", int64_t(0)}},
               [&] { return one(cat({i32, f, make(kInt64, {0})}, 0)); });
  expect_eager(OpId::Cat, {t, t}, {{"dim", int64_t(-1)}}, [&] { return one(cat({t, t}, -1)); });
  Tensor idx = zeros({2}, kInt64), gidx = zeros({2, 2}, kInt64);
  expect_eager(OpId::IndexSelect, {t, idx}, {{"dim", int64_t(1)}}, [&] { return one(index_select(t, 1, idx)); });
  expect_eager(OpId::Gather, {t, gidx}, {{"dim", int64_t(0)}}, [&] { return one(gather(t, 0, gidx)); });
}

TEST(IrInfer, EinsumReplaysItsSteps) {
  Tensor x = make(kFloat32, {2, 3}), y = make(kFloat32, {3, 4}), sq = make(kFloat32, {3, 3});
  Tensor bx = make(kFloat32, {5, 2, 3}), by = make(kFloat32, {5, 3, 4});
  auto check = [](const char* eq, std::vector<Tensor> ts) {
    std::vector<In> ins(ts.begin(), ts.end());
    expect_eager(OpId::Einsum, ins, {{"equation", str(eq)}}, [&] { return one(einsum(eq, ts)); });
  };
  check("ij->ji", {x});  // a view of the operand itself
  check("ii->i", {sq});  // its diagonal
  check("ij->", {x});
  check("ij,jk->ik", {x, y});
  check("ij,jk->ki", {x, y});  // a permuted product
  check("bij,bjk->bik", {bx, by});
  check("i,j->ij", {make(kFloat32, {3}), make(kFloat32, {4})});
  check("...ij->...ji", {bx});
  check("ij,jk", {x, y});
  check("bij,jk,bkl->bl", {bx, y, make(kFloat32, {5, 4, 2})});
  // integer operands: eager sums unneeded labels in int64 (sum's dtype), so the result can be
  // int64, and a summed operand meeting an unsummed one is refused by bmm
  Tensor i = make(kInt32, {2, 3}), k = make(kInt32, {4}), jk = make(kInt32, {3, 4});
  check("ij,k->i", {i, k});
  expect_both_fail(OpId::Einsum, {i, jk}, {{"equation", str("ij,jk->i")}}, [&] { einsum("ij,jk->i", {i, jk}); },
                   "expected scalar type");
  expect_both_fail(OpId::Einsum, {x}, {{"equation", str("ijk->i")}}, [&] { einsum("ijk->i", {x}); }, "number of subscripts");
}

TEST(IrInfer, CopyIsItsDestination) {
  Tensor dst = make(kFloat32, {3, 2}, {1, 3}), src = make(kInt64, {2});
  std::vector<Type> out = infer_types(OpId::Copy, {type_of(dst), type_of(src)}, {});
  EXPECT_EQ(out, std::vector<Type>{type_of(dst)});
  Tensor ex = make(kFloat32, {2}).expand({3, 2});
  expect_both_fail(OpId::Copy, {ex, src}, {}, [&] { Tensor e = ex; e.copy_(src); }, "more than one element");
  expect_both_fail(OpId::Copy, {src, dst}, {}, [&] { Tensor s = src; s.copy_(dst); }, "cannot be broadcast");
}

TEST(IrInfer, AttributeAndOperandErrors) {
  Type x = Type::contiguous(kFloat32, {2, 3});
  auto fails = [](OpId op, std::vector<Type> ins, std::vector<Attr> attrs, const std::string& needle) {
    try {
      infer_types(op, ins, attrs);
      ADD_FAILURE() << op_info(op).name << ": expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails(OpId::Sum, {x}, {{"dims", 1.5}}, "[infer] sum: attribute dims=1.5 must be ints, not float");
  fails(OpId::Sum, {x}, {{"keepdims", true}}, "unknown attribute 'keepdims' (sum takes dims, dtype, keepdim)");
  fails(OpId::Neg, {x}, {{"alpha", int64_t(1)}}, "neg takes no attributes");
  fails(OpId::Transpose, {x}, {{"dim0", int64_t(0)}}, "missing attribute 'dim1' (int)");
  fails(OpId::NanToNum, {x}, {{"nan", int64_t(0)}}, "must be float|none, not int");
  fails(OpId::Add, {x}, {}, "[infer] add: takes 2 operands, got 1");
  fails(OpId::Clamp, {x, x, x}, {{"has_min", true}}, "[infer] clamp: takes 2 operands, got 3");
  fails(OpId::Clamp, {x}, {}, "At least one of 'min' or 'max'");
  fails(OpId::Add, {x, Type::contiguous(kFloat32, {4})}, {},
        "[infer] add: The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1 (shapes [2, 3] and [4])");
  fails(OpId::Add, {Type::contiguous(kInt32, {2}), Type::contiguous(kInt32, {2})}, {{"alpha", 0.5}}, "alpha must not be a floating point");
  fails(OpId::Sub, {Type::contiguous(kBool, {2}), x}, {}, "with a bool tensor is not supported");
  fails(OpId::Div, {x, x}, {{"rounding_mode", std::string("round")}}, "rounding_mode");
  fails(OpId::Fill, {Type::contiguous(kUInt8, {2})}, {{"value", int64_t(300)}}, "cannot be converted to type uint8 without overflow");
  fails(OpId::Where, {x, x, x}, {}, "boolean tensor");
  fails(OpId::Mm, {Type::scalar(kFloat64), x}, {}, "operand 0 is a host scalar (scalar<f64>)");
  fails(OpId::Add, {x, Type::contiguous(kFloat32, {2, 3}, Device::cuda(0))}, {}, "same device");
  fails(OpId::Neg, {Type::tensor(kFloat32, {int64_t(1) << 40, int64_t(1) << 40}, {int64_t(1) << 40, 1})}, {}, "have more elements than int64 can count");
  Type w = Type::contiguous(kFloat32, {2});
  w.wrapped = true;
  fails(OpId::Neg, {w}, {}, "marked wrapped but is not 0-d");
  // a host scalar operand of an elementwise op promotes like a Python number
  EXPECT_EQ(infer_types(OpId::Mul, {Type::contiguous(kInt8, {2}), Type::scalar(kInt64)}, {})[0], Type::contiguous(kInt8, {2}));
  EXPECT_EQ(infer_types(OpId::Mul, {Type::contiguous(kInt8, {2}), Type::scalar(kFloat64)}, {})[0], Type::contiguous(kFloat32, {2}));
  // devices carry through
  EXPECT_EQ(infer_types(OpId::Neg, {Type::contiguous(kFloat32, {2}, Device::cuda(1))}, {})[0],
            Type::contiguous(kFloat32, {2}, Device::cuda(1)));
}

// ---------------------------------------------------------------- the verifier's type checks

namespace {
std::string verify_message(std::string_view text, int* line = nullptr, int* col = nullptr) {
  Graph g = parse(text);
  auto e = verify(g);
  if (!e) return "";
  if (line) *line = e->loc.line;
  if (col) *col = e->loc.col;
  return e->message;
}
}  // namespace

TEST(IrVerify, DeclaredTypesMustBeTheInferredOnes) {
  int line = 0, col = 0;
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}, %b: f64[3]{1}) {\n"
                           "  %0 = neg(%a) : f32[2,3]{3,1}\n"
                           "  %1 = add(%0, %b) : f32[2,3]{3,1}\n"
                           "  return %1\n"
                           "}\n",
                           &line, &col),
            "node 1 (%1 = add): declared f32[2,3]{3,1} but inferred f64[2,3]{3,1}");
  EXPECT_EQ(line, 3);
  EXPECT_EQ(col, 3);
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}) {\n"
                           "  %0 = transpose(%a) {dim0=0, dim1=1} : f32[3,2]{2,1}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0 = transpose): declared f32[3,2]{2,1} but inferred f32[3,2]{1,3}");
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}) {\n"
                           "  %0, %1 = max(%a) {dim=1} : f32[2]{1}, i32[2]{1}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0, %1 = max): result 1 declared i32[2]{1} but inferred i64[2]{1}");
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}) {\n"
                           "  %0, %1 = sum(%a) : f32[]{}, f32[]{}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0, %1 = sum): declares 2 results but sum has 1");
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}) {\n"
                           "  %0 = sum(%a) {dims=1.5} : f32[]{}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0 = sum): attribute dims=1.5 must be ints, not float");
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}) {\n"
                           "  %0 = clamp(%a, %a, %a) {has_min=true} : f32[2,3]{3,1}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0 = clamp): takes 2 operands, got 3");
  EXPECT_EQ(verify_message("graph @g(%a: f32[2,3]{3,1}) {\n"
                           "  %0 = constant() {value=1} : f32[]{}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0 = constant): value=1 does not fit its type's category (f32[]{})");
  EXPECT_EQ(verify_message("graph @g() {\n"
                           "  %0 = constant() {data=\"00\"} : i16[1]{1}\n"
                           "  return %0\n"
                           "}\n"),
            "node 0 (%0 = constant): data= has 1 bytes, but i16[1]{1} needs 2");
  // Constants hold their bytes; the text form writes them as hex, two digits a byte.
  EXPECT_THROW(ir::parse("graph @g() {\n  %0 = constant() {data=\"0g\"} : i8[1]{1}\n  return %0\n}\n"), ParseError);
  EXPECT_THROW(ir::parse("graph @g() {\n  %0 = constant() {data=\"012\"} : i8[1]{1}\n  return %0\n}\n"), ParseError);
  {
    Graph g = ir::parse("graph @g() {\n  %0 = constant() {data=\"0A00\"} : i16[1]{1}\n  return %0\n}\n");
    EXPECT_EQ(std::get<std::string>(g.nodes()[0]->attrs[0].value), std::string("\x0a\x00", 2));
    EXPECT_NE(ir::print(g).find("data=\"0a00\""), std::string::npos) << ir::print(g);
    EXPECT_EQ(ir::to_json(ir::parse(ir::print(g))), ir::to_json(g));
    EXPECT_EQ(ir::print(ir::from_json(ir::to_json(g))), ir::print(g));
  }
  EXPECT_EQ(verify_message("graph @g() {\n"
                           "  %0 = constant() {data=\"0100\"} : i16[1]{1}\n"
                           "  %1 = constant() {value=2} : i64[]{} wrapped\n"
                           "  %2 = mul(%0, %1) : i16[1]{1}\n"
                           "  return %2\n"
                           "}\n"),
            "");
}

TEST(IrVerify, RegionsAreCheckedAgainstTheirNode) {
  const char* head = "graph @g(%p: b8[]{}, %x: f32[4]{1}) {\n";
  auto with = [&](const std::string& body) { return head + body + "  return %0\n}\n"; };
  int line = 0, col = 0;
  // a region's inner type error, reported at the inner node
  EXPECT_EQ(verify_message(with("  %0 = cond(%p, %x) : f32[4]{1} {\n"
                                "    graph @then(%x: f32[4]{1}) {\n"
                                "      %0 = neg(%x) : f64[4]{1}\n"
                                "      return %0\n"
                                "    }\n"
                                "    graph @else(%x: f32[4]{1}) {\n"
                                "      return %x\n"
                                "    }\n"
                                "  }\n"),
                           &line, &col),
            "in region 0 (@then) of node 0 (%0 = cond): node 0 (%0 = neg): declared f64[4]{1} but inferred f32[4]{1}");
  EXPECT_EQ(line, 4);
  EXPECT_EQ(col, 7);
  // a region input of another type than its operand
  EXPECT_EQ(verify_message(with("  %0 = cond(%p, %x) : f32[4]{1} {\n"
                                "    graph @then(%x: f64[4]{1}) {\n"
                                "      return %x\n"
                                "    }\n"
                                "    graph @else(%x: f32[4]{1}) {\n"
                                "      return %x\n"
                                "    }\n"
                                "  }\n")),
            "node 0 (%0 = cond): input %x of region 0 (@then) has type f64[4]{1} but operand 1 has type f32[4]{1}");
  // branches that return different types
  EXPECT_EQ(verify_message(with("  %0 = cond(%p, %x) : f32[4]{1} {\n"
                                "    graph @then(%x: f32[4]{1}) {\n"
                                "      return %x\n"
                                "    }\n"
                                "    graph @else(%x: f32[4]{1}) {\n"
                                "      %0 = isnan(%x) : b8[4]{1}\n"
                                "      return %0\n"
                                "    }\n"
                                "  }\n")),
            "node 0 (%0 = cond): region 1 (@else) returns b8[4]{1} for result 0 but the node declares f32[4]{1}");
  // a predicate of more than one element
  EXPECT_NE(verify_message(with("  %0 = cond(%x, %x) : f32[4]{1} {\n"
                                "    graph @then(%x: f32[4]{1}) {\n"
                                "      return %x\n"
                                "    }\n"
                                "    graph @else(%x: f32[4]{1}) {\n"
                                "      return %x\n"
                                "    }\n"
                                "  }\n"))
                .find("the predicate must have one element"),
            std::string::npos);
}

TEST(IrVerify, MalformedRegionsAreParseErrors) {
  auto expect_error = [](std::string_view text, int line, int col, const std::string& needle) {
    try {
      parse(text);
      ADD_FAILURE() << "expected a parse error containing '" << needle << "'";
    } catch (const ParseError& e) {
      EXPECT_EQ(e.line, line) << e.what();
      EXPECT_EQ(e.col, col) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string head = "graph @g(%p: b8[]{}, %x: f32[4]{1}) {\n";
  const std::string then_else =
      "    graph @then(%x: f32[4]{1}) {\n"
      "      return %x\n"
      "    }\n"
      "    graph @else(%x: f32[4]{1}) {\n"
      "      return %x\n"
      "    }\n";
  // regions on an op that takes none
  expect_error(head + "  %0 = neg(%x) : f32[4]{1} {\n" + then_else + "  }\n  return %0\n}\n", 2, 28, "neg takes no regions");
  // one region where cond takes two
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    graph @then(%x: f32[4]{1}) {\n      return %x\n    }\n  }\n"
                      "  return %0\n}\n",
               2, 3, "cond takes 2 regions (then, else), got 1");
  // no regions at all
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1}\n  return %0\n}\n", 2, 3, "cond takes 2 regions");
  // a region that does not take the branch operands
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    graph @then() {\n      return %x\n    }\n",
               4, 14, "use of undefined value %x");
  const std::string no_inputs = "() {\n      %0 = constant() {value=1.0} : f64[]{}\n      return %0\n    }\n";
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    graph @then" + no_inputs + "    graph @else" + no_inputs +
                   "  }\n  return %0\n}\n",
               2, 3, "region 0 (@then) takes 0 inputs but the node passes 1 branch operands");
  // a region returning the wrong number of values
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    graph @then(%x: f32[4]{1}) {\n      return %x, %x\n    }\n"
                      "    graph @else(%x: f32[4]{1}) {\n      return %x\n    }\n  }\n  return %0\n}\n",
               2, 3, "region 0 (@then) returns 2 values but the node has 1 results");
  // an outer value used inside a region: regions see only their own inputs
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    graph @then(%y: f32[4]{1}) {\n      %0 = neg(%p) : b8[]{}\n",
               4, 16, "use of undefined value %p");
  // garbage where a region should start, and an unclosed region list
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    %1 = neg(%x) : f32[4]{1}\n", 3, 5,
               "expected a region ('graph @name(...) {') or '}'");
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n" + then_else, 9, 1, "but the text ended");
  // a structural error inside a region reports the region's node
  expect_error(head + "  %0 = cond(%p, %x) : f32[4]{1} {\n    graph @then(%x: f32[4]{1}) {\n      %0 = add(%x) : f32[4]{1}\n"
                      "      return %0\n    }\n",
               4, 7, "add takes 2 operands, got 1");
  // nesting is bounded
  std::string deep = "graph @g(%p: b8[]{}) {\n";
  for (int i = 0; i < 70; ++i) deep += "%0 = cond(%p, %p) : b8[]{} {\ngraph @then(%p: b8[]{}) {\n";
  try {
    parse(deep);
    ADD_FAILURE() << "deep nesting parsed";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64"), std::string::npos) << e.what();
  }
}
