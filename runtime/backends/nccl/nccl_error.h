// Converting ncclResult_t and cudaError_t into dadt Status at the backend edge.
//
// One macro family per library keeps the file:line of the failing call and what dadt was doing,
// the way NCCL's own NCCLCHECK leaves a trail:
//
//   DADT_NCCL_CHECK("allreduce", ncclAllReduce(buf, buf, n, type, op, comm_, stream_));
//   DADT_CUDA_CHECK("fusion copy", dadt_cuda::LaunchCopyBatch(batch, stream_));
//
// Mapping of NCCL results: ncclInvalidArgument, ncclInvalidUsage -> kInvalidArgument (the caller
// passed something NCCL refuses); ncclSystemError, ncclRemoteError, ncclInternalError,
// ncclUnhandledCudaError -> kAborted (a peer died, the network or the device failed: the
// communicator is unusable and is aborted); ncclInProgress is not an error (nonblocking
// communicators) and never reaches these functions. CUDA errors are kAborted, except
// cudaErrorInvalidValue / cudaErrorInvalidDevice (kInvalidArgument) and
// cudaErrorNoDevice / cudaErrorInsufficientDriver (kPreconditionFailed: no usable GPU).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "runtime/common/status.h"

namespace dadt {
namespace backends {
namespace nccl {
namespace internal {

Status StatusFromNcclResult(ncclResult_t result, const char* what, const char* file, int line,
                            const char* last_error = nullptr);
Status StatusFromCudaError(cudaError_t error, const char* what, const char* file, int line);

}  // namespace internal
}  // namespace nccl
}  // namespace backends
}  // namespace dadt

#define DADT_NCCL_STATUS(what, call)                                                       \
  ([&]() -> ::dadt::Status {                                                               \
    const ncclResult_t _dadt_nccl_rc = (call);                                             \
    if (_dadt_nccl_rc == ncclSuccess || _dadt_nccl_rc == ncclInProgress) {                 \
      return ::dadt::Status::OK();                                                         \
    }                                                                                      \
    return ::dadt::backends::nccl::internal::StatusFromNcclResult(_dadt_nccl_rc, (what),   \
                                                                  __FILE__, __LINE__);     \
  }())
#define DADT_NCCL_CHECK(what, call) DADT_RETURN_IF_ERROR(DADT_NCCL_STATUS(what, call))

#define DADT_CUDA_STATUS(what, call)                                                       \
  ([&]() -> ::dadt::Status {                                                               \
    const cudaError_t _dadt_cuda_rc = (call);                                              \
    if (_dadt_cuda_rc == cudaSuccess) return ::dadt::Status::OK();                         \
    return ::dadt::backends::nccl::internal::StatusFromCudaError(_dadt_cuda_rc, (what),    \
                                                                 __FILE__, __LINE__);      \
  }())
#define DADT_CUDA_CHECK(what, call) DADT_RETURN_IF_ERROR(DADT_CUDA_STATUS(what, call))
