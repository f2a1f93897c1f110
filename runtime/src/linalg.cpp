// Matrix products: mm, bmm, matmul (every rank case PyTorch has), addmm. On the CPU float32
// goes through oneDNN's sgemm where kiln was built with it (KILN_CPU_BLAS, below) or OpenBLAS,
// float64 through OpenBLAS, 16-bit floats through the float32 product, integers through a
// blocked loop. On a GPU the floating types go through cuBLAS (one strided-batched call per
// product); integers run on the host's loop.
//
// The public ops check their operands and hand GPU tensors to the device handler (trace_ops.h);
// the products themselves (the *_impl functions) work on either device, and the CUDA backend
// calls them for the opaque kernels of its programs (device_ops::run_library).
#include <cblas.h>
#include <omp.h>
#ifdef KILN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <mutex>
#include <optional>

#include "cuda/blas.h"
#include "kiln/runtime/env.h"
#include "kiln/runtime/parallel.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

// A matrix view BLAS can read directly (the last two dims of a matrix or a batch of them):
// row-major with a leading dim, or its transpose.
struct BlasMat {
  Tensor t;  // possibly a contiguous copy
  bool trans = false;
  int64_t ld = 1;
  int64_t batch_stride() const { return t.dim() == 3 ? t.strides()[0] : 0; }
};
BlasMat blas_view(const Tensor& m) {
  const int64_t d = m.dim();
  int64_t r = m.sizes()[d - 2], c = m.sizes()[d - 1];
  int64_t s0 = m.strides()[d - 2], s1 = m.strides()[d - 1];
  if ((s1 == 1 || c == 1) && s0 >= std::max<int64_t>(1, c)) return {m, false, s0};
  if ((s0 == 1 || r == 1) && s1 >= std::max<int64_t>(1, r)) return {m, true, s1};
  Tensor cm = m.contiguous();
  return {cm, false, std::max<int64_t>(1, c)};
}

void gemm_on_host(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta);

// A product on a GPU: row-major out[n, m] is column-major out^T, and out^T = b^T a^T, so cuBLAS
// multiplies b's matrices by a's, each read in place where its layout allows.
void gemm_on_device(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) {
  if (!is_floating(a.dtype())) {  // integers (and bool's error): the host's loop on copies
    Tensor o = beta == 0 ? empty(out.sizes(), out.dtype()) : out.to(Device::cpu());
    gemm_on_host(a.to(Device::cpu()), b.to(Device::cpu()), o, alpha, beta);
    out.copy_(o);
    return;
  }
  const int64_t d = out.dim();
  BlasMat A = blas_view(a), B = blas_view(b);
  cuda::detail::Gemm g;
  g.dtype = a.dtype();
  g.m = out.sizes()[d - 1];
  g.n = out.sizes()[d - 2];
  g.k = a.sizes()[d - 1];
  g.trans_a = B.trans, g.a = first_element(B.t), g.lda = B.ld, g.stride_a = B.batch_stride();
  g.trans_b = A.trans, g.b = first_element(A.t), g.ldb = A.ld, g.stride_b = A.batch_stride();
  g.c = first_element(out), g.ldc = g.m, g.stride_c = g.m * g.n;
  g.batch = d == 3 ? out.sizes()[0] : 1;
  g.alpha = alpha, g.beta = beta;
  cuda::detail::gemm(g, out.device().index);
}

// out[n, m] = alpha * a[n, k] @ b[k, m] + beta * out, or the same per matrix of 3-d batches
// (a and b may repeat one matrix with batch stride 0); out is contiguous, on a's device.
void gemm_into(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) {
  if (out.numel() == 0) return;
  if (a.sizes()[a.dim() - 1] == 0) {
    if (beta == 0) out.zero_();
    else out.mul_(beta);
    return;
  }
  if (!out.device().is_cpu()) return gemm_on_device(a, b, out, alpha, beta);
  gemm_on_host(a, b, out, alpha, beta);
}

