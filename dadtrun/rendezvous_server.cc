#include "dadtrun/rendezvous_server.h"

#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/logging.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {

using rendezvous::Op;
using rendezvous::Request;
using rendezvous::Response;
using rendezvous::ResponseStatus;

namespace {

constexpr char kReadyPrefix[] = "ready/";
// Bytes read from one connection per loop pass, so a flooding client cannot starve the others.
constexpr size_t kMaxReadPerPass = 1 << 20;
// How long accepting pauses when the process is out of file descriptors.
constexpr std::chrono::milliseconds kAcceptPause(100);

using Clock = std::chrono::steady_clock;

std::string Millis(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

std::string PeerName(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

struct RendezvousServer::Connection {
  int fd = -1;
  std::string peer;
  std::string in;
  std::string out;
  bool closing = false;  // close once `out` is flushed
  std::string nonce;            // the challenge sent on accept (protocol.h, the handshake)
  bool authenticated = false;  // has answered it with a proof of the job secret
  Clock::time_point accepted_at;
  Clock::time_point partial_since = Clock::time_point::max();  // `in` holds part of a frame
};

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const std::string& bind_addr, const std::string& secret, const RendezvousServerOptions& options) {
  if (secret.empty()) return InvalidArgument("the rendezvous server needs a non-empty secret");
  int port = 0;
  StatusOr<int> fd = net::ListenTcp(bind_addr, options.port, &port);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RendezvousServer> server(new RendezvousServer(bind_addr, port, *fd, secret, options));
  if (::pipe2(server->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return InternalError("pipe2: " + net::ErrnoText(errno));
  }
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

RendezvousServer::RendezvousServer(std::string address, int port, int listen_fd, std::string secret,
                                   const RendezvousServerOptions& options)
    : address_(std::move(address)),
      port_(port),
      listen_fd_(listen_fd),
      secret_(std::move(secret)),
      options_(options) {}

RendezvousServer::~RendezvousServer() {
  Stop();
  ::close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void RendezvousServer::Stop() {
  stop_.store(true);
  if (wake_[1] >= 0) {
    char c = 1;
    ssize_t ignored = ::write(wake_[1], &c, 1);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
}

std::string RendezvousServer::Peek(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = store_.find(key);
  return it == store_.end() ? std::string() : it->second;
}

void RendezvousServer::Put(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  store_[key] = value;
}

int RendezvousServer::ReadyCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (auto it = store_.lower_bound(kReadyPrefix);
       it != store_.end() && it->first.compare(0, sizeof(kReadyPrefix) - 1, kReadyPrefix) == 0; ++it) {
    ++n;
  }
  return n;
}

void RendezvousServer::Loop() {
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  while (!stop_.load()) {
    int timeout_ms = ExpireConnections();
    const auto now = Clock::now();
    const bool accepting = now >= accept_paused_until_;
    if (!accepting) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until_ - now);
      const int pause_ms = static_cast<int>(left.count()) + 1;
      timeout_ms = timeout_ms < 0 ? pause_ms : std::min(timeout_ms, pause_ms);
    }
    fds.clear();
    polled.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto& [fd, c] : connections_) {
      // A client that does not read its answers gets no more requests read (bounded memory).
      short events = c->closing || c->out.size() >= options_.max_pending_output ? 0 : POLLIN;
      if (!c->out.empty()) events |= POLLOUT;
      fds.push_back({fd, events, 0});
      polled.push_back(c.get());
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      DADT_LOG(ERROR) << "rendezvous server: poll: " << net::ErrnoText(errno);
      break;
    }
    if (stop_.load()) break;
    std::vector<int> to_close;
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection* c = polled[i];
      const short rev = fds[i + 2].revents;
      if (rev == 0) continue;
      bool keep = true;
      if (!c->closing && (rev & (POLLIN | POLLHUP | POLLERR))) keep = ReadAndServe(c);
      if (!c->out.empty()) {
        keep = Flush(c) && keep;
        if (keep && !c->closing && !c->in.empty()) Serve(c);  // requests held back by a full `out`
      }
      if (rev & (POLLERR | POLLNVAL)) keep = false;
      if (!keep || (c->closing && c->out.empty())) to_close.push_back(c->fd);
    }
    for (int fd : to_close) {
      ::close(fd);
      connections_.erase(fd);
    }
    if (fds[1].revents & POLLIN) AcceptAll();  // after the closes: room for the newcomers
  }
  for (auto& [fd, c] : connections_) ::close(fd);
  connections_.clear();
  for (const auto& [address, count] : refusals_) {
    if (count > 1) {
      DADT_LOG(WARNING) << "rendezvous server: refused or closed " << count
                        << " connections from " << address << " in all";
    }
  }
}

void RendezvousServer::LogRefusal(const std::string& peer, const std::string& message) {
  const std::string address = peer.substr(0, peer.rfind(':'));
  if (++refusals_[address] == 1) {
    DADT_LOG(WARNING) << message << " (further refusals of " << address
                      << " are counted, and the count logged when the job ends)";
  } else {
    DADT_LOG(DEBUG) << message;
  }
}

int RendezvousServer::ExpireConnections() {
  const auto now = Clock::now();
  auto next = Clock::time_point::max();
  std::vector<std::pair<int, std::string>> expired;
  for (auto& [fd, c] : connections_) {
    if (!c->authenticated) {
      const auto deadline = c->accepted_at + options_.auth_timeout;
      if (now >= deadline) {
        expired.emplace_back(fd, "no proof of the job secret within " + Millis(options_.auth_timeout) +
                                     " of connecting");
        continue;
      }
      next = std::min(next, deadline);
    }
    if (c->partial_since != Clock::time_point::max()) {
      const auto deadline = c->partial_since + options_.read_timeout;
      if (now >= deadline) {
        expired.emplace_back(fd, "request still incomplete " + Millis(options_.read_timeout) +
                                     " after its first byte");
        continue;
      }
      next = std::min(next, deadline);
    }
  }
  for (const auto& [fd, why] : expired) Drop(fd, why);
  if (next == Clock::time_point::max()) return -1;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count()) + 1;
}

