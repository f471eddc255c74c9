// Backend: the interface every collective engine (Gloo, MPI, NCCL) implements.
//
// Threading: each Backend handle is called from one thread at a time, so an implementation needs
// no locking within a handle. The core owns one Backend for the host data plane, which its loop
// thread calls. When the engine can Fork() (Gloo) and the job has more than one rank, the core's
// lanes (runtime/core/lanes.h, DADT_GLOO_THREADS, 2 by default) each own a fork and call it from
// their own thread, so several forks run collectives at once over shared connections (see Fork()
// below); the loop thread then calls the original only after draining the lanes (join, barrier,
// mismatch errors). A device engine (NCCL) is a second Backend, owned by the DeviceExecutor and
// called from the loop thread; its AsyncError and Abort come from the device's completion thread.
// Each call is a blocking collective: every rank calls the same methods in the same order (the
// controller guarantees the order; on a fork, the lanes do), and the call returns when this rank's
// part is done. Errors come back as Status; foreign codes (gloo exceptions, MPI error ints,
// ncclResult_t) are converted at this edge by each engine's *_CHECK macros, with file:line.
//
// Lifetime: created by BackendRegistry::Create after the launcher's rendezvous is reachable;
// destroyed by the runtime at shutdown, on the loop thread.
//
//   auto backend = BackendRegistry::Create("gloo", options);
//   DADT_RETURN_IF_ERROR((*backend)->Allreduce(buf, n, DataType::kFloat32, ReduceOp::kSum));
//
// A method that a backend cannot serve for the given arguments returns Unimplemented, which is an
// ordinary answer the caller may route around.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {

struct BackendOptions : JobGeometry {
  // Network interface name (e.g. "eth0") or empty for the address of the hostname / loopback.
  std::string iface;
  // Timeout for each collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Timeout for connecting to the other ranks at start-up (0: use `timeout`).
  std::chrono::milliseconds connect_timeout{0};
  // Engines that pipeline large transfers (Gloo's all-gather and reduce-scatter rings): the
  // segment size in bytes, 0 for the engine's default. Others ignore it.
  int64_t segment_bytes = 0;
  // Engines that can reduce through shared memory when every rank is on this host (Gloo: see
  // gloo/shm_allreduce.h) do so unless this is false. Others ignore it.
  bool shm_allreduce = true;
  // Engines with threads of their own that move bytes (Gloo's transport thread) make them
  // real-time (runtime/common/thread_priority.h) where allowed. Others ignore it.
  bool realtime_threads = false;
  // Rendezvous store; outlives the backend's constructor only (backends copy what they need).
  KeyValueStore* store = nullptr;
  // Keys this backend writes are prefixed with this (e.g. "gloo/0/").
  std::string store_prefix;
  // The job secret: engines that open connections of their own (Gloo's pairs) prove it to each
  // other over them before first use (runtime/common/auth/keyed_proof.h).
  std::string secret;
  // An engine-specific communicator handle (MPI: the MPI_Comm of the job, cast to uintptr_t), or
  // 0 for the engine's default. Engines without communicators ignore it.
  uintptr_t native_comm = 0;
  // >= 0: this backend serves a sub-group of the job (rank/size above are within the group).
  // Every rank of the job creates its group's backend at the same point; engines with
  // communicators split the job's by this color (MPI_Comm_split), the others meet under
  // store_prefix, which names the group.
  int group_color = -1;
  // Not empty: this backend serves a process set (runtime/core/process_sets.h) of these global
  // ranks (ascending; rank/size above are within the set), and only its members create it.
  // Engines with communicators derive the set's from the job's, collectively over the members
  // only (MPI_Comm_create_group with `member_tag`, the set's registration sequence number); the
  // others meet under store_prefix, which names the set.
  std::vector<int> member_ranks;
  int member_tag = 0;
  // Engines for device memory (NCCL): the CUDA device ordinal and the stream (a cudaStream_t as
  // an integer) their collectives go on. -1 / 0 for host engines.
  int device = -1;
  uintptr_t device_stream = 0;
};

// One tensor of a fused allreduce that an engine reduces where it lies (Backend::AllreducePieces):
// `count` elements read from `in` (null: this rank contributes zeros, as a joined rank does) and
// the result written to `out` (null: not wanted here). `in` may equal `out`.
struct AllreducePiece {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;
};

// What is done to the reduced values before they are written out: multiplied by `scale` (unless
// 1), then divided by `divisor` (unless 1): the core's postscale, then Average's division, with
// the same kernels and so the same bits as when the core applies them afterwards.
struct AllreduceEpilogue {
  double scale = 1.0;
  int64_t divisor = 1;
};