// Which threads the loaded OpenBLAS uses (openblas_get_parallel: 0 none, 1 its own pthreads,
// 2 OpenMP). Its OpenMP build runs on kiln's own OpenMP team: a large product is then one BLAS
// call that threads itself (one packing of the shared operand instead of one per thread), and a
// call made inside kiln's parallel region runs on its caller. Its pthread build keeps a pool of
// its own whose workers spin after each call on the cores kiln's threads run on: a compiled
// epilogue right after a product threaded that way ran 9.6 ms against 6.5 split
// (docs/perf-journal.md, "OpenBLAS on kiln's team"), so with it kiln splits every product itself.
bool blas_on_openmp() {
  static const bool v = openblas_get_parallel() == 2;
  return v;
}

// Whether products can leave the threading to OpenBLAS: its OpenMP build threads a call over
// the caller's omp_get_max_threads() threads, so when that is kiln's thread count (the default,
// or KILN_NUM_THREADS equal to it) nothing is set: a call inside kiln's parallel region runs on
// its caller, one outside it on kiln's team. Otherwise (or with the pthread build) kiln splits
// every product itself and sets OpenBLAS to one thread while it runs (BlasOnCallers), never a
// per-call count: that setting is OpenBLAS's global, and products run on several threads at once.
bool blas_on_kiln_team(int64_t threads) { return blas_on_openmp() && threads == omp_get_max_threads(); }

// OpenBLAS's pthread build: its own worker threads would spin on the cores kiln's threads run on
// (two pools on two cores halve each other), so kiln splits its products across its own threads
// and has each BLAS call run on its caller. The setting is the process's: it is switched to one
// thread while any kiln product runs and restored after the last, so other BLAS users keep
// theirs. (The OpenMP build's setter also sets the calling thread's OpenMP thread count: each
// caller puts its own back.)
class BlasOnCallers {
 public:
  BlasOnCallers() : omp_threads_(omp_get_max_threads()) {
    std::lock_guard<std::mutex> lock(mu());
    if (depth()++ == 0) {
      saved() = openblas_get_num_threads();
      if (saved() != 1) openblas_set_num_threads(1);
    }
  }
  ~BlasOnCallers() {
    {
      std::lock_guard<std::mutex> lock(mu());
      if (--depth() == 0 && saved() != 1) openblas_set_num_threads(saved());
    }
    if (omp_get_max_threads() != omp_threads_) omp_set_num_threads(omp_threads_);
  }
  BlasOnCallers(const BlasOnCallers&) = delete;
  BlasOnCallers& operator=(const BlasOnCallers&) = delete;

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static int& depth() {
    static int d = 0;
    return d;
  }
  static int& saved() {
    static int s = 1;
    return s;
  }
  int omp_threads_;
};

// Below this many multiply-adds a product runs on one thread (waking the others costs more);
// OpenBLAS's OpenMP build keeps products this small on their caller by itself on kiln's team
// (its threshold is the same).
constexpr int64_t kGemmParallelWork = int64_t(1) << 18;
// The same for a product on oneDNN, which would thread a call on kiln's team by its own rules (even
// 64^3): below it the call is held to one thread. kiln-eager-bench on a Zen 5 host
// (docs/perf-journal.md, "Float32 products through oneDNN"), 2 threads, OpenMP's default wait
// policy: 64^3 threaded 4 us against 3 on one thread; 128^3 (2^21) 11 against 18 us. Waking
// sleeping threads costs about 45 us there (OMP_WAIT_POLICY=PASSIVE), which moves the break-even to
// about 256^3: there the threshold is kPassiveProductFactor times higher (256^3 threaded 0.128 ms
// against about 0.14 on one thread, 128^3 0.061 against 0.018).
constexpr int64_t kOneDnnParallelWork = int64_t(1) << 20;
constexpr int64_t kPassiveProductFactor = 16;
// With OpenBLAS's OpenMP build, a product of at least this many columns runs as one call that
// OpenBLAS threads; narrower ones split by rows (or columns) across kiln's threads, one call each.
// relu(x @ W + b) compiled, an interleaved A/B (docs/perf-journal.md, "OpenBLAS on kiln's team"),
// threaded against split: [1024]^3 6.37 / 6.65 ms, [64,1024]x[1024,1024] 0.56 / 0.71,
// [1024,4096]x[4096,1024] 24.9 / 26.7, [512,512]x[512,2048] 3.31 / 3.41; but [512]^3 0.92 / 0.87,
// [1024,1024]x[1024,64] 0.64 / 0.52, [8192,512]x[512,512] 14.8 / 14.5.
constexpr int64_t kBlasThreadedMinCols = 1024;

