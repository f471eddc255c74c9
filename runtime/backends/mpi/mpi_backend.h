// MpiBackend: dadt's CPU data plane over MPI (registered as "mpi").
//
// Created through BackendRegistry::Create("mpi", options); nothing outside this folder includes
// this header. The job's communicator is options.native_comm (0: MPI_COMM_WORLD; init(comm=...)
// passes a user communicator), duplicated so that dadt's collectives never match the user's own
// MPI traffic; the duplicate is made by the first incarnation and reused by the later ones
// (mpi_env.h, JobComm). Each collective is the MPI collective of the same name, so the algorithm is the
// one the MPI library picks for the size and the fabric (Open MPI's tuned component: recursive
// doubling for small allreduces, ring / Rabenseifner for large ones; shared memory on one node):
//
//   Allreduce      every rank on this host: dadt's shared-memory allreduce (shm/shm_allreduce.h,
//                  as Gloo's; 1.8x faster than Open MPI 4.1's MPI_Allreduce at 47.6 MiB, and it
//                  reduces a fused response's tensors where they lie, AllreducePieces;
//                  DADT_SHM_ALLREDUCE=0 turns it off). Otherwise MPI_Allreduce in place, in chunks
//                  of at most INT_MAX elements.
//   Allgatherv     MPI_Allgatherv on bytes (MPI_IN_PLACE when the input already sits in `out`).
//   Broadcast      MPI_Bcast on bytes, in chunks of at most INT_MAX bytes.
//   Alltoallv      MPI_Alltoallv on bytes.
//   Reducescatter  MPI_Reduce_scatter.
//   Barrier        MPI_Barrier.
//   Exchange       MPI_Irecv and MPI_Isend for every transfer, then MPI_Waitall; the tag is the
//                  coordinator's sequence number modulo 32768 (MPI's smallest MPI_TAG_UB), safe
//                  because messages between two ranks on one communicator never overtake.
//
// Aligned start: Allreduce, Allgatherv and Reducescatter of 1 MiB or more (in all) begin with an
// MPI_Barrier on the backend's communicator, so that every rank enters the collective at the same
// moment. Without it the coordinator, which starts a collective as soon as it has sent the
// response, is always the first to enter, and a worker probing for that response (any MPI call
// runs the progress engine) pulls in the coordinator's rendezvous header for the data before it
// has posted its own send. Open MPI's shared-memory transport then matches the header inside the
// worker's receive and performs the whole single-copy read (CMA) there, before the worker's own
// send goes out: the two ranks' copies run one after the other instead of at the same time. A
// 64 MiB allreduce at 2 ranks took 1.5x as long as MPI_Allreduce entered together; one probe of
// an unrelated communicator by a rank 100 us late reproduces it with mpi4py alone. The barrier
// costs a few microseconds on shared memory (a network round trip per log2(size) across hosts),
// small against the transfer at these sizes. Alltoallv's sizes differ from rank to rank, so no
// rank-independent size rule exists for it; Broadcast is a one-way tree and is not affected.
//
// Data types: int32, int64, float32 and float64 use MPI's own types and reduction ops (the
// vendor's vectorised kernels: the raw-MPI speed of the benchmark). float16, bfloat16 and bool
// have no MPI type with the semantics dadt needs, so they travel as opaque 2- or 1-byte types with
// user-defined reduction ops over dadt::ReduceBinary (bool: Sum/Max are logical or, Min/Product
// logical and, as on every backend). uint8 and int8 take the same road, because Open MPI 4.1's
// vectorised 8-bit sum is wrong in MPI_Reduce_scatter with uneven counts (mpi_datatypes.cc).
//
// Threading: like every Backend, called from one thread (the core's loop thread); MPI must be
// initialised with at least MPI_THREAD_SERIALIZED (mpi_env.h does it).
//
// Failure: MPI error codes are converted at this edge (mpi_error.h). After the first failure the
// backend is poisoned and every later call returns kAborted at once. A rank that dies under
// mpirun is reported by mpirun, which then ends every rank of the job.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/shm/shm_allreduce.h"

namespace dadt {
namespace backends {
namespace mpi {

class MpiBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  // A process set's backend (options.member_ranks): called by the set's members only.
  static StatusOr<std::unique_ptr<Backend>> CreateForMembers(const BackendOptions& options);
  ~MpiBackend() override;

  const char* Name() const override { return "MPI"; }
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  bool ReducesPieces() const override { return shm_ != nullptr; }
  Status AllreducePieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                         const AllreduceEpilogue& epilogue) override;
  void Abort() override;
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status Barrier() override;
  Status Exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                  uint32_t sequence) override;

 private:
  MpiBackend(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout, bool owns_comm = false)
      : comm_(comm), rank_(rank), size_(size), timeout_(timeout), owns_comm_(owns_comm) {}

  // Collective over comm_: when every rank of it is on this host (MPI_COMM_TYPE_SHARED), opens
  // the shared-memory allreduce, kept only if every rank could; otherwise logs why not (unless
  // `enabled` is false here). Fails only when MPI does.
  Status SetUpSharedMemory(bool enabled);

  Status CheckUsable() const;
  Status Finish(Status status);
  // MPI_Barrier before an exchanging collective of `bytes` in all, when that is large enough
  // ("Aligned start" above). Every rank passes the same `bytes`, so all or none enter it.
  Status AlignStart(int64_t bytes);
  // Per-rank sizes as MPI's int counts and displacements; refuses negative or > INT_MAX values.
  Status ToCounts(const char* what, const std::vector<int64_t>& v, std::vector<int>* counts,
                  std::vector<int>* displs) const;

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;  // the shared-memory allreduce's wait for a peer
  const bool owns_comm_;  // a process set's communicator; the job's is kept (mpi_env.h)
  Status broken_;
  std::vector<char> scratch_;  // Reducescatter's copy of an input that overlaps its output
  std::unique_ptr<shm::ShmAllreduce> shm_;  // null unless every rank is on this host
};

namespace internal {

// MPI's datatype and op for a dadt dtype and reduction (user-defined for float16, bfloat16, bool,
// uint8 and int8). Unimplemented for ops MPI does not reduce with (Average, Adasum).
Status MpiTypeAndOp(DataType dtype, ReduceOp op, MPI_Datatype* type, MPI_Op* mpi_op);

}  // namespace internal
}  // namespace mpi
}  // namespace backends
}  // namespace dadt
