#include "runtime/core/liveness_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

#include "runtime/common/env.h"
#include "runtime/common/logging.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace core {
namespace {

using Clock = std::chrono::steady_clock;

// How many in-flight tensors a message names.
constexpr size_t kWaitsNamed = 4;

std::string LocalHostName() {
  const std::string given = env::GetString(env::kHostname);
  if (!given.empty()) return given;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

StatusOr<sockaddr_in> Ipv4(const std::string& address, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) {
    return InvalidArgument("liveness: '" + address + "' is not an IPv4 address");
  }
  return sa;
}

}  // namespace

StatusOr<std::unique_ptr<LivenessWatch>> LivenessWatch::Bind(const LivenessOptions& options,
                                                             int rank, int size,
                                                             const std::string& address) {
  auto sa = Ipv4(address, 0);
  if (!sa.ok()) return sa.status();
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError("liveness: socket: " + net::ErrnoText(errno));
  socklen_t len = sizeof(*sa);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*sa), len) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&*sa), &len) != 0) {
    const int err = errno;
    close(fd);
    return InternalError("liveness: cannot bind a UDP socket on " + address + ": " + net::ErrnoText(err));
  }
  return std::unique_ptr<LivenessWatch>(
      new LivenessWatch(options, rank, size, fd, address, ntohs(sa->sin_port)));
}

LivenessWatch::LivenessWatch(const LivenessOptions& options, int rank, int size, int fd,
                             std::string address, int port)
    : options_(options), rank_(rank), size_(size), fd_(fd), address_(std::move(address)),
      port_(port) {
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::random_device rd;
  own_token_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

LivenessWatch::~LivenessWatch() {
  Stop();
  if (fd_ >= 0) close(fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

std::string LivenessWatch::Record() const {
  std::string r = address_ + " " + std::to_string(port_) + " " + std::to_string(own_token_) + " " +
                  LocalHostName();
  r.resize(kRecordBytes, '\0');
  return r;
}

Status LivenessWatch::Start(const std::vector<std::string>& records, Hooks hooks) {
  if (static_cast<int>(records.size()) != size_) {
    return InternalError("liveness: " + std::to_string(records.size()) + " records for " +
                    std::to_string(size_) + " ranks");
  }
  for (int r = 0; r < size_; ++r) {
    std::istringstream is(records[r].c_str());  // up to the padding
    std::string addr, host;
    int port = 0;
    uint64_t token = 0;
    if (!(is >> addr >> port >> token)) {
      return InternalError("liveness: rank " + std::to_string(r) + "'s record is malformed");
    }
    std::getline(is >> std::ws, host);
    hosts_.push_back(host.empty() ? "?" : host);
    // A peer rank 0 could not send to would look silent to it: refuse the record instead.
    auto sa = Ipv4(addr, port);
    if (!sa.ok()) return sa.status();
    peers_.push_back(*sa);
    if (r == 0) token_ = token;
  }
  if (rank_ != 0) {
    // Connected: only rank 0's datagrams are read, and a rank 0 that exited (its socket closed)
    // shows as ECONNREFUSED instead of silence.
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&peers_[0]), sizeof(peers_[0])) != 0) {
      return InternalError("liveness: connect: " + net::ErrnoText(errno));
    }
  }
  hooks_ = std::move(hooks);
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void LivenessWatch::Stop() {
  stopped_ = true;
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t rc = write(stop_fd_, &one, sizeof(one));
    (void)rc;
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void LivenessWatch::SendHeartbeats(const std::vector<SilentPeer>& verdict, bool end) {
  Heartbeat hb;
  hb.token = token_;
  hb.rank = rank_;
  hb.seq = ++seq_;
  if (rank_ != 0) {
    const std::string msg = EncodeHeartbeat(hb);
    if (send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) < 0 && errno == ECONNREFUSED) {
      coordinator_gone_ = true;
    }
    return;
  }
  hb.silent = verdict;
  hb.end = end;
  const std::string msg = EncodeHeartbeat(hb);
  for (int r = 1; r < size_; ++r) {
    (void)sendto(fd_, msg.data(), msg.size(), MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&peers_[r]), sizeof(peers_[r]));
  }
}