// Float32 products of at least this many multiply-adds go to oneDNN under KILN_CPU_BLAS=auto.
// oneDNN's sgemm JIT-compiles its kernels for the CPU's own vector width (AVX-512 where it has it),
// while OpenBLAS may run narrower ones: the environment can pin its core type (an old OpenBLAS's
// kernels for a newer core can be wrong), and a build older than the core does not know it. On a
// Zen 5 host with OpenBLAS 0.3.21 on Haswell kernels, 2 threads, kiln-eager-bench's mm(a, b.t())
// under KILN_CPU_BLAS=onednn against openblas: [1024, 1024] 4.8 ms against 8.8, [256, 256] 0.13
// against 0.20, but [16, 16] 0.77 us against 0.57 (docs/perf-journal.md, "Float32 products through
// oneDNN"): below the threshold a call's own cost decides. oneDNN's first product in a process also
// generates its kernels, about 24 ms once.
constexpr int64_t kOneDnnMinWork = int64_t(1) << 15;

#ifdef KILN_HAVE_ONEDNN
constexpr bool kHaveOneDnn = true;
#else
constexpr bool kHaveOneDnn = false;
#endif

// Whether float32 products of `work` multiply-adds (per call) run on oneDNN under `setting`.
bool sgemm_on_onednn(env::CpuBlas setting, int64_t work) {
  switch (setting) {
    case env::CpuBlas::OpenBlas: return false;
    case env::CpuBlas::OneDnn:
      KILN_CHECK(kHaveOneDnn, "matmul", "KILN_CPU_BLAS=onednn: this kiln was built without oneDNN (KILN_WITH_ONEDNN)");
      return true;
    case env::CpuBlas::Auto: break;
  }
  return kHaveOneDnn && work >= kOneDnnMinWork;
}

// A oneDNN call on its caller's thread alone: oneDNN threads a call over the caller's OpenMP
// thread count (and none inside a parallel region), so outside one that count is set to 1 for
// the call and put back after (it is the calling thread's own setting). (OpenBLAS's OpenMP build
// reads it too, but keeps a global of its own that follows it: OpenBLAS is left to its rules
// and to BlasOnCallers.)
class OneThread {
 public:
  explicit OneThread(bool on) : was_(omp_get_max_threads()), on_(on && was_ != 1 && !omp_in_parallel()) {
    // (a product inside a part of kiln's pool, runtime/parallel.h, is on a thread of its own
    // outside any OpenMP region: its count is set to 1 here as well)
    if (on_) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (on_) omp_set_num_threads(was_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int was_;
  bool on_;
};

// Rows [i0, i1) and columns [j0, j1) of product `batch_index` of a float32/float64 batch (out
// points at that product), through one BLAS call (`onednn`: float32 on oneDNN, on the caller's
// thread alone where `one_thread`).
template <typename T>
void blas_block(const BlasMat& A, const BlasMat& B, T* out, int64_t m, int64_t k, int64_t batch_index,
                int64_t i0, int64_t i1, int64_t j0, int64_t j1, T alpha, T beta, bool onednn, bool one_thread) {
  // Row i of op(A) starts at i * ld (row-major) or at column i (transposed); likewise column j of op(B).
  const T* a = A.t.data_ptr<T>() + batch_index * A.batch_stride() + (A.trans ? i0 : i0 * A.ld);
  const T* b = B.t.data_ptr<T>() + batch_index * B.batch_stride() + (B.trans ? j0 * B.ld : j0);
  T* o = out + i0 * m + j0;
  auto ta = A.trans ? CblasTrans : CblasNoTrans, tb = B.trans ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
#ifdef KILN_HAVE_ONEDNN
    if (onednn) {
      OneThread narrow(one_thread);
      dnnl_status_t st = dnnl_sgemm(A.trans ? 'T' : 'N', B.trans ? 'T' : 'N', i1 - i0, j1 - j0, k, alpha, a, A.ld, b,
                                    B.ld, beta, o, m);
      KILN_CHECK(st == dnnl_success, "matmul", "oneDNN's sgemm of [", i1 - i0, ", ", k, "] x [", k, ", ", j1 - j0,
                 "] (product ", batch_index, ", a ", A.trans ? "transposed" : "row-major", " with leading dim ", A.ld,
                 ", b ", B.trans ? "transposed" : "row-major", " with leading dim ", B.ld, ", out's ", m,
                 ") failed with status ", int(st));
      return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta, tb, int(i1 - i0), int(j1 - j0), int(k), alpha, a, int(A.ld), b, int(B.ld), beta,
                o, int(m));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, int(i1 - i0), int(j1 - j0), int(k), alpha, a, int(A.ld), b, int(B.ld), beta,
                o, int(m));
  }
  (void)onednn, (void)one_thread;
}

