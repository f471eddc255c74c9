#include "dadtrun/ssh_spawner.h"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "runtime/common/net/socket.h"

extern char** environ;

namespace dadt {
namespace dadtrun {
namespace {

// The remote wrapper, on one line and without single quotes (it travels single-quoted through
// whatever login shell the remote user has). See the header comment for what it does.
constexpr char kWrapper[] =
    "exec 3<&0 </dev/null; "
    "IFS= read -r n <&3 || exit 125; "
    "s=$(dd bs=1 count=\"$n\" <&3 2>/dev/null) || exit 125; "
    "eval \"$s\"; "
    "setsid -w env --default-signal=INT,QUIT \"$@\" 3<&- & p=$!; "
    "(while IFS= read -r c <&3; do case $c in TERM|INT|HUP|KILL) "
    "kill -s $c -- -$p 2>/dev/null || kill -s $c $p 2>/dev/null;; esac; done; "
    "kill -s KILL -- -$p 2>/dev/null) & w=$!; "
    "exec 3<&-; wait $p; r=$?; kill -s KILL -- -$p 2>/dev/null; kill $w 2>/dev/null; exit $r";

bool IsShellName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

bool DescribesLaunchingHost(const std::string& name) {
  static const char* const kNames[] = {"HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL",
                                       "HOSTNAME", "_", "MAIL", "TERM", "DISPLAY", "TMUX", "STY"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  for (const char* prefix : {"SSH_", "XDG_", "BASH_FUNC_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

bool WriteFully(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

struct Probe {
  std::string host;
  pid_t pid = -1;
  int err_fd = -1;
  std::string err;
  int wait_status = -1;
  bool done = false;
};

std::string LastLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t nl = text.rfind('\n');
  if (nl != std::string::npos) text = text.substr(nl + 1);
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

}  // namespace

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::vector<std::string> SshCommand(const SshOptions& options, const std::string& host) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes", "-o",
                                   "ConnectTimeout=" + std::to_string(options.connect_timeout_seconds)};
  if (options.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(options.port));
  }
  if (!options.identity_file.empty()) {
    argv.push_back("-i");
    argv.push_back(options.identity_file);
  }
  argv.push_back("-T");
  argv.push_back(host);
  return argv;
}

Status CheckHostsReachable(const std::vector<std::string>& hosts, const SshOptions& options,
                           std::chrono::seconds deadline) {
  std::vector<Probe> probes;
  for (const std::string& host : hosts) {
    Probe p;
    p.host = host;
    int err[2];
    if (::pipe2(err, O_CLOEXEC) != 0) return InternalError("pipe2: " + net::ErrnoText(errno));
    std::vector<std::string> argv_s = SshCommand(options, host);
    argv_s.push_back("true");
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    const int rc = posix_spawnp(&p.pid, "ssh", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(err[1]);
    if (rc != 0) {
      ::close(err[0]);
      for (Probe& q : probes) {
        ::kill(q.pid, SIGKILL);
        ::waitpid(q.pid, nullptr, 0);
        ::close(q.err_fd);
      }
      return InvalidArgument("cannot run ssh to reach the hosts: " + net::ErrnoText(rc) +
                             "; install an ssh client");
    }
    p.err_fd = err[0];
    probes.push_back(std::move(p));
  }
  // Collect stderr until every probe closed it (exited) or the deadline passed.
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Probe*> owners;
    for (Probe& p : probes) {
      if (p.err_fd >= 0) {
        fds.push_back({p.err_fd, POLLIN, 0});
        owners.push_back(&p);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buf[1024];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        if (owners[i]->err.size() < 16384) owners[i]->err.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(owners[i]->err_fd);
        owners[i]->err_fd = -1;
      }
    }
  }
  std::vector<std::string> failures;
  for (Probe& p : probes) {
    if (p.err_fd >= 0) {  // still running at the deadline
      ::kill(p.pid, SIGKILL);
      ::close(p.err_fd);
      ::waitpid(p.pid, nullptr, 0);
      failures.push_back(p.host + " (no answer within " + std::to_string(deadline.count()) + " s)");
      continue;
    }
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(p.pid, &status, 0);
    } while (r < 0 && errno == EINTR);
    if (r == p.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::string why = LastLine(p.err);
    if (why.empty()) {
      why = WIFSIGNALED(status) ? "ssh was killed by signal " + std::to_string(WTERMSIG(status))
                                : "ssh exited with code " + std::to_string(WEXITSTATUS(status));
    }
    failures.push_back(p.host + " (" + why + ")");
  }
  if (failures.empty()) return Status::OK();
  std::string text = "cannot reach " + std::to_string(failures.size()) + " of " +
                     std::to_string(hosts.size()) + " host(s) over ssh: ";
  for (size_t i = 0; i < failures.size(); ++i) text += (i ? ", " : "") + failures[i];
  text += "; check that each host resolves, runs sshd and that 'ssh -o BatchMode=yes HOST true' "
          "works without a password (see docs/troubleshooting.md)";
  return InvalidArgument(text);
}

EnvMap RemoteEnvironment(const EnvMap& env, const std::set<std::string>& forced) {
  EnvMap out;
  for (const auto& [name, value] : env) {
    if (!IsShellName(name)) continue;
    if (DescribesLaunchingHost(name) && forced.count(name) == 0) continue;
    out[name] = value;
  }
  return out;
}

std::string RemoteRankScript(const EnvMap& env, const std::string& cwd,
                             const std::vector<std::string>& command, const std::string& host) {
  std::string script;
  for (const auto& [name, value] : env) script += "export " + name + "=" + ShellQuote(value) + "\n";
  script += "cd " + ShellQuote(cwd) + " 2>/dev/null || { printf '%s\\n' " +
            ShellQuote("dadtrun: working directory " + cwd + " does not exist on host " + host) +
            " >&2; exit 125; }\n";
  script += "set --";
  for (const std::string& arg : command) script += " " + ShellQuote(arg);
  script += "\n";
  return script;
}

std::string FrameScript(const std::string& script) {
  return std::to_string(script.size()) + "\n" + script;
}

std::string RemoteWrapperCommand(int rank) {
  return std::string("exec /bin/sh -c '") + kWrapper + "' dadtrun-rank-" + std::to_string(rank);
}

StatusOr<RemoteRank> SpawnSshRank(const SpawnRequest& request, const std::string& host,
                                  const SshOptions& options, const std::vector<std::string>& ssh_env,
                                  const std::string& cwd, const std::set<std::string>& forced_env) {
  EnvMap rank_env;
  for (const std::string& e : request.env) {
    const size_t eq = e.find('=');
    if (eq != std::string::npos) rank_env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  const std::string script =
      RemoteRankScript(RemoteEnvironment(rank_env, forced_env), cwd, request.command, host);

  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return InternalError("pipe2: " + net::ErrnoText(errno));
  SpawnRequest ssh = request;
  ssh.command = SshCommand(options, host);
  ssh.command.push_back(RemoteWrapperCommand(request.rank));
  ssh.env = ssh_env;
  ssh.stdin_fd = in[0];
  int exec_errno = 0;
  StatusOr<SpawnedRank> spawned = SpawnLocalRank(ssh, &exec_errno);
  ::close(in[0]);
  if (!spawned.ok()) {
    ::close(in[1]);
    return InvalidArgument("cannot start ssh for rank " + std::to_string(request.rank) + " on " +
                           host + ": " + spawned.status().message());
  }
  // The script fits in the pipe for any ordinary environment; a bigger one waits for ssh to read
  // it. A failed write means ssh already exited, which the supervisor reports.
  WriteFully(in[1], FrameScript(script));
  ::fcntl(in[1], F_SETFL, ::fcntl(in[1], F_GETFL) | O_NONBLOCK);
  return RemoteRank{*spawned, in[1]};
}

void SignalRemoteRank(int* control_fd, int sig) {
  if (*control_fd < 0) return;
  const char* line = sig == SIGINT ? "INT\n" : sig == SIGHUP ? "HUP\n" : sig == SIGKILL ? "KILL\n" : "TERM\n";
  ssize_t ignored = ::write(*control_fd, line, std::char_traits<char>::length(line));
  (void)ignored;
  if (sig == SIGKILL) {
    ::close(*control_fd);
    *control_fd = -1;
  }
}

}  // namespace dadtrun
}  // namespace dadt
