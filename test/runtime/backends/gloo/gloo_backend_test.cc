// Gloo-specific behaviour the conformance suite cannot express: registration, the size-1 fast
// path, rendezvous through the StoreAdapter, the exception -> Status edge, interface selection,
// and failures -- a peer killed mid-collective (a real forked process, as Gloo's MultiProcTest
// does), a peer that closes its connections, and a peer that stalls until the timeout. One file
// (over 500 lines): the cases share the options and helpers at its top, and each is short.
#include <dirent.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backends/backend.h"
#include "runtime/backends/gloo/gloo_backend.h"
#include "runtime/backends/gloo/gloo_error.h"
#include "runtime/backends/gloo/ring.h"
#include "runtime/backends/gloo/store_adapter.h"
#include "test/runtime/backends/expected_values.h"
#include "test/runtime/backends/in_memory_kv_store.h"
#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testutil::InMemoryKeyValueStore;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

BackendOptions Options(int rank, int size, KeyValueStore* store, milliseconds timeout) {
  BackendOptions o;
  o.rank = o.local_rank = rank;
  o.size = o.local_size = size;
  o.store = store;
  o.store_prefix = testutil::UniqueStorePrefix();
  o.timeout = timeout;
  return o;
}

TEST(GlooBackendTest, RegisteredAsGloo) {
  const auto names = BackendRegistry::Names();
  EXPECT_NE(std::find(names.begin(), names.end(), "gloo"), names.end());
}

TEST(GlooBackendTest, SingleRankNeedsNoStoreOrNetwork) {
  const auto start = Clock::now();
  auto created = BackendRegistry::Create("gloo", Options(0, 1, nullptr, milliseconds(1000)));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Backend& b = **created;
  EXPECT_STREQ(b.Name(), "GLOO");
  float x[2] = {1.5f, -2};
  EXPECT_TRUE(b.Allreduce(x, 2, DataType::kFloat32, ReduceOp::kMin).ok());
  EXPECT_EQ(x[0], 1.5f);
  int32_t in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  EXPECT_TRUE(b.Reducescatter(in, out, {3}, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ(out[2], 3);
  char c = 'x', d = 0;
  EXPECT_TRUE(b.Alltoallv(&c, {1}, &d, {1}).ok());
  EXPECT_EQ(d, 'x');
  EXPECT_TRUE(b.Barrier().ok());
  EXPECT_LT(SecondsSince(start), 0.1);
}

TEST(GlooBackendTest, BadOptionsAreInvalidArgument) {
  auto no_store = BackendRegistry::Create("gloo", Options(0, 2, nullptr, milliseconds(100)));
  EXPECT_EQ(no_store.status().code(), StatusCode::kInvalidArgument);
  InMemoryKeyValueStore store;
  auto bad_rank = BackendRegistry::Create("gloo", Options(2, 2, &store, milliseconds(100)));
  EXPECT_EQ(bad_rank.status().code(), StatusCode::kInvalidArgument);
}

TEST(GlooBackendTest, MissingPeerTimesOutNamingTheKey) {
  InMemoryKeyValueStore store;
  const auto start = Clock::now();
  auto created = BackendRegistry::Create("gloo", Options(0, 2, &store, milliseconds(300)));
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kTimeout) << created.status().ToString();
  EXPECT_NE(created.status().message().find("test/"), std::string::npos);  // the prefixed key
  EXPECT_NE(created.status().message().find("connect"), std::string::npos);
  EXPECT_LT(SecondsSince(start), 5);
}

// A rank that gave up on a peer that never arrived leaves its verdict: the peer, arriving later
// (an elastic worker a new round started late), fails at once with that reason instead of dialling
// the gone rank (Gloo retries a refused connection 5 times, up to the pair timeout each) and then
// waiting the verdict's time (connect + 6 x pair timeout): about 12 s here.
TEST(GlooBackendTest, LateRankLearnsAtOnceThatTheOthersGaveUp) {
  InMemoryKeyValueStore store;
  BackendOptions early = Options(0, 2, &store, milliseconds(1000));
  auto gave_up = BackendRegistry::Create("gloo", early);
  ASSERT_FALSE(gave_up.ok());
  EXPECT_NE(gave_up.status().message().find("did not reach init()"), std::string::npos)
      << gave_up.status().ToString();
  BackendOptions late = Options(1, 2, &store, milliseconds(1000));
  late.store_prefix = early.store_prefix;
  const auto start = Clock::now();
  auto created = BackendRegistry::Create("gloo", late);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("gave up waiting"), std::string::npos) << created.status().ToString();
  EXPECT_LT(SecondsSince(start), 3);  // one store read (a loaded machine leaves room)
}

