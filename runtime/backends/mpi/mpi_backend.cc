#include "runtime/backends/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <string>

#include "runtime/backends/mpi/mpi_env.h"
#include "runtime/backends/mpi/mpi_error.h"
#include "runtime/common/logging.h"

namespace dadt {
namespace backends {
namespace mpi {
namespace {

// MPI counts are ints: larger buffers go in pieces of this many elements (or bytes).
constexpr int64_t kMaxChunk = INT_MAX;

// Exchanging collectives of at least this many bytes start with a barrier (mpi_backend.h,
// "Aligned start"). Below it the transfer is too short for the serialisation to cost more than
// the barrier's round trip.
constexpr int64_t kAlignedStartBytes = int64_t{1} << 20;

[[maybe_unused]] const bool kRegistered = BackendRegistry::Register("mpi", &MpiBackend::Create);

bool Overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> MpiBackend::Create(const BackendOptions& options) {
  auto level = EnsureInitialized();
  if (!level.ok()) return level.status();
  if (!options.member_ranks.empty()) return CreateForMembers(options);
  // The job's data-plane communicator (or its split for a sub-group, which store_prefix names),
  // created by the first incarnation and kept for the later ones (mpi_env.h, JobComm).
  auto comm = options.group_color >= 0
                  ? JobSubComm(options.native_comm, "backend", options.store_prefix,
                               options.group_color)
                  : JobComm(options.native_comm, "backend");
  if (!comm.ok()) return comm.status();
  int rank = -1, size = 0;
  MPI_Comm_rank(*comm, &rank);
  MPI_Comm_size(*comm, &size);
  if (rank != options.rank || size != options.size) {
    return PreconditionFailed(
        "the mpi executor needs a job launched by mpirun (dadtrun --mpi, or mpirun itself): this "
        "process is rank " + std::to_string(options.rank) + " of " + std::to_string(options.size) +
        " in the job but rank " + std::to_string(rank) + " of " + std::to_string(size) +
        " in its MPI communicator");
  }
  std::unique_ptr<MpiBackend> backend(new MpiBackend(*comm, rank, size, options.timeout));
  DADT_RETURN_IF_ERROR(backend->SetUpSharedMemory(options.shm_allreduce));
  return std::unique_ptr<Backend>(std::move(backend));
}

// A process set's backend: MPI_Comm_create_group is collective over the members only, unlike
// MPI_Comm_dup and MPI_Comm_split, which every rank of the job would have to call.
StatusOr<std::unique_ptr<Backend>> MpiBackend::CreateForMembers(const BackendOptions& options) {
  MPI_Comm job = CommFromNative(options.native_comm);
  MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  Status s = DADT_MPI_STATUS("comm_group", MPI_Comm_group(job, &all));
  if (s.ok()) {
    s = DADT_MPI_STATUS("group_incl",
                        MPI_Group_incl(all, static_cast<int>(options.member_ranks.size()),
                                       options.member_ranks.data(), &members));
  }
  if (s.ok()) {
    s = DADT_MPI_STATUS("comm_create_group",
                        MPI_Comm_create_group(job, members, options.member_tag, &comm));
  }
  if (s.ok()) {
    s = DADT_MPI_STATUS("set_errhandler", MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  }
  if (members != MPI_GROUP_NULL) MPI_Group_free(&members);
  if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
  if (!s.ok()) {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    return s;
  }
  int rank = -1, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::unique_ptr<MpiBackend> backend(new MpiBackend(comm, rank, size, options.timeout, /*owns_comm=*/true));
  DADT_RETURN_IF_ERROR(backend->SetUpSharedMemory(options.shm_allreduce));
  return std::unique_ptr<Backend>(std::move(backend));
}

Status MpiBackend::SetUpSharedMemory(bool enabled) {
  if (size_ < 2) return Status::OK();
  MPI_Comm node = MPI_COMM_NULL;
  DADT_RETURN_IF_ERROR(DADT_MPI_STATUS(
      "comm_split_type", MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node)));
  int on_this_host = 0;
  MPI_Comm_size(node, &on_this_host);
  MPI_Comm_free(&node);
  if (on_this_host != size_) return Status::OK();
  shm::ShmAllreduceOptions so;
  so.rank = rank_;
  so.size = size_;
  so.enabled = enabled;
  so.slots = 1;  // no forks: one collective at a time
  so.exchange = [this](const std::string&, const std::string& mine) -> StatusOr<std::vector<std::string>> {
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(size_), displs(size_, 0);
    DADT_RETURN_IF_ERROR(DADT_MPI_STATUS(
        "allgather", MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_)));
    for (int r = 1; r < size_; ++r) displs[r] = displs[r - 1] + lengths[r - 1];
    std::string all(static_cast<size_t>(displs.back() + lengths.back()), '\0');
    DADT_RETURN_IF_ERROR(DADT_MPI_STATUS(
        "allgatherv", MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                     displs.data(), MPI_CHAR, comm_)));
    std::vector<std::string> said(size_);
    for (int r = 0; r < size_; ++r) said[r] = all.substr(displs[r], lengths[r]);
    return said;
  };
  StatusOr<std::unique_ptr<shm::ShmAllreduce>> opened = shm::ShmAllreduce::Open(so);
  if (opened.ok()) {
    shm_ = std::move(*opened);
  } else if (opened.status().code() != StatusCode::kPreconditionFailed) {
    return Finish(opened.status());
  } else if (enabled) {
    DADT_LOG(WARNING) << "mpi: allreduce through MPI, not dadt's shared memory: " << opened.status().message()
                      << " (set DADT_SHM_ALLREDUCE=0 to silence)";
  }
  return Status::OK();
}

void MpiBackend::Abort() {
  if (shm_) shm_->Abort();  // peers waiting in shared memory fail fast too
}

Status MpiBackend::AllreducePieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                                   const AllreduceEpilogue& epilogue) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  if (!shm_) return Backend::AllreducePieces(pieces, dtype, op, epilogue);
  MPI_Datatype type;
  MPI_Op mpi_op;
  DADT_RETURN_IF_ERROR(internal::MpiTypeAndOp(dtype, op, &type, &mpi_op));  // the same refusals
  return Finish(shm_->AllreducePieces(0, pieces, dtype, op, epilogue, timeout_));
}

