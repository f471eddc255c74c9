// Converting MPI's integer error codes into dadt Status at the backend edge.
//
// Every communicator dadt creates has MPI_ERRORS_RETURN, so a failing MPI call returns a code
// instead of aborting the process; these macros turn the code into a Status that keeps the
// file:line of the call and the collective's name, the way NCCL's NCCLCHECK does:
//
//   DADT_MPI_CHECK("allreduce", MPI_Allreduce(MPI_IN_PLACE, buf, n, type, op, comm_));
//   Status s = DADT_MPI_STATUS("barrier", MPI_Barrier(comm_));
//
// Mapping (by MPI error class): MPI_ERR_ARG, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_OP,
// MPI_ERR_ROOT, MPI_ERR_RANK, MPI_ERR_BUFFER -> kInvalidArgument (the caller passed something
// MPI refuses); MPI_ERR_UNSUPPORTED_OPERATION -> kUnimplemented; anything else (a peer process
// failed, a transport broke, MPI_ERR_INTERN, MPI_ERR_OTHER) -> kAborted.
#pragma once

#include "runtime/common/status.h"

namespace dadt {
namespace backends {
namespace mpi {
namespace internal {

Status StatusFromMpiError(int code, const char* what, const char* file, int line);

}  // namespace internal
}  // namespace mpi
}  // namespace backends
}  // namespace dadt

// Evaluates to OK, or to the converted Status of the MPI call's return code.
#define DADT_MPI_STATUS(what, call)                                                       \
  ([&]() -> ::dadt::Status {                                                              \
    const int _dadt_mpi_rc = (call);                                                      \
    if (_dadt_mpi_rc == MPI_SUCCESS) return ::dadt::Status::OK();                         \
    return ::dadt::backends::mpi::internal::StatusFromMpiError(_dadt_mpi_rc, (what),      \
                                                               __FILE__, __LINE__);       \
  }())

// Returns the converted Status from the enclosing function if the MPI call failed.
#define DADT_MPI_CHECK(what, call) DADT_RETURN_IF_ERROR(DADT_MPI_STATUS(what, call))