TEST(GlooBackendTest, StoreAdapterPrefixesHexEncodesAndBlocks) {
  InMemoryKeyValueStore store;
  StoreAdapter a(&store, "p/", milliseconds(5000));
  const std::vector<char> value = {'\0', 'a', '\xff', '\n'};
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    a.set("k", value);
  });
  EXPECT_EQ(a.get("k"), value);  // blocked until the writer set it
  writer.join();
  EXPECT_EQ(*store.Get("p/k", milliseconds(0)), "0061ff0a");

  StoreAdapter impatient(&store, "p/", milliseconds(50));
  try {
    impatient.wait({"k", "never"});
    ADD_FAILURE() << "wait() should have thrown";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kTimeout);
    EXPECT_NE(e.status().message().find("p/never"), std::string::npos);
  }
  EXPECT_TRUE(impatient.key_never_appeared());

  // Gloo's connectFullMesh waits with its context's (pair) timeout: the adapter still waits its
  // own, the start timeout, for a peer that reaches the meeting late.
  StoreAdapter patient(&store, "p/", milliseconds(5000));
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(300));
    a.set("late", value);
  });
  EXPECT_NO_THROW(patient.wait({"k", "late"}, milliseconds(50)));
  late.join();
  EXPECT_FALSE(patient.key_never_appeared());

  std::vector<char> decoded;
  EXPECT_FALSE(StoreAdapter::HexDecode("abc", &decoded));
  EXPECT_FALSE(StoreAdapter::HexDecode("zz", &decoded));
}

Status Throw(const std::exception_ptr& e) {
  return DADT_GLOO_STATUS("allreduce", std::rethrow_exception(e));
}

TEST(GlooBackendTest, ExceptionsBecomeStatusWithCollectiveAndFileLine) {
  const struct { std::exception_ptr e; StatusCode code; } kCases[] = {
      {std::make_exception_ptr(::gloo::IoException("Connection closed by peer")),
       StatusCode::kAborted},
      {std::make_exception_ptr(::gloo::IoException("Timed out waiting 10ms for recv")),
       StatusCode::kTimeout},
      {std::make_exception_ptr(::gloo::EnforceNotMet("f.cc", 1, "x", "bad")),
       StatusCode::kInternal},
      {std::make_exception_ptr(StoreError(TimeoutError("key 'k'"))), StatusCode::kTimeout},
      {std::make_exception_ptr(std::runtime_error("boom")), StatusCode::kInternal},
  };
  for (const auto& c : kCases) {
    const Status s = Throw(c.e);
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_NE(s.message().find("gloo allreduce failed at"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("gloo_backend_test.cc:"), std::string::npos) << s.ToString();
  }
  EXPECT_TRUE(DADT_GLOO_STATUS("barrier", (void)0).ok());
}

// Two ranks as threads with the given device options.
void AllreduceWithDevice(const std::string& iface, int local_size) {
  InMemoryKeyValueStore store;
  const std::string prefix = testutil::UniqueStorePrefix();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      BackendOptions o = Options(r, 2, &store, milliseconds(10000));
      o.store_prefix = prefix;
      o.iface = iface;
      o.local_size = local_size;
      o.local_rank = 0;
      auto b = BackendRegistry::Create("gloo", o);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      int64_t v = r + 1;
      EXPECT_TRUE((*b)->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kMax).ok());
      EXPECT_EQ(v, 2);
      EXPECT_TRUE((*b)->Barrier().ok());  // keep both alive until both are done
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooBackendTest, BindsToNamedInterface) { AllreduceWithDevice("lo", 2); }