// Every matrix of the batch: split across kiln's threads by whole matrices when there are enough
// of them, otherwise each matrix by slabs of rows (or of columns, when it is wide and short).
template <typename T>
void blas_products(const Tensor& a, const Tensor& b, Tensor& out, T alpha, T beta) {
  const int64_t d = out.dim();
  const int64_t batch = d == 3 ? out.sizes()[0] : 1, n = out.sizes()[d - 2], m = out.sizes()[d - 1];
  const int64_t k = a.sizes()[a.dim() - 1];
  BlasMat A = blas_view(a), B = blas_view(b);
  T* o = out.data_ptr<T>();
  const int64_t threads = cpu::num_threads();
  // (oneDNN threads itself over kiln's OpenMP team as OpenBLAS's OpenMP build does: its calls
  // follow the same split; the decision is per product, by one matrix's work)
  const env::CpuBlas setting = env::cpu_blas();  // (read for every product: a bad value is reported)
  const bool onednn = std::is_same_v<T, float> && sgemm_on_onednn(setting, n * m * k);
  const bool team = blas_on_kiln_team(threads) || (onednn && threads == omp_get_max_threads());
  std::optional<BlasOnCallers> on_callers;
  if (!team) on_callers.emplace();
  // (a call on kiln's team threads itself; elsewhere kiln splits the work, or it is too small)
  auto block = [&](int64_t i, int64_t i0, int64_t i1, int64_t j0, int64_t j1, bool threaded = false) {
    blas_block<T>(A, B, o + i * n * m, m, k, i, i0, i1, j0, j1, alpha, beta, onednn, !(team && threaded));
  };
  const int64_t parallel_work =
      onednn ? kOneDnnParallelWork * (env::omp_passive_wait() ? kPassiveProductFactor : 1) : kGemmParallelWork;
  if (batch * n * m * k < parallel_work || threads <= 1) {
    for (int64_t i = 0; i < batch; ++i) block(i, 0, n, 0, m);
    return;
  }
  if (batch >= 2 * threads || batch % threads == 0) {
    cpu::parallel_for(batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) block(i, 0, n, 0, m);
    });
    return;
  }
  if (team && m >= kBlasThreadedMinCols && !omp_in_parallel() && !parallel::in_job()) {
    for (int64_t i = 0; i < batch; ++i) block(i, 0, n, 0, m, true);
    return;
  }
  const bool by_rows = n >= m || n >= 16 * threads;
  const int64_t extent = by_rows ? n : m;
  for (int64_t i = 0; i < batch; ++i)
    cpu::parallel_for(extent, 8, [&](int64_t s0, int64_t s1) {
      if (by_rows) block(i, s0, s1, 0, m);
      else block(i, 0, n, s0, s1);
    });
}

