// Launch: runs one dadtrun job from a parsed LaunchConfig, on this machine and on other hosts over
// ssh, and returns the process exit code for dadtrun.
//
// Steps: place the ranks on the hosts (hosts.h); check every remote host over ssh at once
// (ssh_spawner.h); block the supervised signals; create the job secret; start the rendezvous server
// on 127.0.0.1 (one host) or on the chosen interface's address; pick MASTER_PORT; open output
// files; spawn every rank with its environment (worker_env.h), locally or over ssh; multiplex their
// output; supervise until all exit (supervisor.h), printing rendezvous progress across hosts; drain
// output; stop the server. An elastic job (config.elastic.enabled) goes to LaunchElastic instead
// (elastic_launch.h, docs/elastic.md).
//
//   StatusOr<CommandLine> cl = ParseCommandLine(args, LocalHostname());
//   return Launch(cl->config);
#pragma once

#include "dadtrun/cli.h"

namespace dadt {
namespace dadtrun {

// Exit code: 0 when every rank exited 0; the first failing rank's code (128+signal when killed);
// 128+signal when dadtrun itself was interrupted; 127/126 when the command cannot be executed;
// 1 for launcher errors (reported on stderr); 2 when a host cannot be reached, the interface does
// not exist or -x names an unset variable.
int Launch(const LaunchConfig& config);

}  // namespace dadtrun
}  // namespace dadt
