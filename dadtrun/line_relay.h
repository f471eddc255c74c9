// `dadtrun --line-relay -- PROGRAM ARGS...`: runs PROGRAM with its stdout and stderr on pipes and
// copies them to this process's stdout and stderr one whole line per write().
//
// Under `dadtrun --mpi`, main() first sets torchrun's per-rank variables from Open MPI's
// (TorchEnvFromMpi, worker_env.h), so PROGRAM sees RANK, LOCAL_RANK, GROUP_RANK, ... as under
// dadtrun's other spawners.
//
// mpirun's --tag-output prefixes every chunk it reads from a rank. A Python
// rank with PYTHONUNBUFFERED=1 writes `print("loss", x)` as four writes, which would come out as four
// tagged fragments. mpirun starts each rank through this relay instead, so every line arrives whole.
//
// The relay passes SIGINT/SIGTERM/SIGHUP on to PROGRAM, PROGRAM dies with the relay
// (PR_SET_PDEATHSIG), and the relay ends the way PROGRAM ended: the same exit code, or the same
// signal re-raised on itself, so that mpirun reports the rank's real status.
#pragma once

#include <string>
#include <vector>

namespace dadt {
namespace dadtrun {

// The hidden flag that selects the relay; it must be argv[1].
inline constexpr const char* kLineRelayFlag = "--line-relay";

// Splits `pending` at newlines: returns the complete lines (each with its '\n') and leaves the
// unfinished rest in `pending`.
std::vector<std::string> TakeCompleteLines(std::string* pending);

// Runs the relay for `command` (PROGRAM ARGS...); returns the exit code for main(), or does not
// return when PROGRAM died on a signal (the relay re-raises it).
int RunLineRelay(const std::vector<std::string>& command);

}  // namespace dadtrun
}  // namespace dadt
