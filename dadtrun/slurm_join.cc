#include "dadtrun/slurm_join.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "dadtrun/store_task.h"
#include "runtime/common/env.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kJoinMagic[] = "DADT-JOIN";
constexpr size_t kMaxRequestBytes = 16 << 10;        // a credential is a few hundred bytes
constexpr auto kRequestTimeout = std::chrono::seconds(10);  // from connecting to a whole request
constexpr size_t kMaxPendingConnections = 256;       // a flood closes the oldest, not the listener
constexpr auto kConnectRetry = milliseconds(200);

std::string JoinPayload(const std::string& step, int task) {
  return "dadt-slurm-join step=" + step + " task=" + std::to_string(task);
}

std::string SecretPayload(const std::string& step, int task, int port, const std::string& secret) {
  return "dadt-slurm-secret step=" + step + " task=" + std::to_string(task) +
         " port=" + std::to_string(port) + " secret=" + secret;
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.size() > 1000 ? s.substr(0, 1000) : s;
}

int ToInt(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
  }
  return std::atoi(s.c_str());
}

std::string PeerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

// Best effort: the other side may be gone, and an answer is a few hundred bytes.
void AnswerAndClose(int fd, const std::string& line) {
  (void)net::SendAll(fd, line, Clock::now() + std::chrono::seconds(2));
  ::close(fd);
}

struct Asker {
  int fd = -1;
  std::string peer;
  std::string in;
  Clock::time_point since;
};

}  // namespace

