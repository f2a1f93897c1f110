// The reduction engine (internal): reduces a tensor over a set of dims with an Op.
//
// An Op provides `acc_t`, identity(), reduce(acc, x) (x already converted to acc_t),
// combine(acc, acc) and project(acc, count) -> output value. Contiguous runs are reduced into
// several independent lanes (so the compiler vectorises without reassociating) and long runs
// are split pairwise, which keeps float sums accurate to O(log n) roundings.
#pragma once
#include <memory>
#include <vector>

#include "cpu/float16_blocks.h"
#include "cpu/vec.h"
#include "ops_common.h"

namespace kiln::detail {

struct ReducePlan {
  struct Dim { int64_t size, in_stride, out_stride; };  // strides in elements
  std::vector<Dim> kept, reduced;  // innermost first
  int64_t out_numel = 1, reduce_numel = 1;
  bool inner_reduced = false;  // the dim with the smallest input stride is reduced
};

// Plans reducing x (dims in `mask`) into `out`, a contiguous tensor with x's keepdim shape.
ReducePlan plan_reduce(const Tensor& x, const std::vector<bool>& mask, const Tensor& out);

// Output shape with or without the reduced dims.
std::vector<int64_t> reduced_shape(IntArrayRef sizes, const std::vector<bool>& mask, bool keepdim);

inline constexpr int kLanes = 16;
inline constexpr int64_t kPairwiseBlock = 4096;

// gcc leaves reduce_run's lane loop scalar where an op's reduce selects on NaN: max and min (a
// NaN lane stays NaN) and nansum (NaN adds nothing); amax over rows ran 17x slower than
// PyTorch's. Such an op names its kind (Op::kVectorLanes), and a contiguous float32 or float64
// run then updates the same 16 lanes by vectors: nansum's with the values the scalar loop gives
// them, max's and min's with the same extremum (or NaN).
enum class VectorLanes { Max, Min, NanSum };
#if KILN_HAVE_VEC
// Runs the whole blocks of 16 of p[0, n) (float32 or float64) into 16 lanes that start at
// `identity`, and stores them to `lanes`; returns how many elements it took. (The lanes start in
// registers: loading them after the scalar stores that set them stalled on every row.)
template <VectorLanes K, typename In, typename A>
[[gnu::always_inline]] inline int64_t vector_lanes(const In* p, int64_t n, A identity, A* lanes) {
  using namespace cpu::vec;
  constexpr bool f32 = std::is_same_v<In, float>;
  constexpr int W = f32 ? kWF : kWD;  // lanes per vector
  constexpr int V = kLanes / W;       // vectors per block of 16 lanes
  int64_t i = 0;
  if constexpr (K == VectorLanes::NanSum && std::is_same_v<A, float>) {
    // (16-bit floats' nansum: float32 values widened from them, float32 lanes)
    static_assert(f32);
    VF acc[V];
    for (int v = 0; v < V; ++v) acc[v] = setf(identity);
    for (; i + kLanes <= n; i += kLanes)
      for (int v = 0; v < V; ++v) {
        const VF x = loadf(p + i + v * W);
        acc[v] = acc[v] + where(nan_lanes(x), setf(0.0f), x);
      }
    for (int v = 0; v < V; ++v) storef(lanes + v * W, acc[v]);
  } else if constexpr (K == VectorLanes::NanSum) {
    static_assert(std::is_same_v<A, double>);
    // float32 lanes widen to float64 in halves: kLanes / kWD float64 vectors per block
    VD acc[kLanes / kWD];
    for (int v = 0; v < kLanes / kWD; ++v) acc[v] = setd(identity);
    for (; i + kLanes <= n; i += kLanes)
      for (int v = 0; v < V; ++v) {
        const auto x = load(p + i + v * W);
        if constexpr (f32) {
          const VF y = where(nan_lanes(x), setf(0.0f), x);
          acc[2 * v] = acc[2 * v] + cvt_lo(y);
          acc[2 * v + 1] = acc[2 * v + 1] + cvt_hi(y);
        } else {
          acc[v] = acc[v] + where(nan_lanes(x), setd(0.0), x);
        }
      }
    for (int v = 0; v < kLanes / kWD; ++v) stored(lanes + v * kWD, acc[v]);
  } else {
    static_assert(std::is_same_v<A, In>);
    // (the max of a set is the same in any order, NaN or not: four blocks of lanes at a time,
    // so that the loop is not one chain of selects, folded into the lanes at the end)
    constexpr int U = 4;
    auto step = [](auto acc, auto x) { return K == VectorLanes::Max ? running_max(acc, x) : running_min(acc, x); };
    using Vec = decltype(load(p));
    Vec acc[U][V];
    for (int u = 0; u < U; ++u)
      for (int v = 0; v < V; ++v) acc[u][v] = splat(identity);
    for (; i + U * kLanes <= n; i += U * kLanes)
      for (int u = 0; u < U; ++u)
        for (int v = 0; v < V; ++v) acc[u][v] = step(acc[u][v], load(p + i + u * kLanes + v * W));
    for (; i + kLanes <= n; i += kLanes)
      for (int v = 0; v < V; ++v) acc[0][v] = step(acc[0][v], load(p + i + v * W));
    for (int u = 1; u < U; ++u)
      for (int v = 0; v < V; ++v) acc[0][v] = step(acc[0][v], acc[u][v]);
    for (int v = 0; v < V; ++v) store(lanes + v * W, acc[0][v]);
  }
  return i;
}
#endif

// How an op's combine folds two accumulators, where it is one of these (Op::kFold): the lanes
// of a run then fold by vectors in the same tree as the scalar fold below, with the same
// operand order, so the result is the same bit for bit. (Scalar, the fold went through the
// stack, and max's compare-and-branch on random data mispredicted: amax over rows of 64 ran
// 6.6x slower than PyTorch's.)
enum class Fold { Add, Mul, Max, Min };

template <typename Op, typename A>
[[gnu::always_inline]] inline A fold_lanes(A* lanes, const Op& op) {
#if KILN_HAVE_VEC
  if constexpr ((std::is_same_v<A, float> || std::is_same_v<A, double>) && requires { Op::kFold; }) {
    using namespace cpu::vec;
    constexpr bool f32 = std::is_same_v<A, float>;
    constexpr int W = f32 ? kWF : kWD, N = kLanes / W;
    using Vec = decltype(load(lanes));  // (not conditional_t: it drops the vector attributes)
    auto combine = [](Vec a, Vec x) {
      if constexpr (Op::kFold == Fold::Add) return a + x;
      else if constexpr (Op::kFold == Fold::Mul) return a * x;
      else return Op::kFold == Fold::Max ? running_max(a, x) : running_min(a, x);
    };
    Vec v[N];
    for (int j = 0; j < N; ++j) v[j] = load(lanes + j * W);
    for (int w = kLanes / 2; w >= W; w /= 2)
      for (int j = 0; j < w / W; ++j) v[j] = combine(v[j], v[j + w / W]);
    return fold_halves(v[0], combine);
  }
#endif
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] = op.combine(lanes[j], lanes[j + w]);
  return lanes[0];
}

