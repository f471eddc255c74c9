#include "dadtrun/slurm_task.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dadtrun/console.h"
#include "dadtrun/rendezvous_server.h"
#include "dadtrun/slurm.h"
#include "dadtrun/slurm_join.h"
#include "dadtrun/store_task.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {

int RunSlurmTaskEnv() {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  const EnvMap env = CurrentEnvironment();
  StatusOr<std::optional<SlurmTask>> task = StepTask(env);
  if (!task.ok()) return PrintTaskError(task.status().message());
  if (!task->has_value() || (*task)->size == 1) {
    std::printf("READY\n");
    std::fflush(stdout);
    return 0;
  }
  const SlurmTask& t = **task;
  const std::string tasks = std::to_string(t.size);
  const std::string hint =
      "Export DADT_SECRET=$(openssl rand -hex 32) before srun (srun passes it to every task), or "
      "start the ranks with dadtrun inside the allocation (salloc/sbatch: dadtrun -np " +
      tasks + " ...). Without it each task would train alone";
  auto secret = env.find(env::kSecret);
  if (secret != env.end() && secret->second.size() < kMinSecretLength) {
    return PrintTaskError("Slurm step " + t.step + " has " + tasks + " tasks, and DADT_SECRET is " +
                          "shorter than " + std::to_string(kMinSecretLength) + " characters. " +
                          hint);
  }
  StatusOr<int> port = DirectLaunchPort(env, t);
  if (!port.ok()) return PrintTaskError(port.status().message());
  auto addr_it = env.find(env::kRendezvousAddr);
  const std::string addr = addr_it != env.end() ? addr_it->second : t.rank0_node;

  EnvMap out = SlurmRankEnvironment(t);
  std::unique_ptr<RendezvousServer> server;
  if (secret != env.end()) {
    if (t.rank == 0) {
      StatusOr<std::unique_ptr<RendezvousServer>> started =
          StartTaskStore(env, secret->second, *port);
      if (!started.ok()) {
        return PrintTaskError("rank 0 of Slurm step " + t.step + ": " +
                              started.status().message() +
                              "; if another job holds the port, set DADT_RENDEZVOUS_PORT to a "
                              "free port before srun");
      }
      server = std::move(*started);
    }
    out[env::kRendezvousPort] = std::to_string(*port);
  } else {
    // No secret from the user: task 0 makes one and hands it out through munge (slurm_join.h).
    StatusOr<JoinedStep> joined = JoinStepThroughMunge(env, t, addr, *port);
    if (!joined.ok()) {
      return PrintTaskError(
          "Slurm step " + t.step + " has " + tasks + " tasks, and DADT_SECRET is not set, so dadt " +
          "joins them through munge, which failed: " + joined.status().message() +
          ". Where munge cannot do it, export DADT_SECRET=$(openssl rand -hex 32) before srun, or " +
          "start the ranks with dadtrun inside the allocation (salloc/sbatch: dadtrun -np " + tasks +
          " ...); each task stops here rather than train alone");
    }
    server = std::move(joined->store);
    out[env::kSecret] = joined->secret;
    out[env::kRendezvousPort] = std::to_string(joined->store_port);
  }
  out[env::kController] = "gloo";
  out[env::kRendezvousAddr] = addr;
  for (const auto& [name, value] : out) std::printf("%s=%s\n", name.c_str(), value.c_str());
  std::printf("READY\n");
  std::fflush(stdout);
  if (server) {
    ServeUntilParentExits();
    server->Stop();
  }
  return 0;
}

int RunSlurmRank(const std::vector<std::string>& command) {
  if (command.empty()) {
    console::Message(std::string(kSlurmRankFlag) + ": no program given");
    return 2;
  }
  StatusOr<std::optional<SlurmTask>> task = StepTask(CurrentEnvironment());
  if (!task.ok()) {
    console::Message(task.status().message());
    return 2;
  }
  if (!task->has_value()) {
    console::Message(std::string(kSlurmRankFlag) +
                     " runs as a task of an srun step (SLURM_STEP_ID and SLURM_PROCID unset)");
    return 2;
  }
  for (const auto& [name, value] : SlurmRankEnvironment(**task)) {
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  console::Message("rank " + std::to_string((*task)->rank) + " on " + (*task)->node +
                   ": cannot run " + command[0] + ": " + std::strerror(errno));
  return 127;
}

}  // namespace dadtrun
}  // namespace dadt
