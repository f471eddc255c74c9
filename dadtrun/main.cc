// dadtrun: the dadt launcher. Parsing lives in cli.cc and the job in launcher.cc.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dadtrun/cli.h"
#include "dadtrun/console.h"
#include "dadtrun/hosts.h"
#include "dadtrun/launcher.h"
#include "dadtrun/line_relay.h"
#include "dadtrun/mpi_spawner.h"
#include "dadtrun/slurm_task.h"
#include "dadtrun/store_task.h"
#include "dadtrun/worker_env.h"

int main(int argc, char** argv) {
  using dadt::dadtrun::CommandLine;
  const std::vector<std::string> args(argv + 1, argv + argc);
  // How `dadtrun --mpi` has mpirun start each rank (dadtrun/line_relay.h); not a user flag.
  if (!args.empty() && args[0] == dadt::dadtrun::kLineRelayFlag) {
    const size_t skip = args.size() > 1 && args[1] == "--" ? 2 : 1;
    // Each rank gets torchrun's per-rank variables from Open MPI's, as dadtrun's own spawners
    // give them (dadtrun/worker_env.h).
    dadt::StatusOr<dadt::dadtrun::EnvMap> torch_env =
        dadt::dadtrun::TorchEnvFromMpi(dadt::dadtrun::CurrentEnvironment());
    if (!torch_env.ok()) {
      dadt::dadtrun::console::Message(torch_env.status().message());
      return 2;
    }
    for (const auto& [name, value] : *torch_env) ::setenv(name.c_str(), value.c_str(), 1);
    return dadt::dadtrun::RunLineRelay({args.begin() + skip, args.end()});
  }
  // Inside the tasks of a Slurm step (dadtrun/slurm_task.h); not user flags.
  if (!args.empty() && args[0] == dadt::dadtrun::kSlurmTaskEnvFlag) {
    return dadt::dadtrun::RunSlurmTaskEnv();
  }
  // On rank 0 of a job that torchrun or Kubernetes started (dadtrun/store_task.h); not a user flag.
  if (!args.empty() && args[0] == dadt::dadtrun::kServeStoreFlag) {
    return dadt::dadtrun::RunServeStore();
  }
  if (!args.empty() && args[0] == dadt::dadtrun::kSlurmRankFlag) {
    const size_t skip = args.size() > 1 && args[1] == "--" ? 2 : 1;
    return dadt::dadtrun::RunSlurmRank({args.begin() + skip, args.end()});
  }
  dadt::StatusOr<CommandLine> cl =
      dadt::dadtrun::ParseCommandLine(args, dadt::dadtrun::LocalHostname());
  if (!cl.ok()) {
    dadt::dadtrun::console::Message(cl.status().message());
    return 2;
  }
  if (cl->action == CommandLine::Action::kCheckBuild) {
    std::fputs(dadt::dadtrun::CheckBuildText("").c_str(), stdout);
    return 0;
  }
  if (cl->action != CommandLine::Action::kRun) {
    std::fputs(cl->text.c_str(), stdout);
    return 0;
  }
  for (const std::string& notice : cl->config.notices) dadt::dadtrun::console::Message(notice);
  return dadt::dadtrun::Launch(cl->config);
}
