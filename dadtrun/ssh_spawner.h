// Starting ranks on other hosts over ssh, with the same environment contract as local ranks.
//
// A remote rank is a local `ssh` process (spawned like a local rank: own process group, output on
// pipes for the multiplexer, PR_SET_PDEATHSIG) running a small POSIX sh wrapper on the remote host.
// Nothing secret is on any command line: the wrapper reads, from the ssh session's stdin, a length
// line and then a script that exports the rank's environment (DADT_SECRET included), changes to
// dadtrun's working directory and sets the rank's argv. Then it:
//   * starts the rank with setsid (its own process group and session) and with SIGINT/SIGQUIT at
//     their defaults (a shell's background job would ignore them);
//   * keeps reading stdin: a line "TERM", "INT", "HUP" or "KILL" sends that signal to the rank's
//     process group, and EOF (dadtrun gone, ssh killed, connection lost) sends SIGKILL to it;
//   * exits with the rank's status (128+N for signal N, the shell's convention), which ssh returns.
// So stopping a remote rank is a line on its control pipe, and no process of the job outlives its
// ssh connection on any host.
//
//   SshOptions ssh{.port = 2222};
//   Status reach = CheckHostsReachable({"h2", "h3"}, ssh, std::chrono::seconds(30));
//   StatusOr<RemoteRank> r = SpawnSshRank(request, "h2", ssh, rank_env, cwd, forced_names);
//   SignalRemoteRank(r->control_fd, SIGTERM);
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "dadtrun/local_spawner.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

struct SshOptions {
  int port = 0;               // 0: ssh's own default (ssh_config, then 22)
  std::string identity_file;  // empty: ssh's own default
  int connect_timeout_seconds = 10;
};

// `s` single-quoted for a POSIX shell: the shell passes it on exactly, whatever it contains.
std::string ShellQuote(const std::string& s);

// "ssh -o BatchMode=yes -o ConnectTimeout=N [-p PORT] [-i FILE] -T HOST": every ssh dadtrun runs
// starts like this; the remote command follows.
std::vector<std::string> SshCommand(const SshOptions& options, const std::string& host);

// Runs `ssh ... HOST true` for every host at once. OK when all succeed; otherwise InvalidArgument
// naming every host that failed, each with the last line ssh printed, on one line. Hosts still
// unanswered after `deadline` count as failed.
Status CheckHostsReachable(const std::vector<std::string>& hosts, const SshOptions& options,
                           std::chrono::seconds deadline);

// The variables of `env` a remote rank gets: all whose names a shell can export, except those that
// describe the launching host or session (HOME, USER, SHELL, PWD, HOSTNAME, SSH_*, XDG_*, ...),
// which the remote login provides; names in `forced` (from -x) are exported regardless.
EnvMap RemoteEnvironment(const EnvMap& env, const std::set<std::string>& forced);

// The script the remote wrapper evaluates: exports, cd to `cwd` (exit 125 with a message naming
// `host` when it does not exist there), and `set --` with the rank's argv.
std::string RemoteRankScript(const EnvMap& env, const std::string& cwd,
                             const std::vector<std::string>& command, const std::string& host);

// What the wrapper reads first from its stdin: the script's length in bytes, a newline, the script.
std::string FrameScript(const std::string& script);

// The remote command line given to ssh (no secrets in it): "exec /bin/sh -c '<wrapper>' ...".
std::string RemoteWrapperCommand(int rank);

struct RemoteRank {
  SpawnedRank spawned;  // the local ssh process
  int control_fd = -1;  // write end of the ssh session's stdin; non-blocking, close-on-exec
};

// Starts `request.rank` on `host`: `request.command` and `request.env` are the rank's (they travel
// in the script); the local ssh process runs with `ssh_env`.
StatusOr<RemoteRank> SpawnSshRank(const SpawnRequest& request, const std::string& host,
                                  const SshOptions& options, const std::vector<std::string>& ssh_env,
                                  const std::string& cwd, const std::set<std::string>& forced_env);

// Asks the wrapper to send `sig` (SIGTERM, SIGINT, SIGHUP or SIGKILL) to the rank's process group.
// SIGKILL also closes the pipe, so the wrapper kills the group even if the line is lost. The caller
// ignores SIGPIPE (dadtrun does): the wrapper may have exited already.
void SignalRemoteRank(int* control_fd, int sig);

}  // namespace dadtrun
}  // namespace dadt
