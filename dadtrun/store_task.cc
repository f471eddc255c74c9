#include "dadtrun/store_task.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "runtime/common/env.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {

int PrintTaskError(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::printf("ERROR\t%s\n", line.c_str());
  std::fflush(stdout);
  return 2;
}

StatusOr<std::string> TaskBindAddress(const EnvMap& env) {
  // DADT_IFACE, or Horovod's HOROVOD_GLOO_IFACE (runtime/common/env.h's alias table).
  const std::string iface = env::LookupIn(env, env::kIface);
  if (iface.empty()) return std::string("0.0.0.0");
  StatusOr<std::string> a = net::InterfaceAddress(iface);
  if (!a.ok()) return InvalidArgument(std::string(env::kIface) + ": " + a.status().message());
  return a;
}

StatusOr<std::unique_ptr<RendezvousServer>> StartTaskStore(const EnvMap& env,
                                                           const std::string& secret, int port) {
  StatusOr<std::string> bind_addr = TaskBindAddress(env);
  if (!bind_addr.ok()) return bind_addr.status();
  RendezvousServerOptions options;
  options.port = port;
  StatusOr<std::unique_ptr<RendezvousServer>> started =
      RendezvousServer::Start(*bind_addr, secret, options);
  if (!started.ok()) {
    return PreconditionFailed("cannot serve the rendezvous store on " + *bind_addr + ":" +
                       std::to_string(port) + " (" + started.status().message() + ")");
  }
  return started;
}

void ServeUntilParentExits() {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  sigaddset(&term, SIGHUP);
  sigprocmask(SIG_BLOCK, &term, nullptr);
  const int sfd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (sfd >= 0) {
    ::dup2(sfd, STDOUT_FILENO);  // the rank reads our stdout to its end: end it here
    ::close(sfd);
  }
  char buf[256];
  for (;;) {
    pollfd fd = {STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&fd, 1, 200);
    if (n > 0) {
      const ssize_t r = ::read(STDIN_FILENO, buf, sizeof(buf));
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return;
    }
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT) ||
        sigismember(&pending, SIGHUP)) {
      return;
    }
  }
}

int RunServeStore() {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  const EnvMap env = CurrentEnvironment();
  auto secret = env.find(env::kSecret);
  if (secret == env.end() || secret->second.size() < kMinSecretLength) {
    return PrintTaskError(std::string(kServeStoreFlag) + " serves a job's store only with a " +
                          "secret of at least " + std::to_string(kMinSecretLength) +
                          " characters in " + env::kSecret);
  }
  int port = 0;
  auto p = env.find(env::kRendezvousPort);
  if (p != env.end() && !p->second.empty()) {
    char* end = nullptr;
    const long v = std::strtol(p->second.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 65535) {
      return PrintTaskError(std::string(env::kRendezvousPort) + "='" + p->second +
                            "' is not a TCP port 0-65535 (0: any free port)");
    }
    port = static_cast<int>(v);
  }
  StatusOr<std::unique_ptr<RendezvousServer>> server = StartTaskStore(env, secret->second, port);
  if (!server.ok()) {
    return PrintTaskError(server.status().message() +
                          (port != 0 ? "; if another job holds the port, set " +
                                           std::string(env::kRendezvousPort) + " to a free one"
                                     : std::string()));
  }
  std::printf("%s=%d\n", env::kRendezvousPort, (*server)->port());
  std::printf("READY\n");
  std::fflush(stdout);
  ServeUntilParentExits();
  (*server)->Stop();
  return 0;
}

}  // namespace dadtrun
}  // namespace dadt
