// Slurm's view of a job, read from the variables Slurm gives its processes: the node-list and
// tasks-per-node forms, the allocation (for `dadtrun` inside salloc/sbatch) and the place of one task
// of a step (for `srun` starting ranks, with or without dadtrun).
//
// Pure functions of an environment map, so every form is unit-tested without a cluster.
//
//   StatusOr<std::vector<std::string>> nodes = ExpandNodeList("node[01-03,07],gpu5");
//   // node01 node02 node03 node07 gpu5
//   StatusOr<std::vector<int>> tasks = ExpandTasksPerNode("2(x3),1");  // 2 2 2 1
//   StatusOr<std::optional<SlurmTask>> task = StepTask(CurrentEnvironment());
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dadtrun/hosts.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// Slurm's compressed host list: comma-separated entries, each a name with bracketed groups of
// numbers and ranges ("node[01-04,07]", "rack[1-2]-n[1-3]"). A range keeps the width of its lower
// bound ("[08-10]" -> 08 09 10). Entries expand in order; within an entry the rightmost group
// varies fastest. An unbalanced bracket, an empty group, a descending range or a non-number is
// InvalidArgument naming the list.
StatusOr<std::vector<std::string>> ExpandNodeList(const std::string& list);

// SLURM_TASKS_PER_NODE / SLURM_JOB_CPUS_PER_NODE: "2(x3),1" -> {2, 2, 2, 1}.
StatusOr<std::vector<int>> ExpandTasksPerNode(const std::string& spec);

// True inside an allocation (SLURM_JOB_ID set): salloc's shell, an sbatch script, a step's task.
bool InSlurmAllocation(const EnvMap& env);

// The allocation as dadtrun's host list: SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE as slots
// (SLURM_JOB_CPUS_PER_NODE when no task count was asked for). An error names the variable.
StatusOr<std::vector<HostSlots>> AllocationHosts(const EnvMap& env);

// One task of a step started by srun (SLURM_STEP_ID and SLURM_PROCID set), with dadt's geometry
// (Horovod's definitions, as PlaceRanks): local rank and size on its node, cross rank and size
// among the nodes that have a task with that local rank.
struct SlurmTask {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  int node_index = 0;             // SLURM_NODEID within the step
  int num_nodes = 1;
  std::string node;               // this task's node name
  std::string rank0_node;         // the node of task 0 (the first of the step's nodes)
  std::string step;               // "JOBID.STEPID"
};

// The task this process is, or nullopt when it is not a task of a step (salloc's shell, an sbatch
// script, no Slurm). Missing or malformed step variables are InvalidArgument naming them.
StatusOr<std::optional<SlurmTask>> StepTask(const EnvMap& env);

// The per-rank launcher -> worker contract (DADT_RANK .. DADT_CROSS_SIZE, DADT_HOSTNAME) and
// torchrun's per-rank names (RANK .. ROLE_WORLD_SIZE) for `task`.
EnvMap SlurmRankEnvironment(const SlurmTask& task);

// Direct launch (`srun python train.py`, no dadtrun): the rendezvous port every task of the step
// computes alike, DADT_RENDEZVOUS_PORT when set, else one derived from the job and step ids in
// 20000-39999 (two steps of one job running at once get different ports).
StatusOr<int> DirectLaunchPort(const EnvMap& env, const SlurmTask& task);

}  // namespace dadtrun
}  // namespace dadt
