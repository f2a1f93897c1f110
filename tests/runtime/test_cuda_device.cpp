// The CUDA runtime: devices, tensors on a GPU, copies both ways (dense, strided, pinned,
// asynchronous), the stream-ordered pool's statistics, events. Runs on kiln's emulated driver
// (tests/emulation) everywhere, and on a real GPU with KILN_TEST_REAL_CUDA=1.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/runtime/cuda.h>

#include "../common/close.h"
#include "../emulation/emulated_driver.h"

using namespace kiln;

namespace {

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  }
};

TEST_F(CudaDevice, DescribesTheDevice) {
  cuda::DeviceInfo info = cuda::device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.multiprocessors, 1);
  EXPECT_GE(info.arch, 50);
  EXPECT_GT(info.total_memory, size_t(0));
  if (!kiln::testing::use_real_cuda()) {
    EXPECT_TRUE(cuda::emulated());
    EXPECT_EQ(info.arch, 90);
  }
  EXPECT_THROW(cuda::device_info(7), Error);
}

TEST_F(CudaDevice, TensorsRoundTripInEveryDtype) {
  manual_seed(1);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt8, kUInt8, kBool}) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = dt == kBool ? randint(0, 2, {37, 5}).to(kBool) : (randn({37, 5}) * 10).to(dt);
    Tensor g = x.to(Device::cuda());
    EXPECT_TRUE(g.is_cuda());
    EXPECT_EQ(g.device().str(), "cuda:0");
    EXPECT_EQ(g.dtype(), dt);
    EXPECT_EQ(g.sizes().vec(), x.sizes().vec());
    Tensor back = g.to(kCPU);
    EXPECT_TRUE(back.is_cpu());
    EXPECT_TRUE(kiln::testing::close(back, x));
  }
}

TEST_F(CudaDevice, StridedViewsCopyWhatTheyShow) {
  manual_seed(2);
  Tensor x = randn({16, 9});
  Tensor g = x.to(Device::cuda());
  // views of device memory: transposed, sliced with a step, an offset element
  EXPECT_TRUE(kiln::testing::close(g.t().to(kCPU), x.t().contiguous()));
  EXPECT_TRUE(kiln::testing::close(g.slice(0, 3, 15, 4).to(kCPU), x.slice(0, 3, 15, 4).contiguous()));
  EXPECT_EQ(g[5][7].item<double>(), x[5][7].item<double>());
  // a non-contiguous host tensor goes up as its values
  EXPECT_TRUE(kiln::testing::close(x.t().to(Device::cuda()).to(kCPU), x.t().contiguous()));
  // empty tensors
  Tensor e = empty({0, 3}).to(Device::cuda());
  EXPECT_EQ(e.to(kCPU).sizes().vec(), (std::vector<int64_t>{0, 3}));
}

TEST_F(CudaDevice, PinnedMemoryAndAsynchronousCopies) {
  manual_seed(3);
  Tensor x = randn({1000});
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_TRUE(kiln::testing::close(p, x));
  Tensor g = p.to(Device::cuda(), /*non_blocking=*/true);
  Tensor h = g.to(kCPU, /*non_blocking=*/true);
  EXPECT_TRUE(h.is_pinned());
  cuda::synchronize();
  EXPECT_TRUE(kiln::testing::close(h, x));
  EXPECT_THROW(g.pin_memory(), Error);
  // the pinned source of a non-blocking copy lives until the copy has run: the next synchronize
  std::weak_ptr<Storage> source;
  {
    Tensor q = x.pin_memory();
    source = q.storage();
    g = q.to(Device::cuda(), /*non_blocking=*/true);
  }
  EXPECT_FALSE(source.expired()) << "released before the copy was known to have run";
  cuda::synchronize();
  EXPECT_TRUE(source.expired()) << "still held after a synchronize";
  EXPECT_TRUE(kiln::testing::close(g.to(kCPU), x));
}

