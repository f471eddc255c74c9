// NcclBackend: dadt's data plane for tensors in GPU memory (registered as "nccl").
//
// The core creates one for a device the first time a GPU tensor is negotiated (every rank does so
// at the same response, so creation is collective), on the stream of that device's CudaDevice:
// every NCCL call is enqueued on that stream and returns without waiting for the GPU; the
// CudaDevice's completion thread reports when the work is done.
//
// Bootstrap through the job's KeyValueStore: rank 0 calls ncclGetUniqueId and puts the 128 bytes
// under `<store_prefix>unique_id`; the others read them (with the connect timeout), then all call
// ncclCommInitRankConfig. The communicator is nonblocking (config.blocking = 0), so no NCCL call
// can block the loop thread: each call returns at once and WaitReady polls ncclCommGetAsyncError
// until the enqueue is done, with the collective timeout, after which the communicator is aborted.
//
//   Allreduce      ncclAllReduce in place (bool: Sum/Max as Max, Min/Product as Min on uint8).
//   Allgatherv     ncclAllGather when every rank sends the same bytes, else one ncclBroadcast per
//                  rank in a group.
//   Broadcast      ncclBroadcast in place.
//   Alltoallv      ncclSend/ncclRecv pairs in one group.
//   Reducescatter  ncclReduceScatter for equal counts, else one ncclReduce per rank in a group.
//   Barrier        a one-element allreduce, then the host waits for the stream (a barrier must
//                  block the caller).
//
// Failure: results are converted at this edge (nccl_error.h). After the first failure, or Abort()
// from the completion thread (a peer's error seen by ncclCommGetAsyncError, or a timeout), the
// communicator is aborted (ncclCommAbort) and every later call returns kAborted at once. The
// destructor aborts too: ncclCommFinalize would wait for peers that may be gone.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"

namespace dadt {
namespace backends {
namespace nccl {

class NcclBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  ~NcclBackend() override;

  const char* Name() const override { return "NCCL"; }
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status Barrier() override;
  Status AsyncError() override;
  void Abort() override;

 private:
  NcclBackend(const BackendOptions& options, ncclComm_t comm);
  // Polls until the communicator has no operation in progress; aborts it after the timeout.
  Status WaitReady(const char* what);
  Status CheckUsable() const;
  // Runs call(comm_) under comm_mu_ unless the communicator was aborted: Abort() may come from the
  // completion thread, and ncclCommAbort frees the communicator.
  template <typename Call>
  Status Guarded(const char* what, Call call);
  // Records `status` as the backend's failure (aborting the communicator) when it is not OK.
  Status Finish(const char* what, Status status);

  const int rank_;
  const int size_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  cudaStream_t stream_;
  ncclComm_t comm_;
  std::mutex comm_mu_;  // every use of comm_ once another thread may abort it
  bool aborted_ = false;  // guarded by comm_mu_
  Status broken_;
  void* barrier_buf_ = nullptr;  // one int32 on the device
};

namespace internal {

// NCCL's type and op for a dadt dtype and reduction. Unimplemented for Adasum and for Average
// (the core runs Average as Sum and a scale).
Status NcclTypeAndOp(DataType dtype, ReduceOp op, ncclDataType_t* type, ncclRedOp_t* nccl_op);

// Bytes of the NCCL unique id as stored under the prefix, and back.
std::string EncodeUniqueId(const ncclUniqueId& id);
StatusOr<ncclUniqueId> DecodeUniqueId(const std::string& bytes);

}  // namespace internal
}  // namespace nccl
}  // namespace backends
}  // namespace dadt