// One element into an accumulator, in the tails of runs. max's and min's select is written as
// the running_max and running_min of vec.h: gcc makes the plain select a branch there, which
// random data mispredicts (amax over rows of 10: 4x PyTorch's time).
template <typename Op, typename A>
A reduce_one(const Op& op, A a, A x) {
#if KILN_HAVE_VEC
  if constexpr (requires { Op::kFold; }) {
    constexpr bool is_max = Op::kFold == Fold::Max, extremum = is_max || Op::kFold == Fold::Min;
    if constexpr (extremum && std::is_same_v<A, float>) {
      const __m128 av = _mm_set_ss(a), xv = _mm_set_ss(x);
      return _mm_cvtss_f32(_mm_blendv_ps(is_max ? _mm_max_ss(xv, av) : _mm_min_ss(xv, av), xv, _mm_cmpunord_ss(xv, xv)));
    } else if constexpr (extremum && std::is_same_v<A, double>) {
      const __m128d av = _mm_set_sd(a), xv = _mm_set_sd(x);
      return _mm_cvtsd_f64(_mm_blendv_pd(is_max ? _mm_max_sd(xv, av) : _mm_min_sd(xv, av), xv, _mm_cmpunord_sd(xv, xv)));
    }
  }
#endif
  return op.reduce(a, x);
}