void gemm_on_host(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) {
  if (out.sizes()[out.dim() - 2] == 0 || out.sizes()[out.dim() - 1] == 0) return;
  DType dt = a.dtype();
  if (dt == kFloat32) return blas_products<float>(a, b, out, float(alpha), float(beta));
  if (dt == kFloat64) return blas_products<double>(a, b, out, alpha, beta);
  if (a.dim() == 3) {
    for (int64_t i = 0; i < out.sizes()[0]; ++i) {
      Tensor o = out.select(0, i);
      gemm_on_host(a.select(0, i), b.select(0, i), o, alpha, beta);
    }
    return;
  }
  int64_t n = a.sizes()[0], k = a.sizes()[1], m = b.sizes()[1];
  if (dt == kFloat16 || dt == kBFloat16) {
    Tensor o32 = beta == 0 ? empty(out.sizes(), kFloat32) : out.to(kFloat32);
    gemm_on_host(a.to(kFloat32), b.to(kFloat32), o32, alpha, beta);
    out.copy_(o32);
    return;
  }
  KILN_CHECK(dt != kBool, "mm", "\"addmm_impl_cpu_\" not implemented for 'bool'");
  // integers: i-k-j order so the inner loop runs along contiguous rows of b and out
  Tensor ac = a.contiguous(), bc = b.contiguous();
  KILN_DISPATCH_INTEGRAL(dt, "mm", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* A = ac.data_ptr<T>();
      const T* B = bc.data_ptr<T>();
      T* O = out.data_ptr<T>();
      T al = T(int64_t(alpha)), be = T(int64_t(beta));
      cpu::parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, k * m)), [&](int64_t r0, int64_t r1) {
        std::vector<T> row(static_cast<size_t>(m));
        for (int64_t i = r0; i < r1; ++i) {
          std::fill(row.begin(), row.end(), T(0));
          for (int64_t p = 0; p < k; ++p) {
            T av = A[i * k + p];
            const T* br = B + p * m;
            for (int64_t j = 0; j < m; ++j) row[j] = T(row[j] + av * br[j]);
          }
          for (int64_t j = 0; j < m; ++j) O[i * m + j] = T(al * row[j] + (beta == 0 ? T(0) : T(be * O[i * m + j])));
        }
      });
    }
  });
}

}  // namespace

std::string blas_library() {
  const int p = openblas_get_parallel();
  std::string s = std::string(openblas_get_config()) +
                  (p == 2 ? " (OpenMP build)" : p == 1 ? " (pthread build)" : " (sequential build)");
#ifdef KILN_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  const char* isa = "";
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core: isa = ", AVX-512"; break;
    case dnnl_cpu_isa_avx512_core_vnni: isa = ", AVX-512 VNNI"; break;
    case dnnl_cpu_isa_avx512_core_bf16: isa = ", AVX-512 BF16"; break;
    case dnnl_cpu_isa_avx512_core_amx: isa = ", AVX-512 AMX"; break;
    case dnnl_cpu_isa_avx2: isa = ", AVX2"; break;
    case dnnl_cpu_isa_avx2_vnni: isa = ", AVX2 VNNI"; break;
    default: break;
  }
  s += "; float32 products of at least 2^15 multiply-adds: oneDNN " + std::to_string(v->major) + "." +
       std::to_string(v->minor) + "." + std::to_string(v->patch) + isa;
  const env::CpuBlas c = env::cpu_blas();
  if (c != env::CpuBlas::Auto) s += c == env::CpuBlas::OneDnn ? " (KILN_CPU_BLAS=onednn: all of them)" : " (KILN_CPU_BLAS=openblas: none)";
#endif
  return s;
}

