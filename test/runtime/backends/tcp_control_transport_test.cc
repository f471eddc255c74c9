// TcpControlTransport (runtime/backends/tcp/tcp_control_transport.h): the coordinator's star of TCP connections,
// with ranks as threads on loopback and an in-memory rendezvous store. Covers: every worker's
// frames reach the coordinator tagged with its rank and a broadcast reaches every worker; frames
// keep their boundaries and order (empty and large ones included); a wrong secret is not let in,
// and a worker does not take a listener that cannot prove the secret for its coordinator;
// a start-up timeout names the missing ranks; a closed peer is reported by rank, after the frames
// it sent before closing; a bad bind address is refused.
#include "runtime/backends/tcp/tcp_control_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/auth/keyed_proof.h"
#include "test/runtime/backends/in_memory_kv_store.h"

namespace dadt {
namespace backends {
namespace tcp {
namespace {

using testutil::InMemoryKeyValueStore;
using Frames = std::vector<std::pair<int, std::string>>;
constexpr std::chrono::milliseconds kGenerous(30000);  // only to turn a hang into a failure
constexpr char kSecret[] = "s3cret";

StatusOr<std::unique_ptr<TcpControlTransport>> Connect(int rank, int size, KeyValueStore* store,
                                                  const std::string& secret = kSecret,
                                                  std::chrono::milliseconds timeout = kGenerous) {
  return TcpControlTransport::Create(rank, size, store, "127.0.0.1", secret, timeout);
}

// Reads until `want` frames arrived in all (or the channel failed); returns ReadAvailable's status.
Status ReadFrames(TcpControlTransport& ch, size_t want, Frames* out) {
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (out->size() < want) {
    if (std::chrono::steady_clock::now() > deadline) return TimeoutError("frames never arrived");
    std::vector<pollfd> fds;
    for (int fd : ch.fds()) fds.push_back(pollfd{fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 1000);
    Status s = ch.ReadAvailable(out);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

// Reads until the channel reports a closed peer (the frames before it land in `out`).
Status ReadUntilClosed(TcpControlTransport& ch, Frames* out) { return ReadFrames(ch, SIZE_MAX, out); }

TEST(TcpControlTransport, SingleRankNeedsNoSockets) {
  InMemoryKeyValueStore store;
  auto ch = Connect(0, 1, &store);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_TRUE((*ch)->fds().empty());
  EXPECT_EQ((*ch)->geometry().size, 1);
  EXPECT_EQ(store.size(), 0u);
}

class TcpControlTransportStarTest : public ::testing::TestWithParam<int> {};

TEST_P(TcpControlTransportStarTest, WorkersReachTheCoordinatorByRankAndBroadcastsReachEveryWorker) {
  const int n = GetParam();
  InMemoryKeyValueStore store;
  // Nobody closes before the coordinator read everything (a close is reported as an error).
  std::promise<void> coordinator_done;
  std::shared_future<void> done = coordinator_done.get_future().share();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto ch = Connect(rank, n, &store);
      ASSERT_TRUE(ch.ok()) << "rank " << rank << ": " << ch.status().ToString();
      TcpControlTransport& c = **ch;
      EXPECT_EQ(c.geometry().rank, rank);
      if (rank == 0) {
        EXPECT_EQ(c.fds().size(), static_cast<size_t>(n - 1));
        Frames got;
        ASSERT_TRUE(ReadFrames(c, n - 1, &got).ok());
        std::map<int, std::string> by_rank(got.begin(), got.end());
        ASSERT_EQ(by_rank.size(), static_cast<size_t>(n - 1));
        for (int r = 1; r < n; ++r) EXPECT_EQ(by_rank[r], "requests of rank " + std::to_string(r));
        ASSERT_TRUE(c.Broadcast("responses").ok());
        // Every worker answers the broadcast before anyone closes.
        got.clear();
        ASSERT_TRUE(ReadFrames(c, n - 1, &got).ok());
        for (const auto& [r, payload] : got) EXPECT_EQ(payload, "ack " + std::to_string(r));
        coordinator_done.set_value();
      } else {
        EXPECT_EQ(c.fds().size(), 1u);
        ASSERT_TRUE(c.SendToCoordinator("requests of rank " + std::to_string(rank)).ok());
        Frames got;
        ASSERT_TRUE(ReadFrames(c, 1, &got).ok());
        EXPECT_EQ(got[0], std::make_pair(0, std::string("responses")));
        ASSERT_TRUE(c.SendToCoordinator("ack " + std::to_string(rank)).ok());
        done.wait_for(kGenerous);
      }
    });
  }
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpControlTransportStarTest, ::testing::Values(2, 3, 4, 7));

TEST(TcpControlTransport, FramesKeepTheirBoundariesAndOrder) {
  InMemoryKeyValueStore store;
  std::vector<std::string> sent;
  for (int i = 0; i < 200; ++i) sent.push_back(std::string((i * 37) % 5000, static_cast<char>('a' + i % 26)));
  sent.push_back("");                                // empty frame
  sent.push_back(std::string(3 << 20, '\x7f'));      // larger than a socket buffer
  sent.push_back(std::string("\0\1\2\0", 4));        // binary, with NULs
  std::thread worker([&] {
    auto ch = Connect(1, 2, &store);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    for (const std::string& s : sent) ASSERT_TRUE((*ch)->SendToCoordinator(s).ok());
    Frames done;
    EXPECT_TRUE(ReadFrames(**ch, 1, &done).ok());  // stay connected until the coordinator read all
  });
  auto ch = Connect(0, 2, &store);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  Frames got;
  ASSERT_TRUE(ReadFrames(**ch, sent.size(), &got).ok());
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].first, 1);
    EXPECT_EQ(got[i].second.size(), sent[i].size()) << "frame " << i;
    EXPECT_TRUE(got[i].second == sent[i]) << "frame " << i;
  }
  ASSERT_TRUE((*ch)->Broadcast("done").ok());
  worker.join();
}

TEST(TcpControlTransport, WrongSecretIsNotLetIn) {
  InMemoryKeyValueStore store;
  std::thread intruder([&] {
    auto ch = Connect(1, 2, &store, "guess");
    ASSERT_FALSE(ch.ok());  // no welcome: the coordinator closed the connection
    EXPECT_NE(ch.status().message().find("refused this rank's proof of the job secret"), std::string::npos)
        << ch.status().message();
  });
  auto ch = Connect(0, 2, &store, kSecret, std::chrono::milliseconds(1000));
  intruder.join();
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kTimeout);
  EXPECT_NE(ch.status().message().find("rank(s) 1 "), std::string::npos) << ch.status().message();
}