// Whether contiguous runs of In go through vector_lanes for Op.
template <typename Op, typename In>
constexpr bool takes_vector_lanes() {
  if constexpr ((std::is_same_v<In, float> || std::is_same_v<In, double>) && requires { Op::kVectorLanes; })
    return Op::kVectorLanes != VectorLanes::NanSum || std::is_same_v<typename Op::acc_t, double> ||
           std::is_same_v<In, float>;
  else return false;
}

// Reduces n <= kPairwiseBlock elements at stride s (elements) into one accumulator: blocks of
// 16 into 16 lanes, the rest into the first, the lanes folded. Inlined into the loops over
// outputs: as a call per output, short rows paid its prologue and reloaded its constants each
// time (amax over float64 rows of 16 took 2.5x PyTorch's time).
template <typename In, typename Op>
[[gnu::always_inline]] inline typename Op::acc_t reduce_block(const In* p, int64_t n, int64_t s, const Op& op) {
  using A = typename Op::acc_t;
  if constexpr (std::is_same_v<In, Half> || (std::is_same_v<In, BFloat16> && requires { Op::kVectorLanes; })) {
    if (s == 1) {
      // float16: the run widened to float32 by F16C (the same values the lanes would convert,
      // a third of the time), then reduced as float32 by the same op. bfloat16 widens by a
      // shift, which a sum's lane loop vectorises as it is; its max, min and nansum go the same
      // way as float16's, to the vector lanes (the select left them scalar: 5.6x PyTorch's time).
      alignas(64) float wide[kPairwiseBlock];
      cpu::widen(p, wide, n);
      return reduce_block(static_cast<const float*>(wide), n, 1, op);
    }
  }
  A lanes[kLanes];
  int64_t i = 0;
#if KILN_HAVE_VEC
  if constexpr (takes_vector_lanes<Op, In>())
    if (s == 1) i = vector_lanes<Op::kVectorLanes>(p, n, op.identity(), lanes);
  if (i == 0)
#endif
    for (int j = 0; j < kLanes; ++j) lanes[j] = op.identity();
  if (s == 1) {
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lanes[j] = op.reduce(lanes[j], A(opmath_t<In>(p[i + j])));
  } else {
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lanes[j] = op.reduce(lanes[j], A(opmath_t<In>(p[(i + j) * s])));
  }
  // (a run shorter than a block leaves lanes other than the first at the identity, which
  // folding would not change)
  if (i == 0) {
    A acc = lanes[0];
    for (; i < n; ++i) acc = reduce_one(op, acc, A(opmath_t<In>(p[i * s])));
    return acc;
  }
  for (; i < n; ++i) lanes[0] = reduce_one(op, lanes[0], A(opmath_t<In>(p[i * s])));
  return fold_lanes(lanes, op);
}

// Reduces n elements at stride s: blocks of kPairwiseBlock by reduce_block, combined pairwise.
template <typename In, typename Op>
typename Op::acc_t reduce_run(const In* p, int64_t n, int64_t s, const Op& op) {
  if (n > kPairwiseBlock) {
    int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    return op.combine(reduce_run(p, half, s, op), reduce_run(p + half * s, n - half, s, op));
  }
  return reduce_block(p, n, s, op);
}

