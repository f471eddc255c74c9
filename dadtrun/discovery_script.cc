#include "dadtrun/discovery_script.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "dadtrun/child_signals.h"

extern char** environ;

namespace dadt {
namespace dadtrun {
namespace {

using Clock = std::chrono::steady_clock;

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string LastLine(const std::string& text) {
  std::string last;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!Trim(line).empty()) last = Trim(line);
  }
  return last;
}

// Reads both pipes until EOF on both or `deadline`; false on time-out.
bool ReadUntilEof(int out_fd, int err_fd, Clock::time_point deadline, std::string* out, std::string* err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {out, err};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        if (sinks[i]->size() < (1 << 20)) sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // the caller closes it
      }
    }
  }
  return true;
}

}  // namespace

StatusOr<std::vector<HostSlots>> ParseDiscoveryOutput(const std::string& text, int default_slots) {
  std::vector<HostSlots> hosts;
  std::istringstream in(text);
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.rfind(':');
    HostSlots h{line, default_slots};
    if (colon != std::string::npos) {
      h.host = line.substr(0, colon);
      const std::string slots = line.substr(colon + 1);
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(slots.c_str(), &end, 10);
      if (slots.empty() || *end != '\0' || errno != 0 || v < 1 || v > 1000000 || slots[0] == '+') {
        return InvalidArgument("line " + std::to_string(number) + " '" + line +
                               "': slots must be a positive integer (write host or host:slots)");
      }
      h.slots = static_cast<int>(v);
    }
    if (h.host.empty() || h.host.find_first_of(" \t") != std::string::npos) {
      return InvalidArgument("line " + std::to_string(number) + " '" + line +
                             "': not a host name (write host or host:slots)");
    }
    hosts.push_back(h);
  }
  return hosts;
}

StatusOr<std::vector<HostSlots>> RunDiscoveryScript(const std::string& script, int default_slots,
                                                    std::chrono::milliseconds timeout) {
  const std::string what = "host discovery script '" + script + "'";
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return InternalError(what + ": pipe: " + std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return InternalError(what + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a time-out kills all it started
  ResetChildSignals(&attr, POSIX_SPAWN_SETPGROUP);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = script;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return InternalError(what + ": cannot start /bin/sh: " + std::strerror(rc));
  }
  const auto deadline = Clock::now() + timeout;
  std::string out, err;
  bool finished = ReadUntilEof(out_pipe[0], err_pipe[0], deadline, &out, &err);
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  // Wait for the exit without reaping (WNOWAIT): the script's pid, and so its process group id,
  // stays taken until the group is killed below, so the kill can never reach another group.
  while (finished) {  // output closed; the script itself may still run
    siginfo_t info{};
    const int r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid) break;
    if (r < 0 && errno != EINTR) return InternalError(what + ": waitid: " + std::strerror(errno));
    if (Clock::now() >= deadline) finished = false;
    if (finished) ::usleep(5000);
  }
  ::kill(-pid, SIGKILL);  // whatever it left behind in its group, or the script itself
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string said = LastLine(err).empty() ? "" : " (its last stderr line: '" + LastLine(err) + "')";
  if (!finished) {
    std::ostringstream secs;
    secs << timeout.count() / 1000.0;
    return TimeoutError(what + " still running after " + secs.str() + " s; killed it" + said);
  }
  if (WIFSIGNALED(status)) {
    return Aborted(what + " was killed by signal " + std::to_string(WTERMSIG(status)) + said);
  }
  if (WEXITSTATUS(status) != 0) {
    return Aborted(what + " exited with code " + std::to_string(WEXITSTATUS(status)) + said);
  }
  StatusOr<std::vector<HostSlots>> hosts = ParseDiscoveryOutput(out, default_slots);
  if (!hosts.ok()) return InvalidArgument(what + " printed " + hosts.status().message());
  return hosts;
}

DiscoveryPoller::DiscoveryPoller(std::string script, int default_slots, std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds interval)
    : script_(std::move(script)), default_slots_(default_slots), timeout_(timeout), interval_(interval) {}

DiscoveryPoller::~DiscoveryPoller() { Stop(); }

void DiscoveryPoller::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void DiscoveryPoller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<StatusOr<std::vector<HostSlots>>> DiscoveryPoller::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<StatusOr<std::vector<HostSlots>>> out = std::move(latest_);
  latest_.reset();
  return out;
}

void DiscoveryPoller::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_for(lock, interval_, [this] { return stop_; })) break;
    lock.unlock();
    StatusOr<std::vector<HostSlots>> result = RunDiscoveryScript(script_, default_slots_, timeout_);
    lock.lock();
    latest_ = std::move(result);
  }
}

}  // namespace dadtrun
}  // namespace dadt