TEST(TcpControlTransport, StartupTimeoutNamesTheMissingRanks) {
  InMemoryKeyValueStore store;
  std::promise<void> coordinator_done;
  std::thread rank1([&] {
    auto ch = Connect(1, 4, &store);
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    coordinator_done.get_future().wait();
  });
  auto ch = Connect(0, 4, &store, kSecret, std::chrono::milliseconds(1000));
  coordinator_done.set_value();
  rank1.join();
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kTimeout);
  EXPECT_NE(ch.status().message().find("rank(s) 2, 3 "), std::string::npos)
      << ch.status().message();
}

TEST(TcpControlTransport, WorkerWithoutACoordinatorTimesOut) {
  InMemoryKeyValueStore store;
  auto ch = Connect(1, 2, &store, kSecret, std::chrono::milliseconds(100));
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kTimeout);
}

TEST(TcpControlTransport, ClosedWorkerIsReportedByRankAfterItsLastFrames) {
  InMemoryKeyValueStore store;
  std::promise<void> coordinator_done;
  std::thread rank1([&] {
    auto ch = Connect(1, 3, &store);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    coordinator_done.get_future().wait();  // stays up throughout
  });
  std::thread rank2([&] {
    auto ch = Connect(2, 3, &store);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    ASSERT_TRUE((*ch)->SendToCoordinator("last words").ok());
    // The channel closes here, as when the process exits.
  });
  auto ch = Connect(0, 3, &store);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  rank2.join();
  Frames got;
  Status s = ReadUntilClosed(**ch, &got);
  coordinator_done.set_value();
  rank1.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
  EXPECT_EQ((*ch)->closed_rank(), 2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::make_pair(2, std::string("last words")));
}