void RendezvousServer::Drop(int fd, const std::string& why) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  LogRefusal(it->second->peer,
             "rendezvous server: closing connection from " + it->second->peer + ": " + why);
  connections_dropped_.fetch_add(1);
  ::close(fd);
  connections_.erase(it);
}

bool RendezvousServer::MakeRoom(const std::string& peer) {
  if (connections_.size() >= options_.max_connections) {
    connections_dropped_.fetch_add(1);
    LogRefusal(peer, "rendezvous server: refusing connection from " + peer + ": " +
                         std::to_string(connections_.size()) + " connections open (the limit)");
    return false;
  }
  size_t waiting = 0;
  const Connection* oldest = nullptr;
  for (const auto& [fd, c] : connections_) {
    if (c->authenticated) continue;
    ++waiting;
    if (oldest == nullptr || c->accepted_at < oldest->accepted_at) oldest = c.get();
  }
  if (oldest != nullptr && waiting >= options_.max_unauthenticated) {
    Drop(oldest->fd, "too many connections waiting to authenticate (" + std::to_string(waiting) +
                         "); closing the oldest for " + peer);
  }
  return true;
}

void RendezvousServer::AcceptAll() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        DADT_LOG(WARNING) << "rendezvous server: accept: " << net::ErrnoText(errno)
                          << "; pausing new connections for " << Millis(kAcceptPause);
        // Out of descriptors (EMFILE): the listening socket stays readable, so retrying at once
        // would spin. Pause; time-outs and closures free descriptors meanwhile.
        accept_paused_until_ = Clock::now() + kAcceptPause;
      }
      return;
    }
    const std::string peer = PeerName(ss);
    if (!MakeRoom(peer)) {
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    StatusOr<std::string> nonce = auth::NewNonce();
    if (!nonce.ok()) {  // no randomness: nobody could authenticate; say so once per peer
      LogRefusal(peer, "rendezvous server: refusing connection from " + peer + ": " + nonce.status().message());
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->peer = peer;
    c->accepted_at = Clock::now();
    c->nonce = std::move(*nonce);
    (void)rendezvous::AppendFrame(rendezvous::EncodeChallenge(c->nonce), &c->out);  // sent by the loop
    connections_[fd] = std::move(c);
    connections_accepted_.fetch_add(1);
  }
}

