#include "dadtrun/local_spawner.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {
namespace {

void CloseFds(std::initializer_list<int> fds) {
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

// Runs in the forked child: async-signal-safe calls only, never returns.
[[noreturn]] void ExecChild(const SpawnRequest& req, pid_t parent, int out_w, int err_w,
                            int status_w, char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // dadtrun died before prctl took effect
  if (req.stdin_fd >= 0) {
    ::dup2(req.stdin_fd, STDIN_FILENO);
  } else if (!req.inherit_stdin) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, STDIN_FILENO);
      ::close(devnull);
    }
  }
  ::dup2(out_w, STDOUT_FILENO);
  ::dup2(err_w, STDERR_FILENO);
  // dadtrun ignores SIGPIPE and blocks the signals it supervises; ignored dispositions and the mask
  // survive exec, so give the rank the defaults a normal program expects.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
  ::sigprocmask(SIG_SETMASK, &req.child_sigmask, nullptr);
  ::execvpe(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = ::write(status_w, &err, sizeof(err));
  (void)ignored;
  ::_exit(127);
}

}  // namespace

StatusOr<SpawnedRank> SpawnLocalRank(const SpawnRequest& request, int* exec_errno) {
  *exec_errno = 0;
  if (request.command.empty()) return InvalidArgument("no command to run");
  // Everything the child needs is built before fork.
  std::vector<char*> argv, envp;
  for (const std::string& a : request.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(status, O_CLOEXEC) != 0) {
    const int e = errno;
    CloseFds({out[0], out[1], err[0], err[1], status[0], status[1]});
    return InternalError("pipe2: " + net::ErrnoText(e));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    CloseFds({out[0], out[1], err[0], err[1], status[0], status[1]});
    return InternalError("fork for rank " + std::to_string(request.rank) + ": " +
                         net::ErrnoText(e));
  }
  if (pid == 0) ExecChild(request, parent, out[1], err[1], status[1], argv.data(), envp.data());

  ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
  CloseFds({out[1], err[1], status[1]});
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(status[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(status[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {  // exec failed; EOF means it succeeded
    ::waitpid(pid, nullptr, 0);
    CloseFds({out[0], err[0]});
    *exec_errno = child_errno;
    return InvalidArgument("cannot execute '" + request.command[0] +
                           "': " + net::ErrnoText(child_errno));
  }
  return SpawnedRank{request.rank, pid, out[0], err[0]};
}

}  // namespace dadtrun
}  // namespace dadt
