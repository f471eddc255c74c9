// dadtrun --mpi: handing the launch to Open MPI's mpirun.
//
// mpirun starts the ranks (locally, or on the -H hosts through its own ssh/rsh agent) and MPI is
// both the controller and the data plane: each rank learns its rank, size, local and cross ranks
// from MPI (runtime/backends/mpi), so dadtrun passes only the job-wide part of the contract:
// DADT_CONTROLLER=mpi, the tuning knobs and torchrun's MASTER_ADDR/MASTER_PORT, forwarded with -x
// together with the user's environment (so remote hosts see the same PATH, PYTHONPATH,
// virtualenv, ...). Each rank starts through dadtrun's relay (line_relay.h), which sets torchrun's
// per-rank names (RANK, LOCAL_RANK, GROUP_RANK, ...) from Open MPI's before the program runs
// (TorchEnvFromMpi), so a plain torch.distributed script runs too. Inside a Slurm allocation,
// mpirun starts its daemons through srun (dadtrun/srun_spawner.h says when this path is taken).
//
// Failures stay loud: mpirun ends every rank when one exits non-zero or dies on a signal and
// names it; dadtrun then exits with mpirun's status and says so. dadtrun forwards SIGINT/SIGTERM/
// SIGHUP to mpirun, and mpirun gets SIGTERM if dadtrun itself dies (PR_SET_PDEATHSIG), so no
// rank outlives the launch.
//
//   std::vector<std::string> argv = MpirunCommand(config, env, /*is_root=*/true, /*cores=*/2);
//   int code = LaunchWithMpirun(config);
#pragma once

#include <string>
#include <vector>

#include "dadtrun/cli.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// True when this dadtrun was built together with the MPI engine.
bool MpiBuilt();

// The path of `mpirun` on PATH, or "" when there is none.
std::string FindMpirun();

// "auto" becomes "mpi" when MPI is built and mpirun is on PATH, else "gloo" (as horovodrun picks);
// "gloo" and "mpi" are returned as they are.
std::string ResolveController(const std::string& requested);

// The environment every rank gets under mpirun: `user_env` plus the job-wide contract (no
// per-rank names: MPI tells each rank where it is), torchrun's MASTER_ADDR/MASTER_PORT when
// `master_addr` is given, and kMpiHostOfRank, from which the relay that starts each rank derives
// torchrun's per-rank names (TorchEnvFromMpi).
EnvMap MpiWorkerEnvironment(const LaunchConfig& config, const EnvMap& user_env,
                            const std::string& master_addr = "", int master_port = 0);

// Splits --mpi-args like a shell would for words and quotes ('...', "...", backslash); no
// expansion. An unterminated quote is InvalidArgument.
StatusOr<std::vector<std::string>> SplitArgs(const std::string& text);

// The full mpirun command line: -np, -H (from the host list), --allow-run-as-root when root,
// --oversubscribe when the ranks on this machine exceed `cores`, --bind-to none (ranks that
// share cores with dadt's loop threads must not be pinned to one), --tag-output, -x NAME for
// every forwarded variable of `worker_env`, then --mpi-args, then the command. With `relay` (the
// path of this dadtrun) each rank runs as `relay --line-relay -- command`, so that mpirun's tags
// come one per line (dadtrun/line_relay.h).
StatusOr<std::vector<std::string>> MpirunCommand(const LaunchConfig& config,
                                                 const EnvMap& worker_env,
                                                 const std::string& mpirun, bool is_root,
                                                 int cores, const std::string& relay = "");

// Runs the job under mpirun; returns dadtrun's exit code.
int LaunchWithMpirun(const LaunchConfig& config);

// `dadtrun --check-build`: frameworks importable by `python`, controllers and tensor operations.
std::string CheckBuildText(const std::string& python);

}  // namespace dadtrun
}  // namespace dadt
