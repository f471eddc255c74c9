// dadtrun's hidden modes that run inside the tasks of a Slurm step (dadtrun/slurm.h reads the step).
//
// `dadtrun --slurm-task-env` is how dadt's init() joins the tasks of a step that `srun` started
// without dadtrun (direct launch, docs/running.md "Running under Slurm"). Every task runs it and
// gets on stdout its part of the launcher -> worker contract, one NAME=VALUE line each, then a line
// READY; a task that cannot join prints one line "ERROR<TAB>message" instead. The step's rank 0
// (SLURM_PROCID 0) serves the job's rendezvous store on its node (every interface, or DADT_IFACE's),
// at the port every task derives from the job and step ids (or DADT_RENDEZVOUS_PORT), and the
// others reach it at the step's first node name (or DADT_RENDEZVOUS_ADDR). It starts serving
// before READY and keeps on until its standard input closes (the rank that started it has exited)
// or it gets SIGTERM. The job secret is DADT_SECRET from the environment when the user exported
// one (srun passes it to every task). Without it, rank 0 makes one and hands it to the other tasks
// through munge (dadtrun/slurm_join.h: each task proves its user with a munge credential, and only
// that user can decode the answer); the store then listens on a free port that the answer names,
// and DADT_SECRET is one of the printed lines. Without munge either, or with a task of another user,
// every task stops with an error instead of training as N one-rank jobs. A step of one task prints
// READY alone.
//
// `dadtrun --slurm-rank -- PROGRAM ARGS...` is how `dadtrun` inside an allocation has its one
// `srun` step start each rank: the job-wide part of the contract comes from dadtrun through srun's
// environment, this sets the per-rank part from the task's Slurm variables and execs PROGRAM.
#pragma once

#include <string>
#include <vector>

namespace dadt {
namespace dadtrun {

inline constexpr const char* kSlurmTaskEnvFlag = "--slurm-task-env";
inline constexpr const char* kSlurmRankFlag = "--slurm-rank";

// Returns main()'s exit code: 0 after READY (rank 0: once it has stopped serving), 2 after ERROR.
int RunSlurmTaskEnv();

// Does not return when PROGRAM starts; else 2 (not a task of a step, bad Slurm variables) or 127.
int RunSlurmRank(const std::vector<std::string>& command);

}  // namespace dadtrun
}  // namespace dadt
