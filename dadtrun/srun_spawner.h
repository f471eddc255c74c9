// dadtrun inside a Slurm allocation (salloc, sbatch) with no -H/--hostfile: the hosts and slots are
// the allocation's, and the ranks start as one `srun` step, so no ssh is needed.
//
// dadtrun serves the rendezvous store here as it does for its own spawners and hands the job-wide
// contract (secret, rendezvous address, tuning knobs, MASTER_ADDR/PORT) to srun in its environment;
// srun starts every rank as `dadtrun --slurm-rank -- command` (slurm_task.h), which adds the per-rank
// part from the task's Slurm variables. Ranks go to the allocation's nodes in dadtrun's order
// (PlaceRanks) through an arbitrary-distribution host file. --kill-on-bad-exit ends the step when a
// rank fails; dadtrun then names the rank from srun's report, or says that the scheduler ended the
// job (scancel, a time limit). SIGINT/SIGTERM/SIGHUP to dadtrun go to srun, which passes them to
// every rank; srun still running 10 s later is killed, and Slurm then ends the step.
//
//   StatusOr<std::vector<HostSlots>> hosts = AllocationHosts(env);  // dadtrun/slurm.h
//   int code = LaunchWithSrun(config);                               // config.hosts = *hosts
#pragma once

#include <string>
#include <vector>

#include "dadtrun/cli.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// The path of `srun` on PATH, or "".
std::string FindSrun();

// srun's command line for the step: the task count, the node count, --kill-on-bad-exit,
// --distribution=arbitrary (the nodes come from SLURM_HOSTFILE, one line per rank), labelled
// output, no stdin, then `relay --slurm-rank -- command`.
std::vector<std::string> SrunCommand(const LaunchConfig& config, const std::string& srun,
                                     const std::string& relay);

// The SLURM_HOSTFILE text: rank r's node on line r (PlaceRanks order).
std::string SrunHostfile(const LaunchConfig& config);

// A line of srun's labelled output ("  3: text"): sets *rank and *text; false for srun's own lines.
bool ParseSrunLabel(const std::string& line, int* rank, std::string* text);

// What dadtrun says about a step that failed, from srun's own stderr lines: that the scheduler
// ended it (a CANCELLED line), or the first rank srun reports as failed ("rank 3 on host sn2 was
// killed (srun: task 3: Killed)"); "" when srun's lines say neither.
std::string DescribeSrunFailure(const std::vector<std::string>& srun_lines);

// Runs the job as one srun step inside the allocation; returns dadtrun's exit code.
int LaunchWithSrun(const LaunchConfig& config);

}  // namespace dadtrun
}  // namespace dadt
