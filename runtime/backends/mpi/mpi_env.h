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
//   auto comm = mpi::JobComm(native_comm, "controller");   // private MPI_ERRORS_RETURN copy
//   JobGeometry g = *mpi::JobGeometryOf(native_comm);
//
// Communicators per process, not per incarnation: creating one is a collective over the job
// (agreeing on a context id), and with more busy-polling ranks than cores Open MPI took 68-316 ms
// per MPI_Comm_dup/split (docs/performance.md, "Lifecycle"), which made init()/shutdown() cycles
// slow. So JobComm creates each of dadt's private communicators once per job communicator and
// keeps it, cached on that communicator as an MPI attribute (the way libraries keep an inner
// communicator per user communicator): every later incarnation reuses it, and it is freed when
// the user frees the job communicator, or at the start of MPI_Finalize (through an attribute on
// MPI_COMM_SELF, whose attributes MPI_Finalize deletes first) for MPI_COMM_WORLD's and those of
// user communicators still alive then. Reuse is safe
// because nothing of an incarnation is left on them when it ends: every collective the data plane
// starts completes on every rank before the loop ends, and the controller's Close drains its
// traffic pair by pair (mpi_control_transport.h, "Closing"). Every rank asks for the same
// communicators in the same order, the first time collectively (as MPI requires), later locally.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {
namespace mpi {

// The communicator behind a native handle: 0 is MPI_COMM_WORLD, anything else an MPI_Comm as
// mpi4py's MPI._handleof(comm) gives it: a pointer under Open MPI's ABI, an int under MPICH's
// (never 0 there: MPICH's handles carry a kind in their high bits).
MPI_Comm CommFromNative(uintptr_t native_comm);
// The inverse, for handing a communicator to BackendOptions::native_comm (tests, bindings).
uintptr_t NativeFromComm(MPI_Comm comm);

// Initialises MPI if needed (thread-safe, idempotent); returns the thread level MPI provides.
// Refuses a level below MPI_THREAD_SERIALIZED, and a finalised MPI, with a clear error. Before
// MPI_Init, refuses a launcher of the other ABI (CheckLauncherMatchesAbi): an MPI library started
// by a launcher it cannot talk to would come up as a singleton of size 1 on every rank.
StatusOr<int> EnsureInitialized();

// This build's MPI ABI: "Open MPI" (libmpi.so.40) or "MPICH" (libmpi.so.12: MPICH, Intel MPI).
const char* BuiltAbi();

// FailedPrecondition naming both sides when the launcher that started this process (its
// environment: OMPI_COMM_WORLD_SIZE for Open MPI's mpirun, PMI_SIZE for a Hydra launcher, i.e.
// MPICH's or Intel MPI's mpiexec/mpirun) is of the other ABI than this build; OK otherwise.
Status CheckLauncherMatchesAbi();

// True when MPI is initialised (by anyone) and not yet finalised.
bool IsInitialized();

// The communicator behind a native handle: 0 is MPI_COMM_WORLD, anything else an MPI_Comm
// (e.g. from mpi4py's MPI._handleof(comm)). Returns a private duplicate with MPI_ERRORS_RETURN,
// so that dadt's traffic never matches the user's messages; the caller frees it.
StatusOr<MPI_Comm> DupComm(uintptr_t native_comm, const char* purpose);

// dadt's private duplicate of the job communicator behind `native_comm` (as DupComm) for
// `purpose`, created on the first call for that communicator and purpose and returned by every
// later one (see above). The caller must not free it. Collective on the first call only.
StatusOr<MPI_Comm> JobComm(uintptr_t native_comm, const std::string& purpose);

// JobComm(native_comm, purpose) split by `color` (MPI_Comm_split, key = rank in it), for the
// sub-group of the job that `group` names on this rank (e.g. "local/0/"); cached the same way
// under (purpose, group, color). Every rank asks for its groups of a split at the same point.
StatusOr<MPI_Comm> JobSubComm(uintptr_t native_comm, const std::string& purpose,
                              const std::string& group, int color);

// Geometry(JobComm(native_comm, "controller")), computed once per job communicator.
StatusOr<JobGeometry> JobGeometryOf(uintptr_t native_comm);

// rank/size in `comm`; local = the ranks sharing this node's memory (MPI_Comm_split_type
// SHARED); cross = the ranks with the same local rank on every node.
StatusOr<JobGeometry> Geometry(MPI_Comm comm);

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
