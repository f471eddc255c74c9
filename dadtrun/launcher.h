// Launch: runs one dadtrun job on this machine from a parsed LaunchConfig and returns the process
// exit code for dadtrun.
//
// Steps: block the supervised signals; create the job secret; start the rendezvous server on
// 127.0.0.1; pick MASTER_PORT; open output files; spawn every rank with its environment
// (worker_env.h); multiplex their output; supervise until all exit (supervisor.h); drain output;
// stop the server.
//
//   StatusOr<CommandLine> cl = ParseCommandLine(args, LocalHostname());
//   return Launch(cl->config);
#pragma once

#include "dadtrun/cli.h"

namespace dadt {
namespace dadtrun {

// Exit code: 0 when every rank exited 0; the first failing rank's code (128+signal when killed);
// 128+signal when dadtrun itself was interrupted; 127/126 when the command cannot be executed;
// 1 for launcher errors (reported on stderr).
int Launch(const LaunchConfig& config);

}  // namespace dadtrun
}  // namespace dadt
