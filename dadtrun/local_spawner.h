// Starts one rank on this machine: fork + execvpe with the rank's environment, stdout and stderr
// on pipes for the output multiplexer.
//
// Each rank leads its own process group (so a signal to the group reaches the rank's children too)
// and has PR_SET_PDEATHSIG=SIGKILL (so it dies if dadtrun is killed). Between fork and exec the
// child only makes async-signal-safe calls: dadtrun has other threads running by then.
// An exec failure is reported back over a close-on-exec pipe, so the caller learns synchronously
// that the command cannot run, with errno.
//
//   SpawnRequest req{0, {"python", "train.py"}, ToEnvStrings(env), original_mask, false};
//   int exec_errno = 0;
//   StatusOr<SpawnedRank> r = SpawnLocalRank(req, &exec_errno);
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

struct SpawnRequest {
  int rank = 0;
  std::vector<std::string> command;  // argv; command[0] is looked up in PATH
  std::vector<std::string> env;      // "NAME=value" entries: the rank's whole environment
  sigset_t child_sigmask;            // the mask the rank starts with (dadtrun's original one)
  bool inherit_stdin = false;        // otherwise stdin is /dev/null
  int stdin_fd = -1;                 // >= 0: the rank's stdin (wins over inherit_stdin)
};

struct SpawnedRank {
  int rank = 0;
  pid_t pid = -1;      // also the process group id
  int stdout_fd = -1;  // read ends, close-on-exec; the caller owns them
  int stderr_fd = -1;
};

// On failure to execute the command, `*exec_errno` is set to the errno of execvpe and the status
// names the command; the child has already been reaped.
StatusOr<SpawnedRank> SpawnLocalRank(const SpawnRequest& request, int* exec_errno);

}  // namespace dadtrun
}  // namespace dadt
