// The NCCL/CUDA edge without a GPU: error mapping with file:line, the dtype/op table, the unique
// id's encoding in the rendezvous store, registration, and refusals when no GPU is visible.
#include "runtime/backends/nccl/nccl_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runtime/backends/backend.h"
#include "runtime/backends/device.h"
#include "runtime/backends/nccl/nccl_backend.h"
#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace backends {
namespace nccl {
namespace {

using internal::StatusFromCudaError;
using internal::StatusFromNcclResult;

bool Has(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

TEST(NcclError, CallerErrorsAreInvalidArgument) {
  for (ncclResult_t r : {ncclInvalidArgument, ncclInvalidUsage}) {
    Status s = StatusFromNcclResult(r, "allreduce", "f.cc", 7);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_TRUE(Has(s, "NCCL allreduce failed at f.cc:7")) << s.message();
    EXPECT_TRUE(Has(s, ncclGetErrorString(r))) << s.message();
  }
}

TEST(NcclError, PeerNetworkAndDeviceFailuresAbort) {
  for (ncclResult_t r : {ncclSystemError, ncclRemoteError, ncclInternalError, ncclUnhandledCudaError}) {
    Status s = StatusFromNcclResult(r, "broadcast", "f.cc", 9, "socket closed by peer");
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.message();
    EXPECT_TRUE(Has(s, "communicator is aborted")) << s.message();
    EXPECT_TRUE(Has(s, "(socket closed by peer)")) << s.message();
  }
}

TEST(NcclError, MacroKeepsTheCallersFileAndLineAndTreatsInProgressAsOk) {
  EXPECT_TRUE(DADT_NCCL_STATUS("init", ncclInProgress).ok());
  EXPECT_TRUE(DADT_NCCL_STATUS("init", ncclSuccess).ok());
  const int line = __LINE__ + 1;
  Status s = DADT_NCCL_STATUS("reducescatter", ncclInvalidArgument);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(s, std::string("nccl_error_test.cc:") + std::to_string(line))) << s.message();
}

TEST(CudaError, Mapping) {
  EXPECT_EQ(StatusFromCudaError(cudaErrorInvalidValue, "copy", "f.cc", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromCudaError(cudaErrorNoDevice, "init", "f.cc", 1).code(), StatusCode::kPreconditionFailed);
  Status s = StatusFromCudaError(cudaErrorLaunchFailure, "fusion buffer copy", "f.cc", 3);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_TRUE(Has(s, "CUDA fusion buffer copy failed at f.cc:3: cudaErrorLaunchFailure")) << s.message();
  EXPECT_TRUE(DADT_CUDA_STATUS("x", cudaSuccess).ok());
}

TEST(NcclTypes, EveryDtypeMapsAndBoolReducesLogically) {
  ncclDataType_t t;
  ncclRedOp_t op;
  ASSERT_TRUE(internal::NcclTypeAndOp(DataType::kFloat16, ReduceOp::kSum, &t, &op).ok());
  EXPECT_EQ(t, ncclFloat16);
  EXPECT_EQ(op, ncclSum);
  ASSERT_TRUE(internal::NcclTypeAndOp(DataType::kBfloat16, ReduceOp::kProduct, &t, &op).ok());
  EXPECT_EQ(t, ncclBfloat16);
  EXPECT_EQ(op, ncclProd);
  ASSERT_TRUE(internal::NcclTypeAndOp(DataType::kBool, ReduceOp::kSum, &t, &op).ok());
  EXPECT_EQ(t, ncclUint8);
  EXPECT_EQ(op, ncclMax);  // logical or
  ASSERT_TRUE(internal::NcclTypeAndOp(DataType::kBool, ReduceOp::kProduct, &t, &op).ok());
  EXPECT_EQ(op, ncclMin);  // logical and
  for (int d = 0; d < kNumDataTypes; ++d) {
    const DataType dtype = static_cast<DataType>(d);
    Status s = internal::NcclTypeAndOp(dtype, ReduceOp::kMax, &t, &op);
    if (dtype == DataType::kInt16 || dtype == DataType::kUint16) {
      // NCCL has no 16-bit integers: reductions are refused, naming the type.
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << d;
      EXPECT_NE(s.message().find(DataTypeName(dtype)), std::string::npos) << s.message();
    } else {
      EXPECT_TRUE(s.ok()) << d;
    }
  }
  Status avg = internal::NcclTypeAndOp(DataType::kFloat32, ReduceOp::kAverage, &t, &op);
  EXPECT_EQ(avg.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(internal::NcclTypeAndOp(DataType::kFloat32, ReduceOp::kAdasum, &t, &op).code(),
            StatusCode::kUnimplemented);
}

// What the core asks before it queues a GPU reduction (needs no GPU): Average counts as Sum.
TEST(NcclTypes, TheRegistryAnswersWhetherNcclReducesADtype) {
  EXPECT_TRUE(DeviceRegistry::NcclReduces(DataType::kFloat16, ReduceOp::kAverage).ok());
  Status s = DeviceRegistry::NcclReduces(DataType::kUint16, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("uint16"), std::string::npos) << s.message();
}

TEST(NcclUniqueId, RoundTripsThroughTheStoreAndRefusesTruncatedBytes) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(i * 7);
  auto back = internal::DecodeUniqueId(internal::EncodeUniqueId(id));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(std::string(back->internal, sizeof(id.internal)), std::string(id.internal, sizeof(id.internal)));
  auto bad = internal::DecodeUniqueId("short");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(bad.status(), "expected 128")) << bad.status().message();
}

TEST(NcclRegistration, TheCudaBuildRegistersNcclAndTheDevice) {
  const auto names = BackendRegistry::Names();
  EXPECT_NE(std::find(names.begin(), names.end(), "nccl"), names.end());
  EXPECT_TRUE(DeviceRegistry::Built());
}

TEST(NcclBackend, RefusesToStartWithoutADevice) {
  testutil::InMemoryKeyValueStore store;
  BackendOptions o;
  o.store = &store;
  o.device = -1;
  auto b = BackendRegistry::Create("nccl", o);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(b.status(), "GPU tensors")) << b.status().message();
}

TEST(CudaDevice, WithoutAGpuCreationSaysNoDeviceIsVisible) {
  std::string why;
  if (DeviceRegistry::VisibleDevices(&why) > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_TRUE(why.find("no CUDA device visible") != std::string::npos) << why;
  DeviceOptions o;
  auto ctx = DeviceRegistry::Create(o);
  EXPECT_EQ(ctx.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_TRUE(Has(ctx.status(), "no CUDA device visible")) << ctx.status().message();
}

}  // namespace
}  // namespace nccl
}  // namespace backends
}  // namespace dadt
