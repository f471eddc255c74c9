#include "dadtrun/line_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace dadt {
namespace dadtrun {
namespace {

volatile sig_atomic_t g_child = 0;

void ForwardSignal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// One of PROGRAM's two streams: the read end of its pipe, where it goes, and the unfinished line.
struct Stream {
  int in = -1;
  int out = -1;
  std::string pending;
};

// Reads what is there; writes every complete line in one write(). False at end of stream.
bool Pump(Stream* s) {
  char buf[65536];
  const ssize_t n = ::read(s->in, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!s->pending.empty()) WriteAll(s->out, s->pending.data(), s->pending.size());
    s->pending.clear();
    return false;
  }
  s->pending.append(buf, static_cast<size_t>(n));
  for (const std::string& line : TakeCompleteLines(&s->pending)) {
    WriteAll(s->out, line.data(), line.size());
  }
  return true;
}

}  // namespace

std::vector<std::string> TakeCompleteLines(std::string* pending) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = pending->find('\n'); nl != std::string::npos; nl = pending->find('\n', start)) {
    lines.push_back(pending->substr(start, nl + 1 - start));
    start = nl + 1;
  }
  pending->erase(0, start);
  return lines;
}

int RunLineRelay(const std::vector<std::string>& command) {
  if (command.empty()) {
    std::fprintf(stderr, "dadtrun %s: no program given\n", kLineRelayFlag);
    return 2;
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "dadtrun %s: pipe: %s\n", kLineRelayFlag, std::strerror(errno));
    return 1;
  }
  struct sigaction sa = {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "dadtrun %s: fork: %s\n", kLineRelayFlag, std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the relay is already gone
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "dadtrun %s: cannot run %s: %s\n", kLineRelayFlag, argv[0],
                 std::strerror(errno));
    ::_exit(127);
  }
  g_child = pid;
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  Stream streams[2];
  streams[0].in = out_pipe[0];
  streams[0].out = STDOUT_FILENO;
  streams[1].in = err_pipe[0];
  streams[1].out = STDERR_FILENO;
  bool open[2] = {true, true};
  while (open[0] || open[1]) {
    pollfd fds[2];
    for (int i = 0; i < 2; ++i) fds[i] = {open[i] ? streams[i].in : -1, POLLIN, 0};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (open[i] && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) open[i] = Pump(&streams[i]);
    }
  }

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return 128 + sig;  // a signal that cannot end this process (none of the usual ones)
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace dadtrun
}  // namespace dadt
