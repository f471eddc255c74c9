#include "dadtrun/munge.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "dadtrun/child_signals.h"

extern char** environ;

namespace dadt {
namespace dadtrun {
namespace {

// munge answers in milliseconds; a wedged munged must not hang the step.
constexpr auto kMungeTimeout = std::chrono::seconds(10);

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The last non-empty line of a program's stderr, for an error message.
std::string LastLine(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!Trim(line).empty()) last = Trim(line);
  }
  return last;
}

struct Ran {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

// Runs argv[0] from PATH with `input` on its stdin; at most kMungeTimeout.
StatusOr<Ran> RunWithInput(const std::vector<std::string>& argv, const std::string& input) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return InternalError("pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]);
    ::close(in_pipe[1]);
    return InternalError("pipe: " + std::string(std::strerror(errno)));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    return InternalError("pipe: " + std::string(std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  ResetChildSignals(&attr);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    for (int fd : {in_pipe[1], out_pipe[0], err_pipe[0]}) ::close(fd);
    if (rc == ENOENT) {
      return PreconditionFailed("munge is not installed here (no '" + argv[0] + "' program on PATH)");
    }
    return InternalError("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  // The input is a few hundred bytes: it fits the pipe, so writing it all first cannot deadlock.
  // A program that exits without reading it must not kill us with SIGPIPE: block it on this thread
  // and take the one the write raised before unblocking.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  size_t done = 0;
  while (done < input.size()) {
    const ssize_t n = ::write(in_pipe[1], input.data() + done, input.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the program exited early; its stderr says why
    done += static_cast<size_t>(n);
  }
  ::close(in_pipe[1]);
  const timespec zero = {0, 0};
  while (::sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  Ran ran;
  const auto deadline = std::chrono::steady_clock::now() + kMungeTimeout;
  bool out_open = true, err_open = true, timed_out = false;
  char buf[4096];
  while (out_open || err_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0}, {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    const int r = ::poll(fds, 2, static_cast<int>(left));
    if (r < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? ran.out : ran.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        (i == 0 ? out_open : err_open) = false;
      }
    }
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return TimeoutError(argv[0] + " did not answer within " +
                        std::to_string(kMungeTimeout.count()) + " s (is munged wedged?)");
  }
  ran.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

class MungeCliService : public CredentialService {
 public:
  explicit MungeCliService(std::string socket) : socket_(std::move(socket)) {}

  StatusOr<std::string> Encode(const std::string& payload,
                               std::optional<uid_t> restrict_uid) override {
    std::vector<std::string> argv = {"munge", "--cipher=aes128"};
    if (restrict_uid) argv.push_back("--restrict-uid=" + std::to_string(*restrict_uid));
    AddSocket(&argv);
    StatusOr<Ran> ran = RunWithInput(argv, payload);
    if (!ran.ok()) return ran.status();
    const std::string cred = Trim(ran->out);
    if (ran->exit_code != 0 || cred.empty()) return PreconditionFailed(Failure("munge", *ran));
    return cred;
  }

  StatusOr<MungeDecoded> Decode(const std::string& credential) override {
    std::vector<std::string> argv = {"unmunge", "--numeric", "--keys=UID"};
    AddSocket(&argv);
    StatusOr<Ran> ran = RunWithInput(argv, credential + "\n");
    if (!ran.ok()) return ran.status();
    if (ran->exit_code != 0) return PreconditionFailed(Failure("unmunge", *ran));
    return ParseUnmungeOutput(ran->out);
  }

 private:
  void AddSocket(std::vector<std::string>* argv) const {
    if (!socket_.empty()) argv->push_back("--socket=" + socket_);
  }

  std::string Failure(const std::string& program, const Ran& ran) const {
    std::string why = LastLine(ran.err);
    if (why.empty()) {
      why = program + (ran.exit_code < 0 ? std::string(" was killed by a signal")
                                         : " failed with exit code " + std::to_string(ran.exit_code));
    }
    return why + (socket_.empty() ? std::string() : " (munged socket " + socket_ + ", from Slurm's AuthInfo)");
  }

  const std::string socket_;
};

}  // namespace

std::unique_ptr<CredentialService> MungeCli(std::string socket) {
  return std::make_unique<MungeCliService>(std::move(socket));
}

std::string SlurmAuthInfoSocket(const std::string& conf_text) {
  std::istringstream in(conf_text);
  std::string line, socket;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = Trim(line);
    const size_t eq = line.find('=');
    if (eq == std::string::npos || Lower(Trim(line.substr(0, eq))) != "authinfo") continue;
    std::istringstream opts(Trim(line.substr(eq + 1)));
    std::string opt;
    while (std::getline(opts, opt, ',')) {
      opt = Trim(opt);
      if (Lower(opt.substr(0, 7)) == "socket=") socket = Trim(opt.substr(7));
    }
  }
  return socket;
}

std::string MungeSocketForSlurm(const EnvMap& env) {
  auto conf = env.find("SLURM_CONF");
  const std::string path =
      conf != env.end() && !conf->second.empty() ? conf->second : "/etc/slurm/slurm.conf";
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream text;
  text << f.rdbuf();
  return SlurmAuthInfoSocket(text.str());
}

StatusOr<MungeDecoded> ParseUnmungeOutput(const std::string& text) {
  const size_t blank = text.find("\n\n");
  if (blank == std::string::npos) {
    return InvalidArgument("unmunge printed no metadata block: '" + text.substr(0, 200) + "'");
  }
  MungeDecoded decoded;
  bool have_uid = false;
  std::istringstream meta(text.substr(0, blank));
  std::string line;
  while (std::getline(meta, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || Trim(line.substr(0, colon)) != "UID") continue;
    const std::string value = Trim(line.substr(colon + 1));
    char* end = nullptr;
    errno = 0;
    const unsigned long uid = std::strtoul(value.c_str(), &end, 10);
    if (value.empty() || errno != 0 || (*end != '\0' && !std::isspace(static_cast<unsigned char>(*end)))) {
      return InvalidArgument("unmunge printed UID '" + value + "', not a number");
    }
    decoded.uid = static_cast<uid_t>(uid);
    have_uid = true;
  }
  if (!have_uid) return InvalidArgument("unmunge printed no UID");
  decoded.payload = text.substr(blank + 2);
  if (!decoded.payload.empty() && decoded.payload.back() == '\n') decoded.payload.pop_back();
  return decoded;
}

}  // namespace dadtrun
}  // namespace dadt
