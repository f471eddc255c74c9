#include "runtime/backends/nccl/nccl_error.h"

#include <string>

namespace dadt {
namespace backends {
namespace nccl {
namespace internal {
namespace {

std::string Where(const char* what, const char* lib, const char* file, int line) {
  return std::string(lib) + " " + what + " failed at " + file + ":" + std::to_string(line) + ": ";
}

}  // namespace

Status StatusFromNcclResult(ncclResult_t result, const char* what, const char* file, int line,
                            const char* last_error) {
  std::string message = Where(what, "NCCL", file, line) + ncclGetErrorString(result);
  if (last_error && *last_error) message += " (" + std::string(last_error) + ")";
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgument(message);
    case ncclSuccess:
    case ncclInProgress:
      return Status::OK();
    default:
      return Aborted(message + "; the communicator is aborted (a peer has probably exited, or "
                               "the network or the GPU failed)");
  }
}

Status StatusFromCudaError(cudaError_t error, const char* what, const char* file, int line) {
  const std::string message = Where(what, "CUDA", file, line) + cudaGetErrorName(error) + ": " +
                              cudaGetErrorString(error);
  switch (error) {
    case cudaSuccess:
      return Status::OK();
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return InvalidArgument(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return PreconditionFailed(message);
    default:
      return Aborted(message);
  }
}

}  // namespace internal
}  // namespace nccl
}  // namespace backends
}  // namespace dadt