TEST_F(CudaDevice, MemoryStatisticsFollowTensors) {
  cuda::synchronize();
  size_t base = cuda::memory_allocated();
  cuda::reset_peak_memory_stats();
  {
    Tensor a = empty({1 << 20}, TensorOptions(kFloat32).device(Device::cuda()));
    EXPECT_EQ(cuda::memory_allocated(), base + (size_t(4) << 20));
    {
      Tensor b = empty({1 << 18}, TensorOptions(kFloat64).device(Device::cuda()));
      EXPECT_EQ(cuda::memory_allocated(), base + (size_t(6) << 20));
    }
    EXPECT_EQ(cuda::memory_allocated(), base + (size_t(4) << 20));
    EXPECT_GE(cuda::memory_reserved(), cuda::memory_allocated());
  }
  EXPECT_EQ(cuda::memory_allocated(), base);
  EXPECT_EQ(cuda::max_memory_allocated(), base + (size_t(6) << 20));
  cuda::reset_peak_memory_stats();
  EXPECT_EQ(cuda::max_memory_allocated(), base);
  cuda::empty_cache();
  EXPECT_GE(cuda::memory_reserved(), cuda::memory_allocated());
  if (!kiln::testing::use_real_cuda()) {
    EXPECT_EQ(cuda::memory_reserved(), cuda::memory_allocated());
  }
}

// A failed driver call raises kiln::Error naming the call, CUDA's error name and its text (the
// same describe() every checked call goes through); the device works on afterwards.
TEST_F(CudaDevice, DriverErrorsNameTheCallTheErrorAndItsText) {
  const int64_t n = int64_t(1) << 40;  // 4 TiB of float32: more than any device has
  try {
    Tensor t = empty({n}, TensorOptions(kFloat32).device(Device::cuda()));
    FAIL() << "a 4 TiB tensor was allocated";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* part : {"alloc", "4398046511104 bytes", "cuda:0", "cuMemAllocAsync", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"})
      EXPECT_NE(m.find(part), std::string::npos) << "no '" << part << "' in: " << m;
  }
  Tensor x = arange(4, TensorOptions(kFloat32)).to(Device::cuda());
  EXPECT_TRUE(kiln::testing::close((x * 2).to(kCPU), arange(4, TensorOptions(kFloat32)) * 2));
}

TEST_F(CudaDevice, EventsMeasureTheStream) {
  cuda::Event a, b;
  a.record();
  Tensor g = randn({4096}).to(Device::cuda());
  b.record();
  b.synchronize();
  EXPECT_GE(a.elapsed_ms(b), 0.0f);
}

// A CUDA graph replays what was enqueued while it was captured; memory allocated and freed
// inside the capture is the graph's own (allocation and free nodes), replayed with it.
TEST_F(CudaDevice, GraphsReplayTheirWorkAndTheirOwnMemory) {
  Tensor out = zeros({64}, TensorOptions(kUInt8).device(Device::cuda()));
  void* dst = out.storage()->data();
  size_t before = cuda::memory_allocated();
  cuda::Graph g([&] {
    void* scratch = cuda::allocate(64);
    cuda::fill_bytes(scratch, 7, 64);
    cuda::copy_on_device(dst, scratch, 64);
    cuda::release(scratch, 64);
  });
  EXPECT_EQ(cuda::memory_allocated(), before);
  EXPECT_EQ(out.to(kCPU).sum().item<int64_t>(), 0) << "the capture ran its work";
  g.launch();
  EXPECT_EQ(out.to(kCPU).sum().item<int64_t>(), 7 * 64);
  out.zero_();
  g.launch();
  EXPECT_EQ(out.to(kCPU).sum().item<int64_t>(), 7 * 64);
  // Memory allocated inside a capture and kept after it is refused (the emulation is stricter
  // than CUDA, which would refuse the graph's next launch instead).
  if (!kiln::testing::use_real_cuda()) {
    void* kept = nullptr;
    EXPECT_THROW(cuda::Graph([&] { kept = cuda::allocate(64); }), Error);
    cuda::release(kept, 64);
  }
}

TEST_F(CudaDevice, CpuOpsRefuseDeviceTensorsByName) {
  Tensor g = randn({4}).to(Device::cuda());
  try {
    (void)(g.to(kCPU) + g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