TEST(GlooBackendTest, MultiHostModeBindsToHostname) {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  addrinfo* info = nullptr;
  if (getaddrinfo(name, nullptr, nullptr, &info) != 0) {
    GTEST_SKIP() << "hostname '" << name << "' does not resolve here";
  }
  freeaddrinfo(info);
  AllreduceWithDevice("", 1);  // local_size 1 < size 2: as if on two hosts
}

// Two ranks as threads; `rank1` decides how rank 1 misbehaves while rank 0 runs allreduces.
Status RunAgainstFaultyPeer(milliseconds timeout,
                            const std::function<void(std::unique_ptr<Backend>)>& rank1,
                            double* seconds_in_failing_call) {
  InMemoryKeyValueStore store;
  BackendOptions o0 = Options(0, 2, &store, timeout), o1 = o0;
  o1.rank = o1.local_rank = 1;
  std::thread t([&] {
    auto b = BackendRegistry::Create("gloo", o1);
    if (b.ok()) rank1(std::move(*b));
  });
  auto b0 = BackendRegistry::Create("gloo", o0);
  Status result = b0.status();
  std::vector<float> buf(1 << 20, 1.0f);
  for (int i = 0; result.ok() && i < 1000; ++i) {
    const auto start = Clock::now();
    result = (*b0)->Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    *seconds_in_failing_call = SecondsSince(start);
  }
  t.join();
  if (!result.ok() && b0.ok()) {
    // Poisoned: the next call fails at once without touching the network.
    const Status again = (*b0)->Barrier();
    EXPECT_EQ(again.code(), StatusCode::kAborted);
    EXPECT_NE(again.message().find("unusable"), std::string::npos);
  }
  return result;
}