Status HandOutSecret(CredentialService& munge, const SlurmTask& task, uid_t uid, int listen_fd,
                     const SecretToHandOut& handout, milliseconds timeout) {
  const std::string& step = task.step;
  const std::string where = "Slurm step " + step;
  const auto deadline = Clock::now() + timeout;
  std::optional<std::string> failure;
  if (!handout.failure.empty()) failure = handout.failure;
  if (!failure) {
    // Without munge here no answer could be sealed: find out now, and tell each task as it asks.
    StatusOr<std::string> probe = munge.Encode(JoinPayload(step, 0), uid);
    if (!probe.ok()) {
      failure = "task 0 (on " + task.node + ") cannot get a munge credential: " +
                probe.status().message();
    }
  }
  std::vector<Asker> pending;      // connected, request not complete
  std::map<int, Asker> asked;      // task -> its connection, waiting for the answer
  std::set<int> told;              // tasks answered with the failure
  const int others = task.size - 1;

  auto fail = [&](const std::string& why) {
    if (!failure) failure = why;
  };
  // Step 3 for one complete request; keeps the connection in `asked` unless it is turned away.
  auto take = [&](Asker a) {
    const size_t nl1 = a.in.find('\n');
    const size_t nl2 = a.in.find('\n', nl1 + 1);
    std::istringstream head(a.in.substr(0, nl1));
    std::string magic, their_step, task_text;
    head >> magic >> their_step >> task_text;
    if (magic != kJoinMagic) {
      ::close(a.fd);
      return;
    }
    if (their_step != step) {
      AnswerAndClose(a.fd, "ERROR\tthis port serves task 0 of Slurm step " + step + ", not of " +
                               OneLine(their_step) + "\n");
      return;
    }
    const int k = ToInt(task_text);
    if (k < 1 || k >= task.size) {
      AnswerAndClose(a.fd, "ERROR\t" + where + " has no task " + OneLine(task_text) + " to join\n");
      return;
    }
    const std::string who = "task " + std::to_string(k) + " of " + where + " (from " + a.peer + ")";
    if (asked.count(k) || told.count(k)) {
      fail("two processes asked for the job secret as task " + std::to_string(k) + " of " + where +
           ", the second from " + a.peer);
      AnswerAndClose(a.fd, "ERROR\t" + OneLine(*failure) + "\n");
      return;
    }
    const std::string proof = a.in.substr(nl1 + 1, nl2 - nl1 - 1);
    if (proof.rfind("CRED ", 0) == 0) {
      StatusOr<MungeDecoded> got = munge.Decode(proof.substr(5));
      if (!got.ok()) {
        fail(who + " sent a munge credential that munge refuses: " + got.status().message());
      } else if (got->uid != uid) {
        fail(who + " runs as uid " + std::to_string(got->uid) + " (its munge credential says so), " +
             "task 0 as uid " + std::to_string(uid) +
             ": the tasks of one step must all run as one user");
      } else if (got->payload != JoinPayload(step, k)) {
        fail(who + " sent a munge credential for '" + OneLine(got->payload) + "', not for '" +
             JoinPayload(step, k) + "'");
      }
    } else if (proof.rfind("NOCRED ", 0) == 0) {
      fail(who + " cannot get a munge credential: " + OneLine(proof.substr(7)));
    } else {
      ::close(a.fd);
      return;
    }
    asked.emplace(k, std::move(a));
  };

  for (;;) {
    if (failure) {
      for (auto& [k, a] : asked) {
        AnswerAndClose(a.fd, "ERROR\t" + OneLine(*failure) + "\n");
        told.insert(k);
      }
      asked.clear();
      if (static_cast<int>(told.size()) == others) break;
    } else if (static_cast<int>(asked.size()) == others) {
      // Step 4: seal every answer first, so that either all tasks get the secret or none does.
      std::map<int, std::string> sealed;
      for (const auto& [k, a] : asked) {
        StatusOr<std::string> cred =
            munge.Encode(SecretPayload(step, k, handout.store_port, handout.secret), uid);
        if (!cred.ok()) {
          fail("task 0 (on " + task.node + ") cannot seal the job secret with munge: " +
               cred.status().message());
          break;
        }
        sealed[k] = *cred;
      }
      if (!failure) {
        for (auto& [k, a] : asked) AnswerAndClose(a.fd, "SECRET " + sealed[k] + "\n");
        asked.clear();
        for (Asker& p : pending) ::close(p.fd);
        return Status::OK();
      }
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      if (!failure) {
        std::string missing;
        int count = 0;
        for (int k = 1; k < task.size; ++k) {
          if (asked.count(k)) continue;
          if (count++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
        }
        if (count > 16) missing += " and " + std::to_string(count - 16) + " more";
        fail("task(s) " + missing + " of " + where + " did not ask task 0 (on " + task.node +
             ") for the job secret within " + std::to_string(timeout.count() / 1000) +
             " s (DADT_START_TIMEOUT); did they start, and can they reach " + task.node + "?");
        continue;  // tell the ones that asked
      }
      break;
    }
    // Requests that take too long are closed: a slow or idle peer cannot hold a slot.
    for (size_t i = 0; i < pending.size();) {
      if (now - pending[i].since > kRequestTimeout) {
        ::close(pending[i].fd);
        pending.erase(pending.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({listen_fd, POLLIN, 0});
    for (const Asker& p : pending) fds.push_back({p.fd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - now).count();
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long>(left, 200)));
    if (r < 0 && errno != EINTR) return InternalError("poll: " + net::ErrnoText(errno));
    if (r <= 0) continue;
    std::vector<Asker> complete;
    for (size_t i = fds.size() - 1; i >= 1; --i) {
      if (fds[i].revents == 0) continue;
      Asker& p = pending[i - 1];
      char buf[4096];
      const ssize_t n = ::recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
      bool drop = n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
      if (n > 0) p.in.append(buf, static_cast<size_t>(n));
      if (p.in.size() > kMaxRequestBytes) drop = true;
      const size_t nl1 = p.in.find('\n');
      const bool whole = nl1 != std::string::npos && p.in.find('\n', nl1 + 1) != std::string::npos;
      if (whole && !drop) {
        complete.push_back(std::move(p));
      } else if (drop) {
        ::close(p.fd);
      }
      if (whole || drop) pending.erase(pending.begin() + static_cast<long>(i - 1));
    }
    for (Asker& a : complete) take(std::move(a));
    if (fds[0].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or out of descriptors: the next round retries
        if (pending.size() >= kMaxPendingConnections) {
          ::close(pending.front().fd);
          pending.erase(pending.begin());
        }
        pending.push_back({fd, PeerOf(fd), std::string(), Clock::now()});
      }
    }
  }
  for (Asker& p : pending) ::close(p.fd);
  return PreconditionFailed(*failure);
}

namespace {

// One line (without '\n') from `fd`, by `deadline`.
StatusOr<std::string> ReadLine(int fd, Clock::time_point deadline) {
  std::string line;
  char c;
  for (;;) {
    Status s = net::RecvAll(fd, &c, 1, deadline);
    if (!s.ok()) return s;
    if (c == '\n') return line;
    line.push_back(c);
    if (line.size() > kMaxRequestBytes) return InvalidArgument("an answer line over 16 KiB");
  }
}

StatusOr<JoinAnswer> ParseSecretPayload(const std::string& payload, const std::string& step,
                                        int task) {
  std::istringstream in(payload);
  std::string word;
  std::map<std::string, std::string> fields;
  in >> word;
  if (word != "dadt-slurm-secret") return InvalidArgument("not a dadt job secret");
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  if (fields["step"] != step || fields["task"] != std::to_string(task)) {
    return InvalidArgument("it is for task " + OneLine(fields["task"]) + " of step " +
                           OneLine(fields["step"]) + ", not task " + std::to_string(task) +
                           " of step " + step);
  }
  JoinAnswer answer;
  answer.secret = fields["secret"];
  answer.store_port = ToInt(fields["port"]);
  if (answer.secret.size() < kMinSecretLength || answer.store_port < 1 ||
      answer.store_port > 65535) {
    return InvalidArgument("it holds no usable secret and store port");
  }
  return answer;
}

}  // namespace

StatusOr<JoinAnswer> AskForSecret(CredentialService& munge, const SlurmTask& task, uid_t uid,
                                  const std::string& addr, int port, milliseconds timeout) {
  const std::string me = "task " + std::to_string(task.rank) + " (on " + task.node + ")";
  const std::string there = addr + ":" + std::to_string(port);
  StatusOr<std::string> cred = munge.Encode(JoinPayload(task.step, task.rank), std::nullopt);
  const std::string request = std::string(kJoinMagic) + " " + task.step + " " +
                              std::to_string(task.rank) + "\n" +
                              (cred.ok() ? "CRED " + *cred
                                         : "NOCRED " + OneLine(cred.status().message())) +
                              "\n";
  const auto connect_deadline = Clock::now() + timeout;
  int fd = -1;
  std::string last_error;
  for (;;) {
    StatusOr<int> c = net::ConnectTcp(addr, port);
    if (c.ok()) {
      fd = *c;
      break;
    }
    last_error = c.status().message();
    if (Clock::now() + kConnectRetry >= connect_deadline) break;
    std::this_thread::sleep_for(kConnectRetry);
  }
  if (fd >= 0) {
    // Sent even without a credential, so that task 0 stops the step at once rather than waiting.
    Status sent = net::SendAll(fd, request, Clock::now() + std::chrono::seconds(10));
    if (!sent.ok() && cred.ok()) {
      ::close(fd);
      return Aborted(me + " could not ask task 0 at " + there + " for the job secret: " +
                     sent.message());
    }
  }
  if (!cred.ok()) {
    if (fd >= 0) ::close(fd);
    return PreconditionFailed(me + " cannot get a munge credential: " + cred.status().message());
  }
  if (fd < 0) {
    return TimeoutError("task 0 of Slurm step " + task.step + " did not answer at " + there +
                        " within " + std::to_string(timeout.count() / 1000) +
                        " s (DADT_START_TIMEOUT; last: " + last_error + ")");
  }
  // Task 0 answers once every task has asked, by its own time-out; allow for it starting later.
  StatusOr<std::string> line = ReadLine(fd, Clock::now() + timeout + std::chrono::seconds(5));
  ::close(fd);
  if (!line.ok()) {
    return Aborted("task 0 of Slurm step " + task.step + " at " + there +
                   " gave no answer: " + line.status().message());
  }
  if (line->rfind("ERROR\t", 0) == 0) {
    return PreconditionFailed("task 0 (at " + there + ") answered: " + line->substr(6));
  }
  if (line->rfind("SECRET ", 0) != 0) {
    return InvalidArgument("the process at " + there + " is not task 0 of Slurm step " +
                           task.step + " (it answered '" + OneLine(line->substr(0, 80)) + "')");
  }
  StatusOr<MungeDecoded> got = munge.Decode(line->substr(7));
  if (!got.ok()) {
    return PreconditionFailed("the answer from " + there + " is not a munge credential for " + me +
                              "'s user (" + got.status().message() +
                              "); is another user's process holding the port?");
  }
  if (got->uid != uid) {
    return PreconditionFailed("the process answering at " + there + " runs as uid " +
                              std::to_string(got->uid) + ", not as this task's uid " +
                              std::to_string(uid) + " (its munge credential says so): it is not " +
                              "task 0 of this step, and its secret is not used");
  }
  StatusOr<JoinAnswer> answer = ParseSecretPayload(got->payload, task.step, task.rank);
  if (!answer.ok()) {
    return InvalidArgument("the answer from " + there + " is not " + me + "'s job secret: " +
                           answer.status().message());
  }
  return answer;
}

StatusOr<JoinedStep> JoinStepThroughMunge(const EnvMap& env, const SlurmTask& task,
                                          const std::string& addr, int port) {
  std::unique_ptr<CredentialService> munge = MungeCli(MungeSocketForSlurm(env));
  // The process's own environment, through env.h's reader (one rule for the knob and its aliases);
  // a malformed value is the runtime's error to report at init, here the default serves.
  StatusOr<int64_t> seconds =
      env::GetInt(env::kStartTimeout, env::kDefaultStartTimeoutSeconds);
  const milliseconds timeout(
      (seconds.ok() && *seconds > 0 ? *seconds : env::kDefaultStartTimeoutSeconds) * 1000);
  const uid_t uid = ::geteuid();
  if (task.rank != 0) {
    StatusOr<JoinAnswer> answer = AskForSecret(*munge, task, uid, addr, port, timeout);
    if (!answer.ok()) return answer.status();
    JoinedStep joined;
    joined.secret = answer->secret;
    joined.store_port = answer->store_port;
    return joined;
  }
  StatusOr<std::string> bind_addr = TaskBindAddress(env);
  if (!bind_addr.ok()) return bind_addr.status();
  int bound = 0;
  StatusOr<int> listen_fd = net::ListenTcp(*bind_addr, port, &bound);
  if (!listen_fd.ok()) {
    return PreconditionFailed("task 0 cannot listen on " + *bind_addr + ":" +
                              std::to_string(port) + " (" + listen_fd.status().message() +
                              "); if another job holds the port, set DADT_RENDEZVOUS_PORT to a "
                              "free port before srun");
  }
  JoinedStep joined;
  SecretToHandOut handout;
  StatusOr<std::string> secret = GenerateSecret();
  if (!secret.ok()) {
    handout.failure = "task 0 cannot make a secret: " + secret.status().message();
  } else {
    StatusOr<std::unique_ptr<RendezvousServer>> store = StartTaskStore(env, *secret, 0);
    if (!store.ok()) {
      handout.failure = "task 0 (on " + task.node + "): " + store.status().message();
    } else {
      joined.store = std::move(*store);
      handout.secret = *secret;
      handout.store_port = joined.store->port();
    }
  }
  Status handed = HandOutSecret(*munge, task, uid, *listen_fd, handout, timeout);
  ::close(*listen_fd);
  if (!handed.ok()) return handed;
  joined.secret = handout.secret;
  joined.store_port = handout.store_port;
  return joined;
}

}  // namespace dadtrun
}  // namespace dadt