namespace {


// The tensor a product is written to: `into` seen with the product's shape where the caller
// gave one (run_library_into: contiguous, of the result's dtype and element count, sharing no
// byte with an operand), else a new one.
Tensor product(std::vector<int64_t> shape, const Tensor& like, const Tensor* into) {
  if (into) return into->view(shape);
  return empty(shape, TensorOptions(like.dtype()).device(like.device()));
}

Tensor mm_impl(const Tensor& a, const Tensor& b, const Tensor* into = nullptr) {
  rules::check_mm(a.sizes(), b.sizes(), a.dtype(), b.dtype(), shape::fail_as("mm"));
  Tensor out = product({a.sizes()[0], b.sizes()[1]}, a, into);
  gemm_into(a, b, out, 1.0, 0.0);
  return out;
}

Tensor addmm_impl(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha,
                  const Tensor* into = nullptr) {
  std::vector<int64_t> shape = rules::addmm_shape(self.sizes(), a.sizes(), b.sizes(), self.dtype(), a.dtype(),
                                                  b.dtype(), shape::fail_as("addmm"));
  Tensor out = product(shape, a, into);
  double be = beta.to_double();
  if (be != 0) out.copy_(self);
  gemm_into(a, b, out, alpha.to_double(), be);
  return out;
}

Tensor bmm_impl(const Tensor& a, const Tensor& b, const Tensor* into = nullptr) {
  Tensor out = product(rules::bmm_shape(a.sizes(), b.sizes(), a.dtype(), b.dtype(), shape::fail_as("bmm")), a, into);
  gemm_into(a, b, out, 1.0, 0.0);
  return out;
}

Tensor matmul_impl(const Tensor& a, const Tensor& b, const Tensor* into = nullptr) {
  // (every shape and dtype error first, as inference gives it; then the product's route)
  rules::matmul_shape(a.sizes(), b.sizes(), a.dtype(), b.dtype(), shape::fail_as("matmul"));
  int64_t da = a.dim(), db = b.dim();
  if (da == 1 && db == 1) return mm_impl(a.unsqueeze(0), b.unsqueeze(1), into).view({});
  if (da == 2 && db == 1) return mm_impl(a, b.unsqueeze(1), into).squeeze(-1);
  if (da == 1 && db == 2) return mm_impl(a.unsqueeze(0), b, into).squeeze(0);
  if (da == 2 && db == 2) return mm_impl(a, b, into);
  // Batched: a 1-d operand becomes a matrix and its extra dim is dropped from the result.
  Tensor A = da == 1 ? a.unsqueeze(0) : a;
  Tensor B = db == 1 ? b.unsqueeze(-1) : b;
  int64_t n = A.sizes()[A.dim() - 2], k = A.sizes()[A.dim() - 1];
  int64_t m = B.sizes()[B.dim() - 1];
  std::vector<int64_t> out_shape;
  if (db <= 2 && da >= 3) {
    // [..., n, k] @ [k, m]: fold the batch into the rows, one GEMM.
    Tensor r = mm_impl(A.reshape({-1, k}), B, into);
    out_shape.assign(A.sizes().begin(), A.sizes().end() - 1);
    out_shape.push_back(m);
    r = r.view(out_shape);
    return db == 1 ? r.squeeze(-1) : r;
  }
  std::vector<int64_t> ba(A.sizes().begin(), A.sizes().end() - 2), bb(B.sizes().begin(), B.sizes().end() - 2);
  std::vector<int64_t> batch = broadcast_shapes(ba, bb, "matmul");
  int64_t nbatch = shape::numel(batch, "matmul");
  std::vector<int64_t> ea = batch, eb = batch;
  ea.insert(ea.end(), {n, k});
  eb.insert(eb.end(), {k, m});
  // (a batch broadcast along one dim stays a view with batch stride 0; BLAS reads it in place)
  Tensor r = bmm_impl(A.expand(ea).reshape({nbatch, n, k}), B.expand(eb).reshape({nbatch, k, m}), into);
  out_shape = batch;
  out_shape.insert(out_shape.end(), {n, m});
  r = r.view(out_shape);
  if (da == 1) r = r.squeeze(-2);
  if (db == 1) r = r.squeeze(-1);
  return r;
}

// The bytes a view can reach: [first, last] addresses on its storage.
std::pair<const char*, const char*> extent(const Tensor& t) {
  const char* p = first_element(t);
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t span = (t.sizes()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  return {p + lo * int64_t(t.element_size()), p + (hi + 1) * int64_t(t.element_size()) - 1};
}

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (!a.is_alias_of(b) || a.numel() == 0 || b.numel() == 0) return false;
  auto [a0, a1] = extent(a);
  auto [b0, b1] = extent(b);
  return a0 <= b1 && b0 <= a1;
}

}  // namespace

Tensor detail::bmm_into(const Tensor& a, const Tensor& b, const Tensor& into) { return bmm_impl(a, b, &into); }

