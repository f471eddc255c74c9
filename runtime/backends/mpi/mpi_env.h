// The MPI library's process-wide state, seen from dadt: initialising it once, the thread level
// it granted, and the job geometry of a communicator.
//
// dadt calls MPI_Init_thread(MPI_THREAD_MULTIPLE) only when a job uses MPI (controller or data
// plane) and MPI is not initialised yet (mpi4py, for one, may have done it already: then dadt
// uses the thread level mpi4py obtained and leaves finalisation to it). When dadt initialised
// MPI, it finalises it at process exit. The runtime's loop thread makes every MPI call of a job
// while the framework thread that started it waits; MPI_THREAD_SERIALIZED is the least that
// allows this, and MPI_THREAD_MULTIPLE is needed when the user's program (mpi4py) makes MPI
// calls of its own at the same time.
//
//   DADT_ASSIGN_OR_RETURN... auto level = mpi::EnsureInitialized();
//   auto comm = mpi::DupComm(native_comm, "controller");   // private MPI_ERRORS_RETURN copy
//   JobGeometry g = *mpi::Geometry(*comm);
#pragma once

#include <mpi.h>

#include <cstdint>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {
namespace mpi {

// Initialises MPI if needed (thread-safe, idempotent); returns the thread level MPI provides.
// Refuses a level below MPI_THREAD_SERIALIZED, and a finalised MPI, with a clear error.
StatusOr<int> EnsureInitialized();

// True when MPI is initialised (by anyone) and not yet finalised.
bool IsInitialized();

// The communicator behind a native handle: 0 is MPI_COMM_WORLD, anything else an MPI_Comm
// (e.g. from mpi4py's MPI._handleof(comm)). Returns a private duplicate with MPI_ERRORS_RETURN,
// so that dadt's traffic never matches the user's messages; the caller frees it.
StatusOr<MPI_Comm> DupComm(uintptr_t native_comm, const char* purpose);

// rank/size in `comm`; local = the ranks sharing this node's memory (MPI_Comm_split_type
// SHARED); cross = the ranks with the same local rank on every node.
StatusOr<JobGeometry> Geometry(MPI_Comm comm);

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