TEST(TcpControlTransport, LostCoordinatorIsReportedToTheWorkerAfterItsLastFrames) {
  InMemoryKeyValueStore store;
  std::thread coordinator([&] {
    auto ch = Connect(0, 2, &store);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    ASSERT_TRUE((*ch)->Broadcast("shutdown").ok());
  });
  auto ch = Connect(1, 2, &store);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  coordinator.join();
  Frames got;
  Status s = ReadUntilClosed(**ch, &got);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("coordinator (rank 0)"), std::string::npos) << s.message();
  EXPECT_EQ((*ch)->closed_rank(), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::make_pair(0, std::string("shutdown")));
  // Sending to a coordinator that is gone is an error, not a SIGPIPE.
  Status send;
  for (int i = 0; i < 100 && send.ok(); ++i) send = (*ch)->SendToCoordinator(std::string(1 << 16, 'x'));
  EXPECT_EQ(send.code(), StatusCode::kAborted);
}

// A plain TCP client speaking the channel's framing, for peers that misbehave.
std::string RecvFrame(int fd) {
  uint32_t n = 0;
  if (recv(fd, &n, 4, MSG_WAITALL) != 4) return "";
  std::string body(n, '\0');
  if (n > 0 && recv(fd, body.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) return "";
  return body;
}

int RawConnect(KeyValueStore& store) {
  auto where = store.Get("ctrl/addr", kGenerous);
  EXPECT_TRUE(where.ok());
  if (!where.ok()) return -1;
  const size_t colon = where->rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(where->substr(colon + 1))));
  inet_pton(AF_INET, where->substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

void RawSend(int fd, const std::string& payload, uint32_t length) {
  std::string frame(4, '\0');
  std::memcpy(&frame[0], &length, 4);
  frame += payload;
  ASSERT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
}

// The worker's half of the handshake, by hand, claiming `rank` and proving `secret`.
void RawHello(int fd, int rank, const std::string& secret) {
  const std::string challenge = RecvFrame(fd);
  ASSERT_EQ(challenge.size(), auth::kNonceBytes);
  const std::string nonce(auth::kNonceBytes, 'w');
  const uint32_t r = static_cast<uint32_t>(rank);
  const std::string hello = std::string(reinterpret_cast<const char*>(&r), 4) + nonce +
                            auth::Proof(secret, "dadt control hello " + std::to_string(rank), challenge, nonce);
  RawSend(fd, hello, static_cast<uint32_t>(hello.size()));
}

// Whether the peer closed `fd` (recv sees the end of the stream) within the generous timeout.
bool ClosedByPeer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(kGenerous.count())) != 1) return false;
  char c;
  return recv(fd, &c, 1, 0) == 0;
}

TEST(TcpControlTransport, SecondConnectionClaimingARankIsShutOut) {
  InMemoryKeyValueStore store;
  std::promise<void> coordinator_done;
  int impostor = -1;
  // Connections are accepted in the order they were made: rank 1, the impostor, rank 2.
  std::thread ranks([&] {
    auto rank1 = Connect(1, 3, &store);
    ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
    impostor = RawConnect(store);
    RawHello(impostor, 1, kSecret);  // knows the secret, but rank 1 is taken
    auto rank2 = Connect(2, 3, &store);
    ASSERT_TRUE(rank2.ok()) << rank2.status().ToString();
    ASSERT_TRUE((*rank1)->SendToCoordinator("from rank 1").ok());
    ASSERT_TRUE((*rank2)->SendToCoordinator("from rank 2").ok());
    coordinator_done.get_future().wait();
  });
  auto ch = Connect(0, 3, &store);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  Frames got;
  EXPECT_TRUE(ReadFrames(**ch, 2, &got).ok());
  std::map<int, std::string> by_rank(got.begin(), got.end());
  EXPECT_EQ(by_rank[1], "from rank 1");
  EXPECT_EQ(by_rank[2], "from rank 2");
  coordinator_done.set_value();
  ranks.join();
  // The impostor's connection was closed: nothing it sends can reach the coordinator.
  EXPECT_TRUE(ClosedByPeer(impostor));
  close(impostor);
}

