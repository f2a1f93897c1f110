// Factories in a trace: the ops that make a factory's tensor again at every call.
//
// A tensor made inside a compiled function by zeros, ones, full, arange, linspace or eye is not
// stored in the graph as its bytes: it becomes the few ops that make it, so the graph stays
// small whatever the size, is the same at every trace (and every size), and fuses into the
// ops that read it. The arithmetic is the eager factory's, operation for operation
// (runtime/src/factories.cpp), so a compiled call gives eager's bits:
//   - fill: zeros, ones, full, scalar_tensor, and empty (whose contents no one may read before
//     writing them: zeros then) are `fill` of the value broadcast to the sizes;
//   - arange(start, end, step): start + step * i with one rounding, in int64 when every bound
//     is an integer and the dtype is one (wrapping as eager's), else in float64, then cast;
//   - linspace(start, end, n): the first half counts up from start, the second down from end
//     (both endpoints exact), each with one rounding, in float64, then cast;
//   - eye(n, m): the row index equal to the column index, cast.
// `i` is an `iota`: each element's row-major index, int64. Every other factory's tensor
// (from_vector, logspace, ...) is stored as a constant.
#include "kiln/ir/exec.h"
#include "kiln/ir/infer.h"
#include "kiln/runtime/factories.h"
#include "tracer.h"

namespace kiln::detail {

namespace {

class Maker {
 public:
  Maker(ir::Graph& g, Device device) : g_(g), device_(device) {}

  // A 0-d tensor constant holding v as dtype dt (a tensor, not a number: it does not change
  // the type promotion of what it is combined with, and a number operand cannot come first
  // in an add with alpha).
  ir::Value* value(const Scalar& v, DType dt) {
    ir::Type one = ir::Type::tensor(dt, {}, {}, device_);
    std::string data = ir::encode_constant(scalar_tensor(v, TensorOptions(dt)));
    return g_.add_node(OpId::Constant, {}, {{"data", std::move(data)}}, {one})->outputs[0];
  }
  ir::Value* node(OpId op, std::vector<ir::Value*> ins, std::vector<Attr> attrs) {
    std::vector<ir::Type> in_types;
    for (const ir::Value* v : ins) in_types.push_back(v->type);
    std::vector<ir::Type> types = ir::infer_types(op, in_types, attrs);
    return g_.add_node(op, std::move(ins), std::move(attrs), std::move(types))->outputs[0];
  }
  // `v` (a 0-d value) broadcast to `sizes`: what fill and iota take their sizes and device from.
  ir::Value* broadcast(ir::Value* v, const std::vector<int64_t>& sizes) {
    return node(OpId::Expand, {v}, {{"sizes", IntList(sizes)}});
  }
  ir::Value* iota(const std::vector<int64_t>& sizes) {
    return node(OpId::Iota, {broadcast(value(int64_t(0), kInt64), sizes)}, {});
  }
  ir::Value* cast(ir::Value* v, DType dt) { return v->type.dtype == dt ? v : node(OpId::Cast, {v}, {{"dtype", dt}}); }

 private:
  ir::Graph& g_;
  Device device_;
};

}  // namespace

ir::Value* make_factory(ir::Graph& g, const Tensor& t, std::string_view factory, std::span<const Scalar> args) {
  Maker m(g, t.device());
  const DType dt = t.dtype();
  const std::vector<int64_t> sizes = t.sizes().vec();
  ir::Value* made = nullptr;
  if (factory == "zeros" || factory == "ones" || factory == "full" || factory == "scalar_tensor" ||
      factory == "empty") {
    Scalar v = factory == "ones" ? Scalar(int64_t(1)) : Scalar(int64_t(0));
    if ((factory == "full" || factory == "scalar_tensor") && t.numel() > 0) v = t.reshape({-1})[0].item();
    if (dt == kBool) v = Scalar(v.to_bool());
    ir::Value* wide = m.broadcast(m.value(v, dt), sizes);
    return g.add_node(OpId::Fill, {wide}, {{"value", scalar_attr(v)}}, {ir::Type::contiguous(dt, sizes, t.device())})
        ->outputs[0];
  } else if (factory == "arange" && args.size() == 3) {
    const Scalar &start = args[0], &end = args[1], &step = args[2];
    ir::Value* i = m.iota(sizes);
    if (!start.is_floating() && !end.is_floating() && !step.is_floating() && is_integral(dt))
      made = m.node(OpId::Add, {m.value(start.to_int(), kInt64), i}, {{"alpha", step.to_int()}});
    else
      made = m.node(OpId::Add, {m.value(start.to_double(), kFloat64), m.cast(i, kFloat64)}, {{"alpha", step.to_double()}});
  } else if (factory == "linspace" && args.size() == 2 && sizes.size() == 1 && sizes[0] > 1) {
    const int64_t n = sizes[0];
    const double s = args[0].to_double(), e = args[1].to_double(), step = (e - s) / double(n - 1);
    ir::Value* i = m.iota(sizes);
    ir::Value* up = m.node(OpId::Add, {m.value(s, kFloat64), m.cast(i, kFloat64)}, {{"alpha", step}});
    ir::Value* left = m.node(OpId::Sub, {m.value(n - 1, kInt64), i}, {{"alpha", int64_t(1)}});
    ir::Value* down = m.node(OpId::Sub, {m.value(e, kFloat64), m.cast(left, kFloat64)}, {{"alpha", step}});
    made = m.node(OpId::Where, {m.node(OpId::Lt, {i, m.value(n / 2, kInt64)}, {}), up, down}, {});
  } else if (factory == "eye" && sizes.size() == 2) {
    made = m.node(OpId::Eq, {m.iota({sizes[0], 1}), m.iota({1, sizes[1]})}, {});
  }
  if (!made) return nullptr;
  made = m.cast(made, dt);
  KILN_CHECK(made->type == ir::Type::contiguous(dt, sizes, t.device()), "compile", factory,
             "(): internal error: its ops give ", made->type.str(), ", not the tensor it made");
  return made;
}

}  // namespace kiln::detail
