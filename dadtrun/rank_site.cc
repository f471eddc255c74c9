#include "dadtrun/rank_site.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {

StatusOr<SpawnedRank> StartRank(SpawnRequest request, const std::string& host, const RankSite& where,
                                int* control_fd, std::function<void(int)>* signal, int* exec_errno) {
  if (IsLocalHost(host, where.local_hostname)) return SpawnLocalRank(request, exec_errno);
  request.inherit_stdin = false;
  StatusOr<RemoteRank> remote =
      SpawnSshRank(request, host, where.ssh, where.ssh_env, where.cwd, where.forced_env);
  if (!remote.ok()) return remote.status();
  *control_fd = remote->control_fd;
  const pid_t ssh_pid = remote->spawned.pid;
  *signal = [control_fd, ssh_pid](int sig) {
    SignalRemoteRank(control_fd, sig);
    // Killing ssh too closes the connection, which is a SIGKILL there as well.
    if (sig == SIGKILL) ::kill(-ssh_pid, SIGKILL);
  };
  return remote->spawned;
}

SshOptions SshOptionsFor(const LaunchConfig& config) {
  SshOptions ssh;
  ssh.port = config.ssh_port;
  ssh.identity_file = config.ssh_identity_file;
  const int64_t start = config.start_timeout_seconds.value_or(env::kDefaultStartTimeoutSeconds);
  ssh.connect_timeout_seconds = static_cast<int>(std::clamp<int64_t>(start, 1, 10));
  return ssh;
}

Status CheckForwardedEnv(const LaunchConfig& config, const EnvMap& user_env) {
  for (const auto& [name, value] : config.forward_env) {
    if (!value && user_env.count(name) == 0) {
      return InvalidArgument("-x " + name + ": " + name +
                             " is not set in dadtrun's environment; set it or use -x " + name +
                             "=VALUE");
    }
  }
  return Status::OK();
}

RankSite RankSiteFor(const LaunchConfig& config, const std::string& local_hostname, const EnvMap& user_env) {
  RankSite where;
  where.local_hostname = local_hostname;
  where.ssh = SshOptionsFor(config);
  where.ssh_env = ToEnvStrings(user_env);
  for (const auto& kv : config.forward_env) where.forced_env.insert(kv.first);
  char cwd_buf[4096];
  where.cwd = ::getcwd(cwd_buf, sizeof(cwd_buf)) ? cwd_buf : "/";
  return where;
}

}  // namespace dadtrun
}  // namespace dadt