Tensor mm(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Mm, (a, b), (), mm(a, b))
  check_cpu("mm", {a, b});
  return mm_impl(a, b);
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  KILN_TRACE(Addmm, (self, a, b), ({"alpha", scalar_attr(alpha)}, {"beta", scalar_attr(beta)}), addmm(self, a, b, beta, alpha))
  check_cpu("addmm", {self, a, b});
  return addmm_impl(self, a, b, beta, alpha);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Bmm, (a, b), (), bmm(a, b))
  check_cpu("bmm", {a, b});
  return bmm_impl(a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Matmul, (a, b), (), matmul(a, b))
  check_cpu("matmul", {a, b});
  return matmul_impl(a, b);
}

namespace device_ops {

bool has_library(OpId op) {
  // the products and einsum: the ops that take an epilogue (ops.def's kTakesEpilogue)
  using namespace op_traits;
  static constexpr uint32_t kTraits[] = {
#define KILN_OP(id, name, category, operands, traits, ...) uint32_t(traits),
#include "kiln/runtime/ops.def"
#undef KILN_OP
  };
  return (kTraits[size_t(op)] & kTakesEpilogue) != 0;
}

namespace {

// The op on its operands; with `into` (product()'s), its product is written there.
Tensor library_op(OpId op, std::span<const Tensor> in, const std::vector<Attr>& attrs, const Tensor* into) {
  auto arg = [&](size_t i) -> const Tensor& {
    KILN_CHECK(i < in.size(), "run_library", "op ", int(op), " takes more than ", in.size(), " operands");
    return in[i];
  };
  auto scalar = [&](std::string_view name) {
    for (const Attr& a : attrs)
      if (a.name == name) return attr_scalar(a.value);
    return Scalar(1.0);
  };
  switch (op) {
    case OpId::Matmul: return matmul_impl(arg(0), arg(1), into);
    case OpId::Mm: return mm_impl(arg(0), arg(1), into);
    case OpId::Bmm: return bmm_impl(arg(0), arg(1), into);
    case OpId::Addmm: return addmm_impl(arg(0), arg(1), arg(2), scalar("beta"), scalar("alpha"), into);
    case OpId::Einsum: {
      // (its steps are public ops: nothing of them is recorded should a trace be running)
      trace::Pause pause;
      std::string eq;
      for (const Attr& a : attrs)
        if (auto* s = std::get_if<std::string>(&a.value); s && a.name == "equation") eq = *s;
      return einsum_impl(eq, std::vector<Tensor>(in.begin(), in.end()), into);
    }
    default: KILN_FAIL("run_library", "op ", int(op), " is not a library op with a device implementation");
  }
}

}  // namespace

Tensor run_library(OpId op, std::span<const Tensor> in, const std::vector<Attr>& attrs) {
  return library_op(op, in, attrs, nullptr);
}

void run_library_into(OpId op, std::span<const Tensor> in, const std::vector<Attr>& attrs, const Tensor& dst) {
  // The product is written into dst itself where dst is laid out as a new product would be
  // (contiguous, the product's dtype) and no operand reads a byte of it; otherwise it is
  // computed apart and copied over. (A compiled attention_scores' [32, 8, 1024, 1024] scores
  // cost a 1 GiB copy on the GPU that way, and a second 1 GiB buffer.)
  const bool direct = !in.empty() && dst.is_contiguous() && dst.dtype() == in[0].dtype() &&
                      std::none_of(in.begin(), in.end(), [&](const Tensor& t) { return may_overlap(t, dst); });
  Tensor r = library_op(op, in, attrs, direct ? &dst : nullptr);
  KILN_CHECK(dst.sizes() == r.sizes(), "run_library", "a library op's result ", r.sizes().vec(),
             " does not fit its store ", dst.sizes().vec());
  bool in_place = first_element(r) == first_element(dst);  // (the strides of size-1 dims may differ)
  for (int64_t d = 0; d < r.dim() && in_place; ++d) in_place = r.sizes()[d] == 1 || r.strides()[d] == dst.strides()[d];
  if (in_place) return;
  Tensor d = dst;
  d.copy_(r);
}

}  // namespace device_ops

Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return kiln::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return kiln::bmm(*this, o); }

}  // namespace kiln