TEST(GlooBackendFailureTest, PeerClosingItsConnectionsAbortsQuickly) {
  double seconds = 0;
  const Status s = RunAgainstFaultyPeer(milliseconds(60000), [](std::unique_ptr<Backend> b) {
    std::this_thread::sleep_for(milliseconds(200));
    b.reset();  // closes its sockets while rank 0 waits in allreduce
  }, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("allreduce"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 of 2"), std::string::npos) << s.ToString();
  EXPECT_LT(seconds, 5);  // far below the 60 s timeout
}

// The TCP ports this network namespace listens on (IPv4, /proc/net/tcp state 0A).
std::set<int> ListeningPorts() {
  std::set<int> ports;
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state != "0A") continue;
    ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

// A stranger that, like a port scanner, connects to each port that starts listening after it
// starts, and closes at once; it stops once one of its connections was accepted.
class Stranger {
 public:
  Stranger() : before_(ListeningPorts()), thread_([this] { Run(); }) {}
  ~Stranger() {
    stop_ = true;
    thread_.join();
  }
  int accepted() const { return accepted_; }

 private:
  void Run() {
    std::set<int> tried;
    while (!stop_ && accepted_ == 0) {
      for (int port : ListeningPorts()) {
        if (before_.count(port) || !tried.insert(port).second) continue;
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) ++accepted_;
        ::close(fd);
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
  const std::set<int> before_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

TEST(GlooBackendTest, AStrangerOnAPairsPortWhileTheMeshFormsCostsOneAttempt) {
  // Rank 1 comes 500 ms late, so the stranger reaches rank 0's listening pair first: that
  // attempt fails on both ranks, and the mesh forms again on fresh ports.
  Stranger stranger;
  ::testing::internal::CaptureStderr();
  testutil::RunRanks("gloo", 2, [](int rank, Backend& b) {
    std::vector<float> v(1000, static_cast<float>(rank + 1));
    EXPECT_OK(b.Allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    EXPECT_EQ(v.front(), 3.0f);
    EXPECT_EQ(v.back(), 3.0f);
  }, milliseconds(60000), [](BackendOptions& o) {
    o.local_size = o.size;
    o.connect_timeout = milliseconds(2000);  // bounds the hijacked attempt (about 5 x 2 s)
    if (o.rank == 1) std::this_thread::sleep_for(milliseconds(500));
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_GE(stranger.accepted(), 1) << "the stranger found no port";
  EXPECT_NE(log.find("the mesh did not form"), std::string::npos) << log;
  EXPECT_NE(log.find("attempt 2 of 3"), std::string::npos) << log;
}

// Every pair proves the job secret before first use (runtime/common/auth/keyed_proof.h): a rank
// of another job (here: another secret) on the other end of a pair is found out at once, on both
// sides, and never used; each attempt fails so, and the last names the pair.
TEST(GlooBackendTest, APairWhoseOtherEndCannotProveTheSecretIsNeverUsed) {
  InMemoryKeyValueStore store;
  const std::string prefix = testutil::UniqueStorePrefix();
  std::vector<Status> results(2);
  const auto start = Clock::now();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      BackendOptions o = Options(rank, 2, &store, milliseconds(10000));
      o.store_prefix = prefix;
      o.secret = rank == 0 ? "this job's secret" : "another job's secret";
      results[rank] = BackendRegistry::Create("gloo", o).status();
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_FALSE(results[rank].ok()) << "rank " << rank;
    EXPECT_NE(results[rank].message().find("did not prove that it knows the job secret"), std::string::npos)
        << results[rank].ToString();
  }
  EXPECT_NE(results[0].message().find("the pair with rank 1"), std::string::npos) << results[0].ToString();
  EXPECT_LT(SecondsSince(start), 10) << "found out at once, not by a time-out";
}

TEST(GlooBackendFailureTest, StalledPeerTimesOut) {
  double seconds = 0;
  const Status s = RunAgainstFaultyPeer(milliseconds(500), [](std::unique_ptr<Backend> b) {
    std::this_thread::sleep_for(milliseconds(1500));  // alive but never joins the collective
  }, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_LT(seconds, 1.4);
}

// The all-gather and reduce-scatter rings (ring.h) with segments far smaller than the blocks, so
// that every block crosses in many segments through the two-deep window, odd segment sizes that
// do not divide the blocks (and, for the reduce-scatter, are rounded to whole elements), uneven
// and empty blocks, in place and not. The conformance suite runs the default 1 MiB segments.
void RunRanksWithSegments(int size, int64_t segment_bytes,
                          const std::function<void(int, Backend&)>& body, bool shm_allreduce = true) {
  InMemoryKeyValueStore store;
  const std::string prefix = testutil::UniqueStorePrefix();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      BackendOptions o = Options(r, size, &store, milliseconds(20000));
      o.store_prefix = prefix;
      o.segment_bytes = segment_bytes;
      o.shm_allreduce = shm_allreduce;
      auto b = BackendRegistry::Create("gloo", o);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      body(r, **b);
      const Status done = (*b)->Barrier();  // keep every rank alive until all are done
      EXPECT_TRUE(done.ok()) << "rank " << r << " of " << size << ", segment " << segment_bytes << ": "
                             << done.ToString();
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooRingTest, SegmentsFollowTheLinkRate) {
  using internal::SegmentBytesForLink;
  constexpr int64_t kKiB = 1024;
  EXPECT_EQ(SegmentBytesForLink(117e6), 512 * kKiB);    // 1 Gbit/s
  EXPECT_EQ(SegmentBytesForLink(1170e6), 4096 * kKiB);  // 10 Gbit/s
  EXPECT_EQ(SegmentBytesForLink(300e6), 1024 * kKiB);   // 1.05 MB a segment's time: 1 MiB
  EXPECT_EQ(SegmentBytesForLink(1e3), internal::kMinLinkSegmentBytes);
  EXPECT_EQ(SegmentBytesForLink(1e12), internal::kMaxLinkSegmentBytes);
  EXPECT_EQ(SegmentBytesForLink(0), internal::kDefaultSegmentBytes);
  EXPECT_EQ(SegmentBytesForLink(-1), internal::kDefaultSegmentBytes);
  EXPECT_EQ(SegmentBytesForLink(std::numeric_limits<double>::quiet_NaN()),
            internal::kDefaultSegmentBytes);
  EXPECT_EQ(SegmentBytesForLink(std::numeric_limits<double>::infinity()),
            internal::kDefaultSegmentBytes);
}

// Across hosts with no segment size given, each rank measures the ring when it connects; every
// rank must come out with the same segment size, or the rings would cut different segments and
// hang. A size the user gave is kept as it is, and one host keeps its blocks whole.
TEST(GlooBackendTest, AcrossHostsEveryRankSizesSegmentsToTheSameLink) {
  for (int64_t given : {int64_t{0}, int64_t{12345}}) {
    for (int local_size : {1, 3}) {
      InMemoryKeyValueStore store;
      const std::string prefix = testutil::UniqueStorePrefix();
      std::vector<int64_t> chosen(3, -1);
      std::vector<std::thread> threads;
      for (int r = 0; r < 3; ++r) {
        threads.emplace_back([&, r] {
          BackendOptions o = Options(r, 3, &store, milliseconds(20000));
          o.store_prefix = prefix;
          o.local_size = local_size;
          o.local_rank = local_size == 1 ? 0 : r;
          o.segment_bytes = given;
          o.shm_allreduce = false;
          o.iface = "lo";
          auto b = BackendRegistry::Create("gloo", o);
          ASSERT_TRUE(b.ok()) << b.status().ToString();
          chosen[r] = dynamic_cast<GlooBackend&>(**b).segment_bytes();
          std::vector<float> v(1000, static_cast<float>(r + 1));
          EXPECT_TRUE((*b)->Allreduce(v.data(), 1000, DataType::kFloat32, ReduceOp::kSum).ok());
          EXPECT_EQ(v[999], 6.0f);
          EXPECT_TRUE((*b)->Barrier().ok());
        });
      }
      for (auto& t : threads) t.join();
      SCOPED_TRACE("given " + std::to_string(given) + ", local size " + std::to_string(local_size));
      EXPECT_EQ(chosen[1], chosen[0]);
      EXPECT_EQ(chosen[2], chosen[0]);
      if (given > 0) {
        EXPECT_EQ(chosen[0], given);
      } else if (local_size == 3) {
        EXPECT_EQ(chosen[0], internal::kWholeBlocks);
      } else {
        EXPECT_GE(chosen[0], internal::kMinLinkSegmentBytes);
        EXPECT_LE(chosen[0], internal::kMaxLinkSegmentBytes);
        EXPECT_EQ(chosen[0] & (chosen[0] - 1), 0) << chosen[0] << " is not a power of two";
      }
    }
  }
}

TEST(GlooRingTest, AllgathervInManySegments) {
  for (int n : {2, 3, 4}) {
    for (int64_t segment : {1, 7, 1024}) {
      RunRanksWithSegments(n, segment, [n, segment](int rank, Backend& b) {
        std::vector<std::vector<int64_t>> patterns = {std::vector<int64_t>(n, 0)};
        std::vector<int64_t> uneven(n), one_empty(n);
        for (int r = 0; r < n; ++r) {
          uneven[r] = segment == 1 ? 3 + r : 5000 + r * 1237;
          one_empty[r] = r == 1 ? 0 : 50 + 13 * r;
        }
        patterns.push_back(uneven);
        patterns.push_back(one_empty);
        for (const auto& bytes : patterns) {
          const int64_t total = std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
          const int64_t offset =
              std::accumulate(bytes.begin(), bytes.begin() + rank, int64_t{0});
          for (bool in_place : {false, true}) {
            std::vector<char> out(total + 1, 0x5a), in(bytes[rank] + 1);
            char* src = in_place ? out.data() + offset : in.data();
            for (int64_t k = 0; k < bytes[rank]; ++k) src[k] = testutil::Byte(rank, 1, k);
            EXPECT_TRUE(b.Allgatherv(src, out.data(), bytes).ok());
            int64_t pos = 0, bad = 0;
            for (int r = 0; r < n; ++r) {
              for (int64_t k = 0; k < bytes[r]; ++k) bad += out[pos++] != testutil::Byte(r, 1, k);
            }
            EXPECT_EQ(bad, 0) << n << " ranks, segment " << segment << ", rank " << rank;
            EXPECT_EQ(out[total], 0x5a) << "wrote past the end";
          }
        }
      });
    }
  }
}

TEST(GlooRingTest, ReducescatterInManySegments) {
  const DataType kTypes[] = {DataType::kInt8, DataType::kInt32, DataType::kFloat16,
                             DataType::kFloat32, DataType::kFloat64};
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  for (int n : {2, 3, 4}) {
    for (int64_t segment : {3, 64}) {  // 3 bytes: rounded to whole elements (at least one)
      RunRanksWithSegments(n, segment, [&, n, segment](int rank, Backend& b) {
        std::vector<int64_t> lopsided(n);
        for (int r = 0; r < n; ++r) lopsided[r] = r == 1 ? 0 : 90 + 31 * r;
        for (const auto& counts : {testutil::EvenSplit(503, n), lopsided}) {
          const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
          const int64_t offset =
              std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
          for (DataType dtype : kTypes) {
            for (ReduceOp op : kOps) {
              std::vector<char> in = testutil::Buffer(total, dtype);
              for (int64_t i = 0; i < total; ++i) {
                testutil::Put(in.data(), i, dtype, testutil::Input(rank, i, dtype, op));
              }
              std::vector<char> out = testutil::Buffer(counts[rank], dtype);
              ASSERT_TRUE(b.Reducescatter(in.data(), out.data(), counts, dtype, op).ok());
              int64_t bad = 0;
              for (int64_t i = 0; i < counts[rank]; ++i) {
                bad += testutil::Get(out.data(), i, dtype) !=
                       testutil::Expected(n, offset + i, dtype, op);
              }
              EXPECT_EQ(bad, 0) << n << " ranks, segment " << segment << ", rank " << rank
                                << ", " << testutil::Describe(dtype, op, total);
              // In place: the output is this rank's own block of the input.
              const size_t width = DataTypeSize(dtype);
              char* own = in.data() + offset * width;
              ASSERT_TRUE(b.Reducescatter(in.data(), own, counts, dtype, op).ok());
              EXPECT_EQ(std::memcmp(own, out.data(), counts[rank] * width), 0)
                  << "in place, " << n << " ranks, segment " << segment << ", rank " << rank
                  << ", " << testutil::Describe(dtype, op, total);
            }
          }
        }
      });
    }
  }
}

// Forks (Backend::Fork) run collectives at the same time over the same connections, the way the
// runtime's lanes use them: on every rank, one thread per fork, each running a different kind of
// collective, with small segments so that their messages interleave on the pairs. Every result
// must be exact: a message matched by the wrong fork would corrupt one.
TEST(GlooForkTest, ForksRunCollectivesAtOnce) {
  constexpr int kRounds = 40;
  for (int n : {2, 3}) {
    RunRanksWithSegments(n, 256, [n](int rank, Backend& b) {
      std::unique_ptr<Backend> forks[2] = {b.Fork(), b.Fork()};
      ASSERT_TRUE(forks[0] && forks[1]);
      std::thread reducer([&] {
        for (int i = 0; i < kRounds; ++i) {
          std::vector<float> buf(3000 + 17 * i);
          for (size_t k = 0; k < buf.size(); ++k) buf[k] = static_cast<float>(rank + i + k % 7);
          ASSERT_TRUE(forks[0]->Allreduce(buf.data(), buf.size(), DataType::kFloat32,
                                          ReduceOp::kSum).ok());
          int64_t bad = 0;
          for (size_t k = 0; k < buf.size(); ++k) {
            bad += buf[k] != static_cast<float>(n * (n - 1) / 2 + n * (i + k % 7));
          }
          EXPECT_EQ(bad, 0) << "allreduce round " << i << ", rank " << rank;
        }
      });
      for (int i = 0; i < kRounds; ++i) {
        const std::vector<int64_t> counts = testutil::EvenSplit(2000 + 31 * i, n);
        const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
        const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
        std::vector<int32_t> in(total), part(counts[rank]), all(total);
        for (int64_t k = 0; k < total; ++k) in[k] = static_cast<int32_t>(k * (rank + 1) + i);
        ASSERT_TRUE(forks[1]->Reducescatter(in.data(), part.data(), counts, DataType::kInt32,
                                            ReduceOp::kSum).ok());
        std::vector<int64_t> bytes(n);
        for (int r = 0; r < n; ++r) bytes[r] = counts[r] * 4;
        ASSERT_TRUE(forks[1]->Allgatherv(part.data(), all.data(), bytes).ok());
        int64_t bad = 0;
        for (int64_t k = 0; k < total; ++k) {
          bad += all[k] != static_cast<int32_t>(k * n * (n + 1) / 2 + n * i);
        }
        EXPECT_EQ(bad, 0) << "reduce-scatter + all-gather round " << i << ", rank " << rank
                          << " (offset " << offset << ")";
      }
      reducer.join();
      // The parent's own tag space is untouched by its forks'.
      std::vector<double> one(5, 1.0);
      EXPECT_TRUE(b.Allreduce(one.data(), one.size(), DataType::kFloat64, ReduceOp::kSum).ok());
      EXPECT_EQ(one[4], n);
    });
  }
}

// A failure on one fork poisons the backend and every other fork: each later call fails at once.
TEST(GlooForkTest, FailureOnOneForkPoisonsTheOthers) {
  InMemoryKeyValueStore store;
  BackendOptions o0 = Options(0, 2, &store, milliseconds(60000)), o1 = o0;
  o1.rank = o1.local_rank = 1;
  std::thread peer([&] {
    auto b = BackendRegistry::Create("gloo", o1);
    if (!b.ok()) return;
    auto fork = (*b)->Fork();
    std::this_thread::sleep_for(milliseconds(200));
    fork.reset();
    b->reset();  // closes its sockets while rank 0 waits in an allreduce on its fork
  });
  auto b0 = BackendRegistry::Create("gloo", o0);
  ASSERT_TRUE(b0.ok()) << b0.status().ToString();
  std::unique_ptr<Backend> fork = (*b0)->Fork(), other = (*b0)->Fork();
  ASSERT_TRUE(fork && other);
  std::vector<float> buf(1 << 18, 1.0f);
  Status s;
  for (int i = 0; s.ok() && i < 100000; ++i) {
    s = fork->Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  }
  peer.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  for (Backend* b : {b0->get(), other.get()}) {
    const auto start = Clock::now();
    const Status again = b->Barrier();
    EXPECT_EQ(again.code(), StatusCode::kAborted) << again.ToString();
    EXPECT_NE(again.message().find("unusable"), std::string::npos) << again.ToString();
    EXPECT_LT(SecondsSince(start), 1.0);
  }
}

// The threads of this process that run SCHED_FIFO now.
int RealtimeThreads() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* d = readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    if (sched_getscheduler(std::atoi(d->d_name)) == SCHED_FIFO) ++n;
  }
  closedir(dir);
  return n;
}

// realtime_threads: Gloo's transport thread (one per backend) runs SCHED_FIFO, where allowed;
// without it, no thread of the backend does. The calling thread keeps its scheduling.
TEST(GlooBackendTest, RealtimeThreadsMakeTheTransportThreadRealtime) {
  const int before = RealtimeThreads();
  ASSERT_GE(before, 0);
  {
    sched_param param{};
    param.sched_priority = 1;
    std::thread probe([&] {
      if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) != 0) param.sched_priority = 0;
    });
    probe.join();
    if (param.sched_priority == 0) GTEST_SKIP() << "real-time scheduling is not allowed here";
  }
  for (bool realtime : {false, true}) {
    InMemoryKeyValueStore store;
    const std::string prefix = testutil::UniqueStorePrefix();
    std::vector<std::unique_ptr<Backend>> backends(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        BackendOptions o = Options(r, 2, &store, milliseconds(20000));
        o.store_prefix = prefix;
        o.realtime_threads = realtime;
        auto b = BackendRegistry::Create("gloo", o);
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        backends[r] = std::move(*b);
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(RealtimeThreads() - before, realtime ? 2 : 0) << "realtime_threads " << realtime;
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
    std::vector<float> one(3, 1.0f);  // and they still work
    threads.clear();
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        EXPECT_TRUE(backends[r]->Allreduce(one.data() + r, 1, DataType::kFloat32,
                                           ReduceOp::kSum).ok());
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(one[0], 2.0f);
    EXPECT_EQ(one[1], 2.0f);
  }
}


// A fused allreduce over the ring (no shared memory: as across hosts), its tensors reduced where
// they lie (Backend::AllreducePieces): pieces of uneven sizes, empty ones, pieces longer than a
// segment and segments that span several pieces; in place and out of place; a joined rank's
// pieces (no input: zeros; no output: dropped); the epilogue (postscale, then Average's
// division). Every rank gets the reference's values, and the same bits.
TEST(GlooRingTest, AllreducePiecesWhereTheyLie) {
  const std::vector<int64_t> counts = {5, 0, 300, 1, 77, 0, 1024, 13};
  for (int n : {2, 3, 4}) {
    for (int64_t segment : {12, 256, 1 << 20}) {
      std::vector<std::vector<float>> results(n);
      RunRanksWithSegments(n, segment, [&, n, segment](int rank, Backend& b) {
        ASSERT_TRUE(b.ReducesPieces());
        const std::pair<DataType, ReduceOp> kCases[] = {{DataType::kInt32, ReduceOp::kSum},
                                                         {DataType::kFloat32, ReduceOp::kMax},
                                                         {DataType::kFloat64, ReduceOp::kProduct}};
        for (const auto& [dtype, op] : kCases) {
          {
            for (bool in_place : {false, true}) {
              std::vector<std::vector<char>> in(counts.size()), out(counts.size());
              std::vector<AllreducePiece> pieces(counts.size());
              int64_t at = 0;
              for (size_t t = 0; t < counts.size(); ++t) {
                in[t] = testutil::Buffer(counts[t], dtype);
                for (int64_t i = 0; i < counts[t]; ++i) {
                  testutil::Put(in[t].data(), i, dtype, testutil::Input(rank, at + i, dtype, op));
                }
                out[t] = in_place ? in[t] : testutil::Buffer(counts[t], dtype);
                pieces[t] = {in[t].data(), (in_place ? in[t] : out[t]).data(), counts[t]};
                at += counts[t];
              }
              ASSERT_TRUE(b.AllreducePieces(pieces, dtype, op, AllreduceEpilogue{}).ok());
              int64_t bad = 0;
              at = 0;
              for (size_t t = 0; t < counts.size(); ++t) {
                const char* got = in_place ? in[t].data() : out[t].data();
                for (int64_t i = 0; i < counts[t]; ++i) {
                  bad += testutil::Get(got, i, dtype) != testutil::Expected(n, at + i, dtype, op);
                }
                if (!in_place) {  // the input is only read
                  for (int64_t i = 0; i < counts[t]; ++i) {
                    bad += testutil::Get(in[t].data(), i, dtype) != testutil::Input(rank, at + i, dtype, op);
                  }
                }
                at += counts[t];
              }
              EXPECT_EQ(bad, 0) << n << " ranks, segment " << segment << ", rank " << rank
                                << (in_place ? ", in place, " : ", out of place, ")
                                << testutil::Describe(dtype, op, at);
            }
          }
        }
        // Average of float32 with a postscale, rank 1 joined (no inputs, no outputs): the sum of
        // the others' values times 0.5, divided by the size, the same bits on every rank.
        std::vector<std::vector<float>> in(counts.size());
        std::vector<AllreducePiece> pieces(counts.size());
        for (size_t t = 0; t < counts.size(); ++t) {
          for (int64_t i = 0; i < counts[t]; ++i) in[t].push_back(0.1f * static_cast<float>(i % 97) + 1.7f * rank + t);
          pieces[t] = {in[t].data(), in[t].data(), counts[t]};
          if (rank == 1) pieces[t] = {nullptr, nullptr, counts[t]};
        }
        ASSERT_TRUE(b.AllreducePieces(pieces, DataType::kFloat32, ReduceOp::kSum, AllreduceEpilogue{0.5, n}).ok());
        if (rank == 1) return;
        for (size_t t = 0; t < counts.size(); ++t) {
          for (int64_t i = 0; i < counts[t]; ++i) {
            float sum = 0;
            for (int r = 0; r < n; ++r) {
              if (r != 1) sum += 0.1f * static_cast<float>(i % 97) + 1.7f * r + t;
            }
            EXPECT_NEAR(in[t][i], sum * 0.5f / n, 1e-4f) << "rank " << rank << ", piece " << t << ", " << i;
            results[rank].push_back(in[t][i]);
          }
        }
      }, /*shm_allreduce=*/false);
      for (int r = 2; r < n; ++r) {
        EXPECT_EQ(0, std::memcmp(results[0].data(), results[r].data(), results[0].size() * sizeof(float)))
            << "rank " << r << " of " << n << " has other bits than rank 0";
      }
    }
  }
}

}  // namespace
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