// The job's communicator (JobComm) is kept for the next incarnation and freed with the job
// communicator; a process set's (CreateForMembers) is this backend's own.
MpiBackend::~MpiBackend() {
  if (owns_comm_ && comm_ != MPI_COMM_NULL && IsInitialized()) MPI_Comm_free(&comm_);
}

Status MpiBackend::CheckUsable() const {
  if (broken_.ok()) return Status::OK();
  return Aborted("mpi backend is unusable after an earlier failure: " + broken_.message());
}

Status MpiBackend::Finish(Status status) {
  if (status.ok()) return status;
  broken_ = Status(status.code(), status.message() + " [rank " + std::to_string(rank_) + " of " +
                                      std::to_string(size_) + "]");
  return broken_;
}

Status MpiBackend::AlignStart(int64_t bytes) {
  if (size_ < 2 || bytes < kAlignedStartBytes) return Status::OK();
  return Finish(DADT_MPI_STATUS("barrier", MPI_Barrier(comm_)));
}

Status MpiBackend::ToCounts(const char* what, const std::vector<int64_t>& v,
                            std::vector<int>* counts, std::vector<int>* displs) const {
  if (static_cast<int>(v.size()) != size_) {
    return InvalidArgument(std::string(what) + ": expected " + std::to_string(size_) +
                           " per-rank entries, got " + std::to_string(v.size()));
  }
  counts->resize(size_);
  displs->resize(size_);
  int64_t offset = 0;
  for (int i = 0; i < size_; ++i) {
    if (v[i] < 0) {
      return InvalidArgument(std::string(what) + ": negative size " + std::to_string(v[i]) +
                             " for rank " + std::to_string(i));
    }
    if (v[i] > kMaxChunk || offset > kMaxChunk) {
      return Unimplemented(std::string(what) + ": the mpi backend moves at most 2 GiB per "
                           "collective here (MPI's int counts); got " + std::to_string(v[i]) +
                           " at offset " + std::to_string(offset) + " for rank " +
                           std::to_string(i));
    }
    (*counts)[i] = static_cast<int>(v[i]);
    (*displs)[i] = static_cast<int>(offset);
    offset += v[i];
  }
  return Status::OK();
}

Status MpiBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  if (count < 0) return InvalidArgument("negative element count " + std::to_string(count));
  MPI_Datatype type;
  MPI_Op mpi_op;
  DADT_RETURN_IF_ERROR(internal::MpiTypeAndOp(dtype, op, &type, &mpi_op));
  if (shm_) return Finish(shm_->Allreduce(0, buf, count, dtype, op, timeout_));
  char* p = static_cast<char*>(buf);
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  DADT_RETURN_IF_ERROR(AlignStart(count * width));
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min(count - done, kMaxChunk));
    DADT_RETURN_IF_ERROR(Finish(DADT_MPI_STATUS(
        "allreduce", MPI_Allreduce(MPI_IN_PLACE, p + done * width, n, type, mpi_op, comm_))));
    done += n;
  }
  return Status::OK();
}

Status MpiBackend::Allgatherv(const void* in, void* out,
                              const std::vector<int64_t>& bytes_per_rank) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  std::vector<int> counts, displs;
  DADT_RETURN_IF_ERROR(ToCounts("allgatherv", bytes_per_rank, &counts, &displs));
  char* dst = static_cast<char*>(out);
  const void* send = in == dst + displs[rank_] ? MPI_IN_PLACE : in;
  DADT_RETURN_IF_ERROR(AlignStart(
      std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), int64_t{0})));
  return Finish(DADT_MPI_STATUS(
      "allgatherv", MPI_Allgatherv(send, counts[rank_], MPI_BYTE, dst, counts.data(),
                                   displs.data(), MPI_BYTE, comm_)));
}

