#include "runtime/backends/tcp/tcp_control_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/logging.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace backends {
namespace tcp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxFrameBytes = 64u << 20;
constexpr char kAddrKey[] = "ctrl/addr";
// The handshake (see the header): the coordinator's challenge is a nonce; a worker's hello is its
// rank (u32), its nonce and its proof; the coordinator's welcome is its proof.
constexpr uint32_t kHelloBytes = 4 + auth::kNonceBytes + auth::kProofBytes;

std::string HelloLabel(int rank) { return "dadt control hello " + std::to_string(rank); }
std::string WelcomeLabel(int rank) { return "dadt control welcome " + std::to_string(rank); }

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Aborted(Errno("control channel send failed"));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status SendFrame(int fd, const std::string& payload) {
  std::string frame(4 + payload.size(), '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  std::memcpy(&frame[0], &n, 4);
  std::memcpy(&frame[4], payload.data(), payload.size());
  return SendAll(fd, frame.data(), frame.size());
}

// Pops one complete frame from `inbox` into `out`; false when incomplete.
StatusOr<bool> PopFrame(std::string& inbox, std::string* out) {
  if (inbox.size() < 4) return false;
  uint32_t n;
  std::memcpy(&n, inbox.data(), 4);
  if (n > kMaxFrameBytes) return Aborted("control channel frame of " + std::to_string(n) + " bytes");
  if (inbox.size() < 4 + static_cast<size_t>(n)) return false;
  out->assign(inbox, 4, n);
  inbox.erase(0, 4 + static_cast<size_t>(n));
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<TcpControlTransport>> TcpControlTransport::Create(
    int rank, int size, KeyValueStore* store, const std::string& bind_address,
    const std::string& secret, std::chrono::milliseconds timeout) {
  std::unique_ptr<TcpControlTransport> ch(new TcpControlTransport(rank, size));
  if (size == 1) return ch;
  if (rank == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Aborted(Errno("socket"));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    if (inet_pton(AF_INET, bind_address.c_str(), &addr.sin_addr) != 1) {
      close(fd);
      return InvalidArgument("control channel: bad bind address '" + bind_address + "'");
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, size) != 0) {
      Status s = Aborted(Errno("control channel: cannot listen on " + bind_address));
      close(fd);
      return s;
    }
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    Status s = store->Set(kAddrKey, bind_address + ":" + std::to_string(ntohs(addr.sin_port)));
    if (s.ok()) s = ch->Accept(fd, secret, timeout);
    close(fd);
    if (!s.ok()) return s;
    return ch;
  }
  auto where = store->Get(kAddrKey, timeout);
  if (!where.ok()) return where.status();
  const std::string& hp = *where;
  const size_t colon = hp.rfind(':');
  const std::string host = hp.substr(0, colon);
  const int port = std::atoi(hp.c_str() + colon + 1);
  const auto deadline = Clock::now() + timeout;
  int fd = -1;
  while (true) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    close(fd);
    if (Clock::now() > deadline) {
      return TimeoutError("rank " + std::to_string(rank) + " could not reach the coordinator at " +
                          hp + " within " + std::to_string(timeout.count() / 1000) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  SetNoDelay(fd);
  Status s = Hello(fd, rank, secret, std::max(deadline, Clock::now() + std::chrono::seconds(10)));
  if (!s.ok()) {
    close(fd);
    return Status(s.code(), "rank " + std::to_string(rank) + ", the coordinator at " + hp + ": " + s.message());
  }
  ch->peers_.push_back(Peer{fd, 0, ""});
  ch->fds_.push_back(fd);
  return ch;
}

Status TcpControlTransport::Hello(int fd, int rank, const std::string& secret, Clock::time_point deadline) {
  auto recv_frame = [&](uint32_t expected, std::string* out) -> Status {
    uint32_t n = 0;
    DADT_RETURN_IF_ERROR(net::RecvAll(fd, reinterpret_cast<char*>(&n), 4, deadline));
    if (n != expected) return Aborted("a " + std::to_string(n) + "-byte frame where the handshake has " +
                                      std::to_string(expected));
    out->resize(n);
    return net::RecvAll(fd, out->data(), n, deadline);
  };
  std::string challenge, welcome;
  DADT_RETURN_IF_ERROR(recv_frame(auth::kNonceBytes, &challenge));
  std::string nonce;
  DADT_ASSIGN_OR_RETURN(nonce, auth::NewNonce());
  const uint32_t r = static_cast<uint32_t>(rank);
  std::string hello(reinterpret_cast<const char*>(&r), 4);
  hello += nonce + auth::Proof(secret, HelloLabel(rank), challenge, nonce);
  DADT_RETURN_IF_ERROR(SendFrame(fd, hello));
  Status s = recv_frame(auth::kProofBytes, &welcome);
  if (!s.ok()) return Aborted("the coordinator refused this rank's proof of the job secret, or closed: " + s.message());
  if (!auth::ProofMatches(welcome, auth::Proof(secret, WelcomeLabel(rank), nonce, challenge))) {
    return Aborted("the process listening there did not prove that it knows the job secret");
  }
  return Status::OK();
}

Status TcpControlTransport::Accept(int listen_fd, const std::string& secret,
                              std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  peers_.assign(size_ - 1, Peer{});
  // Connections whose hello has not fully arrived. All of them are read as their bytes come, so
  // one that never says hello (a port scanner, a stuck process) holds up none of the others.
  std::vector<Peer> pending;
  int connected = 0;
  while (connected < size_ - 1) {
    const int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) {
      for (const Peer& p : pending) close(p.fd);
      std::string missing;
      for (int r = 1; r < size_; ++r) {
        if (peers_[r - 1].fd < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return TimeoutError("timed out after " + std::to_string(timeout.count() / 1000) +
                          " s waiting for rank(s) " + missing + " to connect to the coordinator");
    }
    std::vector<pollfd> polled{pollfd{listen_fd, POLLIN, 0}};
    for (const Peer& p : pending) polled.push_back(pollfd{p.fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), ms) <= 0) continue;
    // In the order they connected, so that of two hellos claiming one rank the first one wins.
    std::vector<Peer> waiting;
    for (size_t i = 0; i < pending.size(); ++i) {
      Peer& p = pending[i];
      if (polled[i + 1].revents == 0) {
        waiting.push_back(std::move(p));
        continue;
      }
      char buf[4096];
      const ssize_t r = recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        waiting.push_back(std::move(p));
        continue;
      }
      int peer_rank = -1;
      std::string welcome;  // the coordinator's proof, for a rank whose hello proved the secret
      if (r > 0) {
        p.inbox.append(buf, static_cast<size_t>(r));
        uint32_t n = 0;
        if (p.inbox.size() >= 4) std::memcpy(&n, p.inbox.data(), 4);
        std::string hello;
        auto popped = n != kHelloBytes && p.inbox.size() >= 4 ? StatusOr<bool>(Aborted("not a hello"))
                                                              : PopFrame(p.inbox, &hello);
        if (popped.ok() && !*popped) {  // the rest of the hello is on its way
          waiting.push_back(std::move(p));
          continue;
        }
        if (popped.ok()) {
          uint32_t claimed = 0;
          std::memcpy(&claimed, hello.data(), 4);
          const std::string nonce = hello.substr(4, auth::kNonceBytes);
          const std::string proof = hello.substr(4 + auth::kNonceBytes);
          const int rank = static_cast<int>(std::min<uint32_t>(claimed, static_cast<uint32_t>(size_)));
          if (auth::ProofMatches(proof, auth::Proof(secret, HelloLabel(rank), p.challenge, nonce))) {
            peer_rank = rank;  // checked against the range below, with the duplicates
            welcome = auth::Proof(secret, WelcomeLabel(peer_rank), nonce, p.challenge);
          }
        }
      }
      if (peer_rank < 1 || peer_rank >= size_ || peers_[peer_rank - 1].fd >= 0) {
        close(p.fd);  // closed, unauthenticated or duplicate: keep waiting for the real ranks
        if (r > 0) ++refused_;
        continue;
      }
      if (!SendFrame(p.fd, welcome).ok()) {  // the rank went away: it will fail on its side
        close(p.fd);
        continue;
      }
      SetNoDelay(p.fd);
      // Bytes past the hello stay in the inbox: a rank may send requests right behind it.
      peers_[peer_rank - 1] = Peer{p.fd, peer_rank, std::move(p.inbox)};
      ++connected;
    }
    pending = std::move(waiting);
    if (polled[0].revents & POLLIN) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      StatusOr<std::string> nonce = fd >= 0 ? auth::NewNonce() : StatusOr<std::string>(Aborted("accept"));
      if (fd >= 0 && nonce.ok() && SendFrame(fd, *nonce).ok()) {  // the challenge
        pending.push_back(Peer{fd, -1, "", std::move(*nonce)});
      } else if (fd >= 0) {
        close(fd);
      }
    }
  }
  for (const Peer& p : pending) close(p.fd);
  for (const Peer& p : peers_) fds_.push_back(p.fd);
  if (refused_ > 0) {
    DADT_LOG(WARNING) << "control channel: refused " << refused_ << " connection(s) that were not "
                      << "ranks of this job (no proof of the job secret, or a rank already connected)";
  }
  DADT_LOG(DEBUG) << "control channel: " << size_ - 1 << " rank(s) proved the job secret";
  return Status::OK();
}

TcpControlTransport::~TcpControlTransport() {
  for (const Peer& p : peers_) {
    if (p.fd >= 0) close(p.fd);
  }
}

Status TcpControlTransport::SendToCoordinator(const std::string& payload) {
  return SendFrame(peers_[0].fd, payload);
}

Status TcpControlTransport::Broadcast(const std::string& payload) {
  for (const Peer& p : peers_) {
    Status s = SendFrame(p.fd, payload);
    if (!s.ok()) return Aborted("lost connection to rank " + std::to_string(p.rank) + ": " + s.message());
  }
  return Status::OK();
}

Status TcpControlTransport::ReadAvailable(std::vector<std::pair<int, std::string>>* out) {
  char buf[65536];
  Status closed;
  for (Peer& p : peers_) {
    while (true) {
      ssize_t r = recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) {
        p.inbox.append(buf, static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (r < 0 && errno == EINTR) continue;
      // Deliver what arrived before the close (often the coordinator's shutdown) first.
      if (closed.ok()) {
        closed_rank_ = p.rank;
        closed = Aborted(p.rank == 0
                             ? "lost the connection to the coordinator (rank 0): it exited or crashed"
                             : "rank " + std::to_string(p.rank) + " disconnected: it exited or crashed");
      }
      break;
    }
    std::string frame;
    while (true) {
      auto popped = PopFrame(p.inbox, &frame);
      if (!popped.ok()) return popped.status();
      if (!*popped) break;
      out->emplace_back(p.rank, std::move(frame));
    }
  }
  return closed;
}

}  // namespace tcp
}  // namespace backends
}  // namespace dadt
