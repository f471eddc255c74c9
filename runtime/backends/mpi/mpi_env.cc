#include "runtime/backends/mpi/mpi_env.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "runtime/backends/mpi/mpi_error.h"

namespace dadt {
namespace backends {
namespace mpi {
namespace {

std::mutex g_init_mu;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

}  // namespace

bool IsInitialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

StatusOr<int> EnsureInitialized() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return PreconditionFailed("MPI has already been finalized in this process; dadt cannot use it");
  }
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    DADT_MPI_CHECK("init", MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(&FinalizeAtExit);  // runs after the interpreter's own exit handlers
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return PreconditionFailed("MPI was initialised with " + ThreadLevelName(provided) +
                              "; dadt makes MPI calls from its own thread and needs at least "
                              "MPI_THREAD_SERIALIZED (initialise MPI with MPI_THREAD_MULTIPLE, "
                              "as mpi4py does by default)");
  }
  return provided;
}

StatusOr<MPI_Comm> DupComm(uintptr_t native_comm, const char* purpose) {
  MPI_Comm base = native_comm == 0 ? MPI_COMM_WORLD : reinterpret_cast<MPI_Comm>(native_comm);
  if (base == MPI_COMM_NULL) {
    return InvalidArgument(std::string("the communicator given for the ") + purpose +
                           " is MPI_COMM_NULL (this process is not a member)");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  DADT_MPI_CHECK(purpose, MPI_Comm_dup(base, &dup));
  DADT_MPI_CHECK(purpose, MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  return dup;
}

StatusOr<JobGeometry> Geometry(MPI_Comm comm) {
  JobGeometry g;
  DADT_MPI_CHECK("comm_rank", MPI_Comm_rank(comm, &g.rank));
  DADT_MPI_CHECK("comm_size", MPI_Comm_size(comm, &g.size));
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  DADT_MPI_CHECK("split_type", MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, g.rank,
                                                   MPI_INFO_NULL, &local));
  Status s = DADT_MPI_STATUS("comm_rank", MPI_Comm_rank(local, &g.local_rank));
  if (s.ok()) s = DADT_MPI_STATUS("comm_size", MPI_Comm_size(local, &g.local_size));
  if (s.ok()) s = DADT_MPI_STATUS("split", MPI_Comm_split(comm, g.local_rank, g.rank, &cross));
  if (s.ok()) s = DADT_MPI_STATUS("comm_rank", MPI_Comm_rank(cross, &g.cross_rank));
  if (s.ok()) s = DADT_MPI_STATUS("comm_size", MPI_Comm_size(cross, &g.cross_size));
  if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
  MPI_Comm_free(&local);
  if (!s.ok()) return s;
  return g;
}

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