Status MpiBackend::Broadcast(void* buf, int64_t bytes, int root) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  if (root < 0 || root >= size_) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of " +
                           std::to_string(size_));
  }
  if (bytes < 0) return InvalidArgument("broadcast: negative size " + std::to_string(bytes));
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min(bytes - done, kMaxChunk));
    DADT_RETURN_IF_ERROR(
        Finish(DADT_MPI_STATUS("broadcast", MPI_Bcast(p + done, n, MPI_BYTE, root, comm_))));
    done += n;
  }
  return Status::OK();
}

Status MpiBackend::Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                             const std::vector<int64_t>& recv_bytes) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  std::vector<int> scounts, sdispls, rcounts, rdispls;
  DADT_RETURN_IF_ERROR(ToCounts("alltoallv send sizes", send_bytes, &scounts, &sdispls));
  DADT_RETURN_IF_ERROR(ToCounts("alltoallv receive sizes", recv_bytes, &rcounts, &rdispls));
  if (send_bytes[rank_] != recv_bytes[rank_]) {
    return InvalidArgument("alltoallv: rank " + std::to_string(rank_) + " sends itself " +
                           std::to_string(send_bytes[rank_]) + " bytes but expects " +
                           std::to_string(recv_bytes[rank_]));
  }
  return Finish(DADT_MPI_STATUS(
      "alltoallv", MPI_Alltoallv(in, scounts.data(), sdispls.data(), MPI_BYTE, out,
                                 rcounts.data(), rdispls.data(), MPI_BYTE, comm_)));
}

Status MpiBackend::Reducescatter(const void* in, void* out,
                                 const std::vector<int64_t>& recv_counts, DataType dtype,
                                 ReduceOp op) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  std::vector<int> counts, displs;
  DADT_RETURN_IF_ERROR(ToCounts("reducescatter", recv_counts, &counts, &displs));
  const int64_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  if (total > kMaxChunk) {
    return Unimplemented("reducescatter: the mpi backend reduces at most INT_MAX elements here");
  }
  MPI_Datatype type;
  MPI_Op mpi_op;
  DADT_RETURN_IF_ERROR(internal::MpiTypeAndOp(dtype, op, &type, &mpi_op));
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  // MPI forbids aliasing the send and receive buffers; copy an overlapping input first.
  if (Overlaps(in, total * width, out, recv_counts[rank_] * width)) {
    scratch_.assign(static_cast<const char*>(in), static_cast<const char*>(in) + total * width);
    in = scratch_.data();
  }
  DADT_RETURN_IF_ERROR(AlignStart(total * width));
  return Finish(DADT_MPI_STATUS(
      "reducescatter", MPI_Reduce_scatter(in, out, counts.data(), type, mpi_op, comm_)));
}

Status MpiBackend::Barrier() {
  DADT_RETURN_IF_ERROR(CheckUsable());
  return Finish(DADT_MPI_STATUS("barrier", MPI_Barrier(comm_)));
}

Status MpiBackend::Exchange(const std::vector<PeerBuffer>& sends,
                            const std::vector<PeerBuffer>& recvs, uint32_t sequence) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  for (const auto* list : {&sends, &recvs}) {
    for (const PeerBuffer& b : *list) {
      if (b.peer < 0 || b.peer >= size_ || b.peer == rank_ || b.bytes < 0 || b.bytes > kMaxChunk) {
        return InvalidArgument("exchange: rank " + std::to_string(rank_) + " cannot transfer " +
                               std::to_string(b.bytes) + " bytes with rank " +
                               std::to_string(b.peer) + " in a job of " + std::to_string(size_) +
                               " (the mpi backend moves at most INT_MAX bytes per message)");
      }
    }
  }
  const int tag = static_cast<int>(sequence % 32768);
  std::vector<MPI_Request> requests;
  requests.reserve(sends.size() + recvs.size());
  int rc = MPI_SUCCESS;
  for (const PeerBuffer& b : recvs) {
    requests.emplace_back();
    rc = MPI_Irecv(b.data, static_cast<int>(b.bytes), MPI_BYTE, b.peer, tag, comm_, &requests.back());
    if (rc != MPI_SUCCESS) break;
  }
  for (size_t i = 0; rc == MPI_SUCCESS && i < sends.size(); ++i) {
    const PeerBuffer& b = sends[i];
    requests.emplace_back();
    rc = MPI_Isend(b.data, static_cast<int>(b.bytes), MPI_BYTE, b.peer, tag, comm_, &requests.back());
  }
  if (rc == MPI_SUCCESS) {
    rc = MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }
  return Finish(DADT_MPI_STATUS("exchange", rc));
}

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