// One side of a point-to-point transfer (Backend::Exchange): `bytes` bytes sent from, or received
// into, `data`, to or from global rank `peer`.
struct PeerBuffer {
  int peer = -1;
  void* data = nullptr;
  int64_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Upper-case engine name used in logs and timeline activity names ("GLOO", "MPI", "NCCL").
  virtual const char* Name() const = 0;

  // In place: buf holds `count` elements of dtype; after the call it holds the reduction over all
  // ranks. `op` is one of kSum, kMin, kMax, kProduct (Average is Sum + postscale in the core).
  virtual Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) = 0;

  // True when AllreducePieces can run now: the engine reads the pieces and writes the results in
  // place, so a fused allreduce needs no fusion buffer and no separate pass for the epilogue
  // (Gloo: through shared memory or its ring; MPI: through shared memory). The answer is the same
  // on every rank and for the handle's life.
  virtual bool ReducesPieces() const { return false; }
  // One-way bytes a second that the slowest link of the job moved when this backend connected,
  // for engines that measure it (Gloo across hosts); 0 when not measured.
  virtual double LinkBytesPerSecond() const { return 0; }
  // The allreduce of the pieces as if they were one buffer (their counts summed, in order), the
  // epilogue applied to the result. Only where ReducesPieces(); Unimplemented otherwise.
  virtual Status AllreducePieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                                 const AllreduceEpilogue& epilogue) {
    (void)pieces, (void)dtype, (void)op, (void)epilogue;
    return Unimplemented(std::string(Name()) + " reduces from a fusion buffer only");
  }

  // Every rank contributes `bytes_per_rank[rank]` bytes from `in`; `out` receives all ranks'
  // contributions concatenated in rank order (sum of bytes_per_rank bytes).
  virtual Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) = 0;

  // `bytes` bytes of buf on `root` are copied into buf on every rank.
  virtual Status Broadcast(void* buf, int64_t bytes, int root) = 0;

  // Rank r sends send_bytes[j] bytes (consecutive in `in`, in rank order) to rank j and receives
  // recv_bytes[j] bytes from rank j into `out` (consecutive, in rank order).
  virtual Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                           const std::vector<int64_t>& recv_bytes) = 0;

  // `in` holds sum(recv_counts) elements. Rank r receives into `out` the reduction over all ranks
  // of the recv_counts[r] elements that start at offset sum(recv_counts[0..r)).
  virtual Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                               DataType dtype, ReduceOp op) = 0;

  virtual Status Barrier() = 0;

  // Point to point: posts every send and receive at once and returns when all are done. Unlike
  // the collectives, only the ranks named take part: a send to rank j is matched by rank j's
  // receive from this rank in its call with the same `sequence`, a number both sides agree on
  // (the coordinator's, Response::root), distinct for every exchange in flight on this handle.
  // Messages between two ranks with one sequence are matched in the order they were posted.
  virtual Status Exchange(const std::vector<PeerBuffer>& sends,
                          const std::vector<PeerBuffer>& recvs, uint32_t sequence) {
    (void)sends, (void)recvs, (void)sequence;
    return Unimplemented(std::string(Name()) + " has no point-to-point transfers");
  }

  // Engines that finish work after the call returns (NCCL enqueues on a stream) report a failure
  // found later here; any thread may call it. Host engines finish inside the call: always OK.
  virtual Status AsyncError() { return Status::OK(); }
  // Makes every pending and later call fail instead of waiting for a peer (ncclCommAbort); any
  // thread may call it, once the job is known to be broken.
  virtual void Abort() {}

  // Another handle on this backend's connections, with a tag space of its own, whose collectives
  // may run on another thread at the same time as this one's (each handle is still called from
  // one thread at a time). Every rank must fork the same number of times, in the same order, and
  // run the same collectives on its n-th fork. Null (the default) where the engine runs one
  // collective at a time. Forks share this backend's failure: once one fails, all are unusable.
  // The forks must be destroyed before this backend.
  virtual std::unique_ptr<Backend> Fork() { return nullptr; }
};

using BackendFactory = std::function<StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)>;

// Backends register themselves at static-initialization time (their cc_library is alwayslink), so
// the core never includes a concrete backend header. The table is written only during static
// initialization and read afterwards.
class BackendRegistry {
 public:
  static bool Register(const std::string& name, BackendFactory factory);
  static StatusOr<std::unique_ptr<Backend>> Create(const std::string& name,
                                                   const BackendOptions& options);
  static std::vector<std::string> Names();
};

}  // namespace backends
}  // namespace dadt
