// Starting one worker process here or on another host over ssh: what both the normal launcher
// (launcher.cc) and the elastic driver (elastic_launch.cc) need.
//
//   RankSite where = ...;  // local hostname, ssh options, ssh's environment, cwd, -x names
//   int control_fd = -1;
//   std::function<void(int)> signal;
//   StatusOr<SpawnedRank> r = StartRank(request, "h2", where, &control_fd, &signal, &exec_errno);
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "dadtrun/cli.h"
#include "dadtrun/local_spawner.h"
#include "dadtrun/ssh_spawner.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// What starting a rank needs besides its request: where "here" is and how to reach other hosts.
struct RankSite {
  std::string local_hostname;
  SshOptions ssh;
  std::vector<std::string> ssh_env;  // the local ssh processes' environment (dadtrun's own)
  std::string cwd;                   // remote ranks start there too
  std::set<std::string> forced_env;  // -x names, forwarded to remote ranks whatever they are
};

// Starts one rank on `host`: here, or over ssh. For a remote rank, `*control_fd` gets its control
// pipe (it must stay at that address while the rank runs) and `*signal` the hook that signals the
// rank through it; for a local one `*signal` is left empty.
StatusOr<SpawnedRank> StartRank(SpawnRequest request, const std::string& host, const RankSite& where,
                                int* control_fd, std::function<void(int)>* signal, int* exec_errno);

// ssh options from -p, -i and --start-timeout.
SshOptions SshOptionsFor(const LaunchConfig& config);

// Every -x NAME (no value) must name a variable dadtrun has.
Status CheckForwardedEnv(const LaunchConfig& config, const EnvMap& user_env);

// The RankSite of a launch from this machine.
RankSite RankSiteFor(const LaunchConfig& config, const std::string& local_hostname, const EnvMap& user_env);

}  // namespace dadtrun
}  // namespace dadt