// A connection that never sends its hello (a port scanner, a stuck process) must not keep the
// coordinator from accepting the real ranks that connect after it.
TEST(TcpControlTransport, SilentConnectionDoesNotHoldUpTheRanksBehindIt) {
  InMemoryKeyValueStore store;
  std::promise<void> coordinator_done;
  int silent = -1;
  std::thread ranks([&] {
    silent = RawConnect(store);  // accepted first, says nothing
    auto rank1 = Connect(1, 2, &store);
    ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
    coordinator_done.get_future().wait();
  });
  // Far longer than the ranks need, far shorter than kGenerous: with the silent connection
  // served first and to the end, the coordinator would give up after it.
  auto ch = Connect(0, 2, &store, kSecret, std::chrono::milliseconds(5000));
  coordinator_done.set_value();
  ranks.join();
  EXPECT_TRUE(ch.ok()) << ch.status().ToString();
  close(silent);
}

TEST(TcpControlTransport, CorruptFrameLengthIsAnError) {
  InMemoryKeyValueStore store;
  std::promise<void> coordinator_done;
  std::thread peer([&] {
    int fd = RawConnect(store);
    RawHello(fd, 1, kSecret);
    EXPECT_EQ(RecvFrame(fd).size(), auth::kProofBytes);  // the coordinator's welcome
    RawSend(fd, "", 0xFFFFFFFFu);  // a length no frame has
    coordinator_done.get_future().wait();
    close(fd);
  });
  auto ch = Connect(0, 2, &store);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  Frames got;
  Status s = ReadFrames(**ch, 1, &got);
  coordinator_done.set_value();
  peer.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("4294967295"), std::string::npos) << s.message();
  EXPECT_TRUE(got.empty());
}

// A rank does not take a listener that cannot prove the job secret for its coordinator (a stale
// address, another job's port): its welcome must be the coordinator's proof.
TEST(TcpControlTransport, AWorkerRefusesACoordinatorThatCannotProveTheSecret) {
  InMemoryKeyValueStore store;
  int port = 0;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  ASSERT_TRUE(store.Set("ctrl/addr", "127.0.0.1:" + std::to_string(port)).ok());
  std::string hello;
  std::thread fake([&] {
    int fd = accept(listener, nullptr, nullptr);
    RawSend(fd, std::string(auth::kNonceBytes, 'n'), auth::kNonceBytes);
    hello = RecvFrame(fd);
    RawSend(fd, std::string(auth::kProofBytes, 'p'), auth::kProofBytes);  // a made-up proof
    ClosedByPeer(fd);
    close(fd);
  });
  auto ch = Connect(1, 2, &store);
  fake.join();
  close(listener);
  ASSERT_FALSE(ch.ok());
  EXPECT_NE(ch.status().message().find("did not prove that it knows the job secret"), std::string::npos)
      << ch.status().message();
  EXPECT_EQ(hello.find(kSecret), std::string::npos) << "the secret itself never crosses the wire";
}

TEST(TcpControlTransport, BadBindAddressIsRefused) {
  InMemoryKeyValueStore store;
  auto ch = TcpControlTransport::Create(0, 2, &store, "not-an-address", kSecret, kGenerous);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ch.status().message().find("not-an-address"), std::string::npos);
}

}  // namespace
}  // namespace tcp
}  // namespace backends
}  // namespace dadt