void LivenessWatch::Receive(LivenessTracker* tracker, Clock::time_point now) {
  char buf[65536];
  while (true) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNREFUSED && rank_ != 0) coordinator_gone_ = true;
      return;
    }
    auto hb = DecodeHeartbeat(std::string(buf, static_cast<size_t>(n)));
    if (!hb || hb->token != token_ || hb->rank >= size_ || hb->rank == rank_) continue;
    if (rank_ == 0) {
      tracker->OnHeard(hb->rank, now);
    } else if (hb->rank == 0) {
      tracker->OnHeard(0, now);
      reported_ = hb->silent;
      reported_end_ = reported_end_ || hb->end;
    }
  }
}

std::string LivenessWatch::PeerText(const SilentPeer& p) const {
  const std::string host = p.rank >= 0 && p.rank < size_ ? hosts_[p.rank] : "?";
  return "rank " + std::to_string(p.rank) + " on host " + host;
}

std::string LivenessWatch::WaitText(Clock::time_point now) const {
  std::vector<InFlightTensor> waits = hooks_.in_flight ? hooks_.in_flight() : std::vector<InFlightTensor>{};
  if (waits.empty()) return "no collective (nothing of this rank is in flight)";
  std::string out;
  for (size_t i = 0; i < waits.size() && i < kWaitsNamed; ++i) {
    const InFlightTensor& w = waits[i];
    const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - w.since);
    out += (i ? "; " : "") + std::string(w.op) + " '" + w.name + "' " +
           (w.in_data_plane ? "in a data-plane wait" : "in negotiation") + " for " +
           LivenessSeconds(since);
  }
  if (waits.size() > kWaitsNamed) out += "; and more";
  return out;
}

void LivenessWatch::Run() {
  std::vector<int> watched;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) watched.push_back(r);
  } else {
    watched.push_back(0);
  }
  LivenessTracker tracker(options_, watched, Clock::now());
  const auto interval = options_.heartbeat_interval();
  auto next_send = Clock::now();
  pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (!stopped_) {
    auto now = Clock::now();
    if (fds[0].revents & (POLLIN | POLLERR)) Receive(&tracker, now);
    if (coordinator_gone_) tracker.Forget(0);
    std::vector<SilentPeer> silent = tracker.Silent(now);
    std::vector<SilentPeer> verdict = silent;  // what rank 0 tells the workers
    // A worker hears of the other workers from rank 0, while rank 0 itself is heard.
    if (rank_ != 0 && silent.empty() && !coordinator_gone_) silent = reported_;
    if (now >= next_send) {
      SendHeartbeats(verdict, /*end=*/false);
      next_send = now + interval;
    }
    const LivenessVerdict v = tracker.Decide(silent, now);
    const bool end = v.end || (rank_ != 0 && reported_end_ && !silent.empty());
    if (end) {
      const SilentPeer& p = silent.front();
      if (rank_ == 0) {
        for (int i = 0; i < 3; ++i) SendHeartbeats(verdict, /*end=*/true);  // datagrams may drop
      }
      const std::string error =
          "liveness: " + PeerText(p) + " stopped answering: no heartbeat for " +
          LivenessSeconds(p.silent) + " (" + env::kLivenessShutdownTime + "=" +
          LivenessSeconds(options_.shutdown_time) + "); ending the job. This rank was waiting for: " +
          WaitText(now) + ". See docs/troubleshooting.md, 'A rank stopped answering'.";
      if (hooks_.on_end) hooks_.on_end(error, p.rank, hosts_[p.rank], p.silent);
      return;
    }
    if (v.warn) {
      std::string who;
      for (size_t i = 0; i < silent.size(); ++i) {
        who += (i ? ", " : "") + PeerText(silent[i]) + " (silent " + LivenessSeconds(silent[i].silent) + ")";
      }
      DADT_LOG(WARNING) << "liveness: no heartbeat from " << who
                        << ": stopped, frozen or cut off (a rank that is only slow keeps sending "
                           "them). This rank waits for: "
                        << WaitText(now) << ". The job ends once a rank has been silent for "
                        << LivenessSeconds(options_.shutdown_time) << " ("
                        << env::kLivenessShutdownTime
                        << "); see docs/troubleshooting.md, 'A rank stopped answering'.";
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_send - Clock::now());
    fds[0].revents = fds[1].revents = 0;
    poll(fds, 2, static_cast<int>(std::max<int64_t>(1, wait.count())));
  }
}

}  // namespace core
}  // namespace dadt