bool RendezvousServer::ReadAndServe(Connection* c) {
  bool eof = false;
  size_t got = 0;
  char buf[16384];
  while (got < kMaxReadPerPass) {
    ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c->in.append(buf, static_cast<size_t>(n));
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;  // orderly close or error: answer what arrived, then close
    break;
  }
  Serve(c);
  return !eof || !c->out.empty();
}

void RendezvousServer::Serve(Connection* c) {
  std::string payload;
  bool served = false;
  while (!c->closing && c->out.size() < options_.max_pending_output) {
    StatusOr<bool> frame = rendezvous::ExtractFrame(&c->in, &payload);
    if (!frame.ok()) {
      Reject(c, ResponseStatus::kBadRequest, frame.status().message());
      break;
    }
    if (!*frame) break;
    served = true;
    Response response;
    if (!c->authenticated) {
      if (!Authenticate(c, payload, &response)) break;
    } else {
      Request request;
      Status s = rendezvous::DecodeRequest(payload, &request);
      if (!s.ok()) {
        Reject(c, ResponseStatus::kBadRequest, s.message());
        break;
      }
      response = Apply(request);
    }
    std::string encoded;
    if (!rendezvous::EncodeResponse(response, &encoded).ok() ||
        !rendezvous::AppendFrame(encoded, &c->out).ok()) {
      Reject(c, ResponseStatus::kBadRequest, "response too large");
    }
  }
  if (c->in.empty() || c->closing) {
    c->partial_since = Clock::time_point::max();
  } else if (served || c->partial_since == Clock::time_point::max()) {
    c->partial_since = Clock::now();  // the read time-out runs from the latest progress
  }
}

bool RendezvousServer::Authenticate(Connection* c, const std::string& hello, Response* welcome) {
  std::string client_nonce, proof;
  Status s = rendezvous::DecodeHello(hello, &client_nonce, &proof);
  if (!s.ok()) {
    Reject(c, ResponseStatus::kBadRequest, "not a handshake: " + s.message());
    return false;
  }
  if (!auth::ProofMatches(proof, auth::Proof(secret_, rendezvous::kClientLabel, c->nonce, client_nonce))) {
    Reject(c, ResponseStatus::kUnauthorized, "wrong proof of the job secret");
    return false;
  }
  c->authenticated = true;
  DADT_LOG(DEBUG) << "rendezvous server: " << c->peer << " proved the job secret";
  *welcome = {ResponseStatus::kOk, auth::Proof(secret_, rendezvous::kServerLabel, client_nonce, c->nonce)};
  return true;
}

bool RendezvousServer::Flush(Connection* c) {
  while (!c->out.empty()) {
    ssize_t n = ::send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c->out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // peer gone
  }
  return true;
}

void RendezvousServer::Reject(Connection* c, ResponseStatus status, const std::string& why) {
  requests_rejected_.fetch_add(1);
  LogRefusal(c->peer, "rendezvous server: closing connection from " + c->peer + " (" +
                          rendezvous::ResponseStatusName(status) + "): " + why);
  std::string encoded;
  if (rendezvous::EncodeResponse({status, why.substr(0, 200)}, &encoded).ok()) {
    (void)rendezvous::AppendFrame(encoded, &c->out);
  }
  c->in.clear();
  c->closing = true;
}

Response RendezvousServer::Apply(const Request& request) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (request.op) {
    case Op::kSet:
      store_[request.key] = request.value;
      return {ResponseStatus::kOk, ""};
    case Op::kGet: {
      auto it = store_.find(request.key);
      if (it == store_.end()) return {ResponseStatus::kNotFound, ""};
      return {ResponseStatus::kOk, it->second};
    }
    case Op::kAdd: {
      auto it = store_.find(request.key);
      std::string sum;
      Status s = rendezvous::ApplyAdd(it == store_.end() ? nullptr : &it->second, request.value, &sum);
      if (!s.ok()) return {ResponseStatus::kBadRequest, s.message()};
      store_[request.key] = sum;
      return {ResponseStatus::kOk, sum};
    }
  }
  return {ResponseStatus::kBadRequest, "unknown op"};
}

}  // namespace dadtrun
}  // namespace dadt
