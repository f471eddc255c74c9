// CudaDevice and NcclBackend on a real GPU: the batched fusion copy, scaling, the fp16 cast,
// completion callbacks, and every collective at one rank. Skips (with the reason) without a GPU.
#include "runtime/backends/nccl/cuda_device.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <future>
#include <numeric>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/device.h"
#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace backends {
namespace nccl {
namespace {

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceRegistry::VisibleDevices(&why) == 0) GTEST_SKIP() << why;
    auto ctx = DeviceRegistry::Create(DeviceOptions{});
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    ctx_ = std::move(*ctx);
  }
  // Waits for everything enqueued so far, through the completion thread.
  Status Drain() {
    std::promise<Status> p;
    ctx_->OnComplete([&p](Status s) { p.set_value(s); });
    return p.get_future().get();
  }
  template <typename T>
  std::vector<T> Download(const void* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void* Upload(const void* h, size_t bytes) {
    auto m = ctx_->Allocate(static_cast<int64_t>(bytes), DeviceContext::Use::kOutput);
    EXPECT_TRUE(m.ok());
    keep_.push_back(*m);
    EXPECT_EQ(cudaMemcpy(m->get(), h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return m->get();
  }
  std::unique_ptr<DeviceContext> ctx_;
  std::vector<std::shared_ptr<void>> keep_;
};

TEST_F(CudaDeviceTest, BatchedCopyPacksAndZeroFillsManyOddSizedSpans) {
  // 300 spans (more than one launch), sizes 0..299 bytes: unaligned, empty and vectorised paths.
  constexpr int kSpans = 300;
  std::vector<CopySpan> spans;
  std::vector<uint8_t> expect;
  int64_t total = 0;
  for (int i = 0; i < kSpans; ++i) total += i;
  void* fused = Upload(std::vector<uint8_t>(total, 0xAB).data(), total);
  int64_t off = 0;
  for (int i = 0; i < kSpans; ++i) {
    std::vector<uint8_t> src(i);
    std::iota(src.begin(), src.end(), static_cast<uint8_t>(i));
    const bool zero = i % 7 == 3;
    spans.push_back({zero || i == 0 ? nullptr : Upload(src.data(), i), static_cast<char*>(fused) + off, i});
    for (int k = 0; k < i; ++k) expect.push_back(zero ? 0 : src[k]);
    off += i;
  }
  ASSERT_TRUE(ctx_->Copy(spans).ok());
  ASSERT_TRUE(Drain().ok());
  EXPECT_EQ(Download<uint8_t>(fused, total), expect);
}

TEST_F(CudaDeviceTest, ScaleAndFp16CastOnTheDevice) {
  std::vector<float> h = {1.f, -2.f, 0.5f, 65504.f, 3.f};
  void* f = Upload(h.data(), h.size() * 4);
  ASSERT_TRUE(ctx_->Scale(f, 5, DataType::kFloat32, 0.5).ok());
  auto half = ctx_->Allocate(10, DeviceContext::Use::kScratch);
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(ctx_->Cast(f, DataType::kFloat32, half->get(), DataType::kFloat16, 5).ok());
  ASSERT_TRUE(ctx_->Scale(half->get(), 5, DataType::kFloat16, 2.0).ok());
  ASSERT_TRUE(ctx_->Cast(half->get(), DataType::kFloat16, f, DataType::kFloat32, 5).ok());
  ASSERT_TRUE(Drain().ok());
  EXPECT_EQ(Download<float>(f, 5), h);  // every value is exact in fp16
  EXPECT_EQ(ctx_->Cast(f, DataType::kFloat64, f, DataType::kFloat16, 1).code(), StatusCode::kUnimplemented);
}

// Horovod's GPU kernels scale a float16 buffer by the factor rounded to float16: 7 * fp16(0.1) =
// 7 * 0.0999755859375 rounds to 0.69970703125, where 7 * 0.1f would round to 0.7001953125.
TEST_F(CudaDeviceTest, Fp16ScalesByTheFactorRoundedToFp16AsHorovodDoes) {
  float seven = 7.f;
  void* f = Upload(&seven, 4);
  auto half = ctx_->Allocate(2, DeviceContext::Use::kScratch);
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(ctx_->Cast(f, DataType::kFloat32, half->get(), DataType::kFloat16, 1).ok());
  ASSERT_TRUE(ctx_->Scale(half->get(), 1, DataType::kFloat16, 0.1).ok());
  ASSERT_TRUE(ctx_->Cast(half->get(), DataType::kFloat16, f, DataType::kFloat32, 1).ok());
  ASSERT_TRUE(Drain().ok());
  EXPECT_EQ(Download<float>(f, 1), std::vector<float>{0.69970703125f});
}

// The batched copy at realistic sizes: spans of several chunks, 4-byte-aligned destinations (a
// float32 tensor after an odd-length one in the fusion buffer), a zero fill, and the unpack back.
TEST_F(CudaDeviceTest, BatchedCopyPacksAndUnpacksMultiChunkSpansAtEveryAlignment) {
  const std::vector<int64_t> floats = {1, 4097, 100000, 3, 65536, 7};
  int64_t total = 0;
  for (int64_t n : floats) total += n;
  void* fused = Upload(std::vector<float>(total, -1.f).data(), total * 4);
  std::vector<CopySpan> pack, unpack;
  std::vector<float> expect;
  std::vector<void*> outs;
  int64_t off = 0;
  for (size_t i = 0; i < floats.size(); ++i) {
    std::vector<float> src(floats[i]);
    std::iota(src.begin(), src.end(), static_cast<float>(1000 * i));
    const bool zero = i == 3;
    float* slot = static_cast<float*>(fused) + off;
    pack.push_back({zero ? nullptr : Upload(src.data(), src.size() * 4), slot, floats[i] * 4});
    outs.push_back(Upload(std::vector<float>(floats[i], -2.f).data(), floats[i] * 4));
    unpack.push_back({slot, outs.back(), floats[i] * 4});
    for (float v : src) expect.push_back(zero ? 0.f : v);
    off += floats[i];
  }
  ASSERT_TRUE(ctx_->Copy(pack).ok());
  ASSERT_TRUE(ctx_->Copy(unpack).ok());
  ASSERT_TRUE(Drain().ok());
  EXPECT_EQ(Download<float>(fused, total), expect);
  off = 0;
  for (size_t i = 0; i < floats.size(); ++i) {
    EXPECT_EQ(Download<float>(outs[i], floats[i]),
              std::vector<float>(expect.begin() + off, expect.begin() + off + floats[i])) << i;
    off += floats[i];
  }
}

// The device matches the host's ScaleBuffer/DivideBuffer: integers saturate and divide as integers.
TEST_F(CudaDeviceTest, IntegerScaleSaturatesAndAverageDividesLikeTheHost) {
  std::vector<int8_t> i8 = {1, -2, 100, -100};
  void* a = Upload(i8.data(), 4);
  ASSERT_TRUE(ctx_->Scale(a, 4, DataType::kInt8, 2.0).ok());
  std::vector<int32_t> i32 = {7, -7, 9, 0};
  void* b = Upload(i32.data(), 16);
  ASSERT_TRUE(ctx_->Divide(b, 4, DataType::kInt32, 3).ok());
  ASSERT_TRUE(Drain().ok());
  EXPECT_EQ(Download<int8_t>(a, 4), (std::vector<int8_t>{2, -4, 127, -128}));
  EXPECT_EQ(Download<int32_t>(b, 4), (std::vector<int32_t>{2, -2, 3, 0}));
  EXPECT_EQ(ctx_->Divide(b, 4, DataType::kBool, 2).code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaDeviceTest, EveryCollectiveAtOneRankOnTheContextsStream) {
  testutil::InMemoryKeyValueStore store;
  BackendOptions o;
  o.store = &store;
  o.store_prefix = "nccl/";
  o.device = ctx_->device();
  o.device_stream = ctx_->stream();
  auto b = BackendRegistry::Create("nccl", o);
  ASSERT_TRUE(b.ok()) << b.status().message();
  std::vector<float> h = {1, 2, 3, 4};
  void* x = Upload(h.data(), 16);
  void* y = Upload(std::vector<float>(4, 0).data(), 16);
  ASSERT_TRUE((*b)->Allreduce(x, 4, DataType::kFloat32, ReduceOp::kSum).ok());
  ASSERT_TRUE((*b)->Allgatherv(x, y, {16}).ok());
  ASSERT_TRUE((*b)->Broadcast(y, 16, 0).ok());
  ASSERT_TRUE((*b)->Alltoallv(x, {16}, y, {16}).ok());
  ASSERT_TRUE((*b)->Reducescatter(x, y, {4}, DataType::kFloat32, ReduceOp::kMax).ok());
  ASSERT_TRUE((*b)->Barrier().ok());
  ASSERT_TRUE(Drain().ok());
  EXPECT_TRUE((*b)->AsyncError().ok());
  EXPECT_EQ(Download<float>(y, 4), h);
}

}  // namespace
}  // namespace nccl
}  // namespace backends
}  // namespace dadt