template <typename In, typename Out, typename Op>
void reduce_kernel(const Tensor& x, const std::vector<bool>& mask, const Tensor& out, const Op& op) {
  using A = typename Op::acc_t;
  ReducePlan plan = plan_reduce(x, mask, out);
  const In* in = static_cast<const In*>(x.data_ptr());
  Out* o = static_cast<Out*>(out.data_ptr());
  const int64_t count = plan.reduce_numel;
  if (plan.out_numel == 0) return;

  // Walks the reduced dims other than `skip` innermost ones, calling f(input offset).
  auto for_reduced = [&](size_t skip, auto&& f) {
    const auto& R = plan.reduced;
    if (skip >= R.size()) return f(int64_t(0));  // (one run per output: no index to allocate)
    std::vector<int64_t> idx(R.size(), 0);
    int64_t off = 0;
    while (true) {
      f(off);
      size_t d = skip;
      for (; d < R.size(); ++d) {
        off += R[d].in_stride;
        if (++idx[d] < R[d].size) break;
        off -= R[d].in_stride * R[d].size;
        idx[d] = 0;
      }
      if (d >= R.size()) return;
    }
  };
  // Offsets of output element `lin` (kept dims, innermost first, starting at `first`).
  auto kept_offsets = [&](int64_t lin, size_t first, int64_t& in_off, int64_t& out_off) {
    in_off = out_off = 0;
    for (size_t d = first; d < plan.kept.size(); ++d) {
      int64_t i = lin % plan.kept[d].size;
      lin /= plan.kept[d].size;
      in_off += i * plan.kept[d].in_stride;
      out_off += i * plan.kept[d].out_stride;
    }
  };

  if (count == 0) {
    for (int64_t i = 0; i < plan.out_numel; ++i) o[i] = Out(op.project(op.identity(), 0));
    return;
  }
  if (plan.out_numel == 1 && plan.reduced.size() == 1 && count >= 4 * cpu::parallel_grain() &&
      cpu::num_threads() > 1) {
    // One long run (e.g. t.sum()): each thread reduces a slice, then the slices combine in
    // order, so the result does not depend on timing.
    const auto& r0 = plan.reduced[0];
    int nt = cpu::num_threads();
    // (nt slices of whole vectors that together cover the run: rounding count / nt down
    // first would drop the last count % nt elements whenever the quotient is whole vectors)
    int64_t chunk = ((count + nt - 1) / nt + kLanes - 1) / kLanes * kLanes;
    std::vector<A> parts(size_t(nt), op.identity());
    cpu::parallel_for(nt, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t lo = t * chunk, hi = std::min(count, lo + chunk);
        if (lo < hi) parts[size_t(t)] = reduce_run(in + lo * r0.in_stride, hi - lo, r0.in_stride, op);
      }
    });
    A acc = parts[0];
    for (int t = 1; t < nt; ++t) acc = op.combine(acc, parts[size_t(t)]);
    o[0] = Out(op.project(acc, count));
    return;
  }
  if (plan.inner_reduced || plan.kept.empty()) {
    // One accumulator per output element; the innermost reduced dim is the vector loop.
    const auto& r0 = plan.reduced[0];
    cpu::parallel_for(plan.out_numel, std::max<int64_t>(1, cpu::parallel_grain() / count), [&](int64_t b, int64_t e) {
      // (the offsets of consecutive outputs by increments: a division per output cost as much
      // as reducing a short row)
      const auto& K = plan.kept;
      std::vector<int64_t> idx(K.size());
      int64_t ib, ob;
      kept_offsets(b, 0, ib, ob);
      for (size_t d = 0, rest = size_t(b); d < K.size(); ++d) {
        idx[d] = int64_t(rest) % K[d].size;
        rest = size_t(int64_t(rest) / K[d].size);
      }
      for (int64_t lin = b; lin < e; ++lin) {
        if (lin > b)
          for (size_t d = 0; d < K.size(); ++d) {
            ib += K[d].in_stride;
            ob += K[d].out_stride;
            if (++idx[d] < K[d].size) break;
            ib -= K[d].in_stride * K[d].size;
            ob -= K[d].out_stride * K[d].size;
            idx[d] = 0;
          }
        if (plan.reduced.size() == 1 && r0.size <= kPairwiseBlock) {
          // (one short run per output, the common case: reduce_block inline in this loop)
          o[ob] = Out(op.project(reduce_block(in + ib, r0.size, r0.in_stride, op), count));
          continue;
        }
        A acc = op.identity();
        bool first = true;
        for_reduced(1, [&](int64_t roff) {
          A part = reduce_run(in + ib + roff, r0.size, r0.in_stride, op);
          acc = first ? part : op.combine(acc, part);
          first = false;
        });
        o[ob] = Out(op.project(acc, count));
      }
    });
    return;
  }
  // The innermost dim is kept (x.sum(0) of a row-major matrix): a block of up to kBlock
  // neighbouring outputs accumulates at once, reading each input row contiguously, four rows
  // per pass over the accumulators (the same operations in the same order as one row a pass,
  // with a quarter of the accumulators' loads and stores; 16-bit rows widened by blocks first).
  // Where there are few blocks (x.sum(0) of [65536, 16] is one), the innermost reduced dim is
  // cut into slices of kSliceRows that run in parallel into accumulators of their own, combined
  // in slice order after: the slices follow from the shape alone, so the result does not depend
  // on the number of threads. (One thread, a load and store of each accumulator per row: x.sum(0)
  // of [65536, 16] took 3x PyTorch's time.)
  const auto& k0 = plan.kept[0];
  const auto& r0 = plan.reduced[0];
  constexpr int64_t kBlock = 256, kSliceRows = 1024;
  const int64_t rows = plan.out_numel / k0.size;
  const int64_t blocks_per_row = (k0.size + kBlock - 1) / kBlock, blocks = rows * blocks_per_row;
  const int64_t slices =
      blocks < 8 && plan.reduced.size() == 1 && r0.size >= 2 * kSliceRows ? (r0.size + kSliceRows - 1) / kSliceRows : 1;
  const int64_t slice_rows = slices == 1 ? r0.size : kSliceRows;
  // The slices' accumulators, pitch apart: a block's width, not kBlock (x.sum(0) of [262144, 8]
  // allocated 512 KiB per call for 16 KiB of accumulators, fresh pages every call).
  // (not std::vector: A is bool for any and all)
  const int64_t pitch = std::min(kBlock, k0.size);
  std::unique_ptr<A[]> parts(slices > 1 ? new A[size_t(blocks * slices * pitch)] : nullptr);
  // Four rows from q (row stride rs) into acc[0, nb), one after another. (nb: an int64_t, or an
  // integral_constant for the narrow blocks fold_slices names.)
  auto four_rows = [&](A* acc, const In* q, int64_t rs, auto nb) {
    auto four = [&](const auto* q0, const auto* q1, const auto* q2, const auto* q3) {
      using V = std::remove_cv_t<std::remove_pointer_t<decltype(q0)>>;
      auto a = [](V v) { return A(opmath_t<V>(v)); };
      for (int64_t j = 0; j < nb; ++j)
        acc[j] = op.reduce(op.reduce(op.reduce(op.reduce(acc[j], a(q0[j])), a(q1[j])), a(q2[j])), a(q3[j]));
    };
    if constexpr (std::is_same_v<In, Half>) {
      // (bfloat16 widens by a shift, which the loop vectorises as it is; four rows that
      // follow one another widen in one call)
      alignas(64) float wide[4 * 256];  // (4 kBlock: a name here crashed GCC 12)
      if (rs == nb) cpu::widen(q, wide, 4 * nb);
      else
        for (int u = 0; u < 4; ++u) cpu::widen(q + u * rs, wide + u * nb, nb);
      four(wide, wide + nb, wide + 2 * nb, wide + 3 * nb);
    } else {
      four(q, q + rs, q + 2 * rs, q + 3 * rs);
    }
  };
  // Rows [lo, hi) of r0, at every offset of the other reduced dims, into acc[0, nb).
  auto fold_rows = [&](A* acc, int64_t ib, int64_t nb, int64_t lo, int64_t hi) {
    const int64_t rs = r0.in_stride;
    for_reduced(1, [&](int64_t roff) {
      const In* p = in + ib + roff;
      int64_t r = lo;
      if (k0.in_stride == 1)
        for (; r + 4 <= hi; r += 4) four_rows(acc, p + r * rs, rs, nb);
      for (; r < hi; ++r) {
        const In* q = p + r * rs;
        for (int64_t j = 0; j < nb; ++j) acc[j] = op.reduce(acc[j], A(opmath_t<In>(q[j * k0.in_stride])));
      }
    });
  };
  // Slices [s0, s0 + ns) of a block, each whole, into their accumulators in parts (pitch
  // apart). With contiguous rows the slices take turns four rows at a time: each still adds
  // its own rows in order, and their chains of additions overlap. One slice at a time, every
  // row waited on the previous one's addition: x.sum(0) of [262144, 8] took 2.5x PyTorch's time.
  // A block of 3, 4 or 8 outputs runs with its width a constant: the compiler's loop over a
  // block of a run-time width had no vector iteration under 16 (float32), and ran it scalar.
  auto fold_slices = [&](A* acc, int64_t ib, int64_t nb, int64_t s0, int64_t ns) {
    if (k0.in_stride != 1 || ns == 1) {
      for (int64_t s = 0; s < ns; ++s) fold_rows(acc + s * pitch, ib, nb, (s0 + s) * kSliceRows, (s0 + s + 1) * kSliceRows);
      return;
    }
    const int64_t rs = r0.in_stride;
    const In* p = in + ib + s0 * kSliceRows * rs;
    auto run = [&](auto width) {
      for (int64_t r = 0; r < kSliceRows; r += 4)
        for (int64_t s = 0; s < ns; ++s) four_rows(acc + s * pitch, p + (s * kSliceRows + r) * rs, rs, width);
    };
    if constexpr (std::is_arithmetic_v<A>) {
      switch (nb) {
        case 3: return run(std::integral_constant<int64_t, 3>{});
        case 4: return run(std::integral_constant<int64_t, 4>{});
        case 8: return run(std::integral_constant<int64_t, 8>{});
        default: break;
      }
    }
    run(nb);
  };
  // The tasks: per block, its whole slices in groups (of kSliceGroup where the block is 16
  // outputs or fewer: wider blocks have independent additions enough in a row of their own, and
  // float16 rows, widened four at a time through a call, ran up to 2x slower in groups),
  // then its last slice when that is shorter; or per block all its rows when there are no slices.
  constexpr int64_t kSliceGroup = 4;
  const int64_t group = k0.size <= 16 && !std::is_same_v<In, Half> ? kSliceGroup : 1;
  const int64_t whole = slices > 1 ? r0.size / kSliceRows : 0;
  const int64_t groups = slices > 1 ? (whole + group - 1) / group + (slices > whole) : 1;
  cpu::parallel_for(blocks * groups, std::max<int64_t>(1, cpu::parallel_grain() / (group * slice_rows * kBlock)),
                    [&](int64_t b, int64_t e) {
    A local[kBlock];
    for (int64_t t = b; t < e; ++t) {
      const int64_t block = t / groups, g = t % groups;
      const int64_t row = block / blocks_per_row, j0 = (block % blocks_per_row) * kBlock;
      const int64_t nb = std::min(kBlock, k0.size - j0);
      int64_t ib, ob;
      kept_offsets(row, 1, ib, ob);
      ib += j0 * k0.in_stride;
      if (slices == 1) {
        for (int64_t j = 0; j < nb; ++j) local[j] = op.identity();
        fold_rows(local, ib, nb, 0, r0.size);
        for (int64_t j = 0; j < nb; ++j) o[ob + (j0 + j) * k0.out_stride] = Out(op.project(local[j], count));
        continue;
      }
      const int64_t s0 = std::min(g * group, whole), ns = s0 < whole ? std::min(group, whole - s0) : 1;
      A* acc = parts.get() + (block * slices + s0) * pitch;
      for (int64_t j = 0; j < ns * pitch; ++j) acc[j] = op.identity();
      if (s0 < whole) fold_slices(acc, ib, nb, s0, ns);
      else fold_rows(acc, ib, nb, s0 * kSliceRows, r0.size);  // (the last slice, shorter)
    }
  });
  for (int64_t block = 0; slices > 1 && block < blocks; ++block) {
    const int64_t row = block / blocks_per_row, j0 = (block % blocks_per_row) * kBlock;
    const int64_t nb = std::min(kBlock, k0.size - j0);
    int64_t ib, ob;
    kept_offsets(row, 1, ib, ob);
    const A* part = parts.get() + block * slices * pitch;
    for (int64_t j = 0; j < nb; ++j) {
      A acc = part[j];
      for (int64_t sl = 1; sl < slices; ++sl) acc = op.combine(acc, part[sl * pitch + j]);
      o[ob + (j0 + j) * k0.out_stride] = Out(op.project(acc, count));
    }
  }
}

}  // namespace kiln::detail
