#include "runtime/backends/nccl/nccl_backend.h"

#include <chrono>
#include <algorithm>
#include <cstring>
#include <thread>

#include "runtime/backends/nccl/nccl_error.h"

namespace dadt {
namespace backends {
namespace nccl {
namespace internal {

Status NcclTypeAndOp(DataType dtype, ReduceOp op, ncclDataType_t* type, ncclRedOp_t* nccl_op) {
  switch (dtype) {
    case DataType::kUint8: *type = ncclUint8; break;
    case DataType::kInt8: *type = ncclInt8; break;
    case DataType::kInt32: *type = ncclInt32; break;
    case DataType::kInt64: *type = ncclInt64; break;
    case DataType::kFloat16: *type = ncclFloat16; break;
    case DataType::kBfloat16: *type = ncclBfloat16; break;
    case DataType::kFloat32: *type = ncclFloat32; break;
    case DataType::kFloat64: *type = ncclFloat64; break;
    case DataType::kBool: *type = ncclUint8; break;
    case DataType::kInt16:
    case DataType::kUint16:
      return InvalidArgument(std::string("NCCL has no 16-bit integer type to reduce ") +
                             DataTypeName(dtype) + " tensors on the GPU; reduce them as int32, or "
                             "on CPU tensors");
    default: return InvalidArgument("NCCL: unknown data type");
  }
  const bool logical = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum: *nccl_op = logical ? ncclMax : ncclSum; break;
    case ReduceOp::kMax: *nccl_op = ncclMax; break;
    case ReduceOp::kMin: *nccl_op = ncclMin; break;
    case ReduceOp::kProduct: *nccl_op = logical ? ncclMin : ncclProd; break;
    default:
      return Unimplemented(std::string("NCCL does not reduce with ") + ReduceOpName(op) +
                           " (the core runs Average as Sum and a scale)");
  }
  return Status::OK();
}

std::string EncodeUniqueId(const ncclUniqueId& id) {
  return std::string(id.internal, sizeof(id.internal));
}

StatusOr<ncclUniqueId> DecodeUniqueId(const std::string& bytes) {
  ncclUniqueId id;
  if (bytes.size() != sizeof(id.internal)) {
    return InvalidArgument("NCCL unique id in the rendezvous store has " +
                           std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(sizeof(id.internal)));
  }
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

}  // namespace internal

namespace {

// Polls a nonblocking communicator until its pending operation is enqueued (or failed); `query`
// reads ncclCommGetAsyncError.
template <typename Query>
Status PollComm(const char* what, std::chrono::milliseconds timeout, Query query) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff = std::chrono::microseconds(1);
  while (true) {
    ncclResult_t state = ncclSuccess;
    DADT_RETURN_IF_ERROR(query(&state));
    if (state == ncclSuccess) return Status::OK();
    if (state != ncclInProgress) {
      return internal::StatusFromNcclResult(state, what, __FILE__, __LINE__);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return TimeoutError(std::string("NCCL ") + what + " did not finish within " +
                          std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> NcclBackend::Create(const BackendOptions& o) {
  if (o.device < 0 || !o.store) {
    return InvalidArgument("the nccl backend serves GPU tensors: it needs a CUDA device and the "
                           "job's rendezvous store (the core creates it for the first GPU tensor)");
  }
  const auto connect = o.connect_timeout.count() > 0 ? o.connect_timeout : o.timeout;
  const std::string key = o.store_prefix + "unique_id";
  ncclUniqueId id;
  if (o.rank == 0) {
    DADT_NCCL_CHECK("get unique id", ncclGetUniqueId(&id));
    DADT_RETURN_IF_ERROR(o.store->Set(key, internal::EncodeUniqueId(id)));
  } else {
    auto bytes = o.store->Get(key, connect);
    if (!bytes.ok()) return bytes.status();
    auto decoded = internal::DecodeUniqueId(*bytes);
    if (!decoded.ok()) return decoded.status();
    id = *decoded;
  }
  DADT_CUDA_CHECK("set device", cudaSetDevice(o.device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  DADT_NCCL_CHECK("communicator init", ncclCommInitRankConfig(&comm, o.size, id, o.rank, &config));
  Status ready = PollComm("communicator init", connect, [comm](ncclResult_t* state) {
    return DADT_NCCL_STATUS("communicator init", ncclCommGetAsyncError(comm, state));
  });
  if (!ready.ok()) {
    (void)ncclCommAbort(comm);
    return ready;
  }
  std::unique_ptr<NcclBackend> b(new NcclBackend(o, comm));
  DADT_CUDA_CHECK("allocate barrier buffer", cudaMalloc(&b->barrier_buf_, sizeof(int32_t)));
  return std::unique_ptr<Backend>(std::move(b));
}

NcclBackend::NcclBackend(const BackendOptions& o, ncclComm_t comm)
    : rank_(o.rank),
      size_(o.size),
      device_(o.device),
      timeout_(o.timeout),
      stream_(reinterpret_cast<cudaStream_t>(o.device_stream)),
      comm_(comm) {}

NcclBackend::~NcclBackend() {
  (void)cudaSetDevice(device_);
  // ncclCommAbort frees the communicator (no ncclCommDestroy after it) and never waits for peers,
  // which ncclCommFinalize/Destroy would.
  Abort();
  if (barrier_buf_) (void)cudaFree(barrier_buf_);
}

void NcclBackend::Abort() {
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (aborted_) return;
  aborted_ = true;
  (void)ncclCommAbort(comm_);
}

Status NcclBackend::AsyncError() {
  ncclResult_t state = ncclSuccess;
  const char* last = nullptr;
  {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (aborted_) return Aborted("NCCL communicator was aborted");
    DADT_NCCL_CHECK("async error query", ncclCommGetAsyncError(comm_, &state));
    if (state == ncclSuccess || state == ncclInProgress) return Status::OK();
    last = ncclGetLastError(comm_);
  }
  return internal::StatusFromNcclResult(state, "collective (asynchronous)", __FILE__, __LINE__,
                                        last);
}

template <typename Call>
Status NcclBackend::Guarded(const char* what, Call call) {
  std::lock_guard<std::mutex> lock(comm_mu_);
  if (aborted_) return Aborted(std::string("NCCL ") + what + ": the communicator was aborted");
  return DADT_NCCL_STATUS(what, call(comm_));
}

Status NcclBackend::CheckUsable() const {
  if (!broken_.ok()) {
    return Aborted("NCCL backend is unusable after an earlier failure: " + broken_.message());
  }
  return Status::OK();  // an abort from another thread is seen by the first Guarded call
}

Status NcclBackend::WaitReady(const char* what) {
  return PollComm(what, timeout_, [this, what](ncclResult_t* state) {
    return Guarded(what, [state](ncclComm_t c) { return ncclCommGetAsyncError(c, state); });
  });
}

Status NcclBackend::Finish(const char* what, Status status) {
  if (status.ok()) status = WaitReady(what);
  if (!status.ok()) {
    broken_ = status;
    Abort();
  }
  return status;
}

Status NcclBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  ncclDataType_t type;
  ncclRedOp_t nop;
  DADT_RETURN_IF_ERROR(internal::NcclTypeAndOp(dtype, op, &type, &nop));
  return Finish("allreduce", Guarded("allreduce", [&](ncclComm_t c) {
                  return ncclAllReduce(buf, buf, count, type, nop, c, stream_);
                }));
}

Status NcclBackend::Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  bool equal = true;
  for (int64_t b : bytes) equal = equal && b == bytes[0];
  if (equal) {
    return Finish("allgather", Guarded("allgather", [&](ncclComm_t c) {
                    return ncclAllGather(in, out, bytes[0], ncclInt8, c, stream_);
                  }));
  }
  Status s = DADT_NCCL_STATUS("allgatherv group", ncclGroupStart());
  int64_t off = 0;
  for (int r = 0; r < size_ && s.ok(); ++r) {
    char* dst = static_cast<char*>(out) + off;
    s = Guarded("allgatherv", [&](ncclComm_t c) {
      return ncclBroadcast(r == rank_ ? in : dst, dst, bytes[r], ncclInt8, r, c, stream_);
    });
    off += bytes[r];
  }
  Status end = DADT_NCCL_STATUS("allgatherv group", ncclGroupEnd());
  return Finish("allgatherv", s.ok() ? end : s);
}

Status NcclBackend::Broadcast(void* buf, int64_t bytes, int root) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  return Finish("broadcast", Guarded("broadcast", [&](ncclComm_t c) {
                  return ncclBroadcast(buf, buf, bytes, ncclInt8, root, c, stream_);
                }));
}

Status NcclBackend::Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                              const std::vector<int64_t>& recv_bytes) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  Status s = DADT_NCCL_STATUS("alltoall group", ncclGroupStart());
  int64_t send_off = 0, recv_off = 0;
  for (int r = 0; r < size_ && s.ok(); ++r) {
    if (send_bytes[r] > 0) {
      s = Guarded("alltoall send", [&](ncclComm_t c) {
        const char* src = static_cast<const char*>(in) + send_off;
        return ncclSend(src, send_bytes[r], ncclInt8, r, c, stream_);
      });
    }
    if (s.ok() && recv_bytes[r] > 0) {
      s = Guarded("alltoall recv", [&](ncclComm_t c) {
        return ncclRecv(static_cast<char*>(out) + recv_off, recv_bytes[r], ncclInt8, r, c, stream_);
      });
    }
    send_off += send_bytes[r];
    recv_off += recv_bytes[r];
  }
  Status end = DADT_NCCL_STATUS("alltoall group", ncclGroupEnd());
  return Finish("alltoall", s.ok() ? end : s);
}

Status NcclBackend::Reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                  DataType dtype, ReduceOp op) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  ncclDataType_t type;
  ncclRedOp_t nop;
  DADT_RETURN_IF_ERROR(internal::NcclTypeAndOp(dtype, op, &type, &nop));
  bool equal = true;
  for (int64_t c : counts) equal = equal && c == counts[0];
  if (equal) {
    return Finish("reducescatter", Guarded("reducescatter", [&](ncclComm_t c) {
      return ncclReduceScatter(in, out, counts[0], type, nop, c, stream_);
    }));
  }
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  Status s = DADT_NCCL_STATUS("reducescatter group", ncclGroupStart());
  int64_t off = 0;
  for (int r = 0; r < size_ && s.ok(); ++r) {
    if (counts[r] > 0) {
      // recvbuff is only written on the root of each reduce.
      s = Guarded("reducescatter", [&](ncclComm_t c) {
        const char* src = static_cast<const char*>(in) + off * esize;
        return ncclReduce(src, out, counts[r], type, nop, r, c, stream_);
      });
    }
    off += counts[r];
  }
  Status end = DADT_NCCL_STATUS("reducescatter group", ncclGroupEnd());
  return Finish("reducescatter", s.ok() ? end : s);
}

Status NcclBackend::Barrier() {
  DADT_RETURN_IF_ERROR(CheckUsable());
  DADT_RETURN_IF_ERROR(Finish("barrier", Guarded("barrier", [&](ncclComm_t c) {
    return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, c, stream_);
  })));
  return Finish("barrier", DADT_CUDA_STATUS("barrier", cudaStreamSynchronize(stream_)));
}

namespace {
const bool kRegistered = BackendRegistry::Register("nccl", NcclBackend::Create);
}  // namespace

}  // namespace nccl
}  // namespace backends
}  // namespace dadt
