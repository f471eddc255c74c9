// The runtime's lifecycle with N ranks as threads in one process (real control channel over
// loopback, real Gloo data plane, one in-memory rendezvous store shared by every incarnation, as
// dadtrun's server is): start, collective, shutdown, start again, with ranks arriving at each step
// at different moments, collectives in flight at shutdown, and what a stopped runtime gives back.
#include <dirent.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/rendezvous/in_memory_store.h"
#include "runtime/common/rendezvous/scoped_store.h"
#include "runtime/core/runtime.h"

namespace dadt {
namespace core {
namespace {

using std::chrono::milliseconds;

RuntimeOptions Options(int rank, int size, int64_t incarnation) {
  RuntimeOptions o;
  o.rank = rank;
  o.size = size;
  o.local_rank = rank;
  o.local_size = size;
  o.secret = "s3cret";
  o.incarnation = incarnation;
  // Short enough that a rank reading a stale address fails the test quickly, long enough for a
  // loaded 2-core machine.
  o.start_timeout = std::chrono::seconds(10);
  o.op_timeout = std::chrono::seconds(20);
  return o;
}

// Every rank's runtime sees the one job store; a ScopedStore with no prefix is a non-owning view.
std::unique_ptr<KeyValueStore> View(KeyValueStore* job) {
  return std::make_unique<rendezvous::ScopedStore>(job, "");
}

// Runs body(rank) on `size` threads and joins them.
void OnRanks(int size, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

Status SumOnes(Runtime& rt, const std::string& name, float* result) {
  std::vector<float> in(8, 1.f);
  TensorEntry e;
  e.request.op = OpType::kAllreduce;
  e.request.name = name;
  e.request.dtype = DataType::kFloat32;
  e.request.shape = {8};
  e.request.reduce_op = ReduceOp::kSum;
  e.input = in.data();
  e.output = in.data();
  auto h = rt.Enqueue(std::move(e));
  if (!h.ok()) return h.status();
  Status s = rt.handles().Wait(*h);
  *result = in[0];
  return s;
}

int CountEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// This process's open descriptors by kind ("socket", "anon_inode:[eventfd]", "pipe", a path).
std::multiset<std::string> Descriptors() {
  std::multiset<std::string> kinds;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[256] = {0};
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(link.c_str(), target, sizeof(target) - 1) <= 0) continue;
      std::string kind = target;
      if (kind.rfind("socket:", 0) == 0 || kind.rfind("pipe:", 0) == 0) {
        kind = kind.substr(0, kind.find(':'));  // "socket:[123]" -> "socket"
      }
      kinds.insert(kind);
    }
    closedir(d);
  }
  return kinds;
}

std::string Join(const std::multiset<std::string>& s) {
  std::string out;
  for (const auto& k : s) out += (out.empty() ? "" : ", ") + k;
  return out;
}

class RuntimeLifecycleTest : public ::testing::TestWithParam<int> {};

// The k-th start of every rank meets the k-th of the others although the store still holds every
// key the earlier incarnations published: in each one a different rank arrives late at Start (so
// the others ask for the coordinator's address before rank 0 has published it anew) and another
// arrives late at Shutdown.
TEST_P(RuntimeLifecycleTest, StartsAgainAndAgainWithRanksArrivingLate) {
  const int size = GetParam();
  rendezvous::InMemoryStore job;
  constexpr int kIncarnations = 6;
  OnRanks(size, [&](int rank) {
    for (int k = 0; k < kIncarnations; ++k) {
      if (rank == k % size) std::this_thread::sleep_for(milliseconds(150));
      auto rt = Runtime::Start(Options(rank, size, k), View(&job));
      ASSERT_TRUE(rt.ok()) << "incarnation " << k << ", rank " << rank << ": "
                           << rt.status().ToString();
      float sum = 0;
      Status s = SumOnes(**rt, "step", &sum);
      ASSERT_TRUE(s.ok()) << "incarnation " << k << ": " << s.ToString();
      EXPECT_EQ(sum, static_cast<float>(size)) << "incarnation " << k;
      if (rank == (k + 1) % size) std::this_thread::sleep_for(milliseconds(100));
      (*rt)->Shutdown();
    }
  });
}

// A collective that some rank never submits fails on the ranks that did, with an error naming
// the shutdown, as soon as another rank shuts down; the next incarnation is unaffected.
TEST_P(RuntimeLifecycleTest, ShutdownFailsCollectivesInFlightThenTheNextIncarnationWorks) {
  const int size = GetParam();
  if (size < 2) GTEST_SKIP() << "needs a rank that shuts down while another waits";
  rendezvous::InMemoryStore job;
  const int quitter = size - 1;
  OnRanks(size, [&](int rank) {
    auto rt = Runtime::Start(Options(rank, size, 0), View(&job));
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    if (rank == quitter) {
      std::this_thread::sleep_for(milliseconds(100));  // the others are waiting by now
      (*rt)->Shutdown();
    } else {
      float sum = 0;
      Status s = SumOnes(**rt, "never.completed", &sum);
      EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
      EXPECT_NE(s.message().find("shut down by rank " + std::to_string(quitter)), std::string::npos)
          << s.message();
      // The stopped runtime refuses new work with the same reason instead of hanging.
      Status after = SumOnes(**rt, "after.shutdown", &sum);
      EXPECT_FALSE(after.ok());
      (*rt)->Shutdown();
    }
    auto again = Runtime::Start(Options(rank, size, 1), View(&job));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    float sum = 0;
    Status s = SumOnes(**again, "never.completed", &sum);  // the same name, a new incarnation
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(sum, static_cast<float>(size));
    (*again)->Shutdown();
  });
}

// Shutdown gives back the runtime's threads and sockets at once, while the object itself (and its
// handles) may live on until the next init replaces it.
TEST_P(RuntimeLifecycleTest, ShutdownReleasesThreadsAndDescriptors) {
  const int size = GetParam();
  rendezvous::InMemoryStore job;
  // Both incarnations' stopped runtimes stay alive to the end: what they still held would show.
  std::vector<std::vector<std::unique_ptr<Runtime>>> stopped(2);
  for (auto& s : stopped) s.resize(size);
  std::vector<std::vector<int64_t>> handles(2, std::vector<int64_t>(size, -1));
  // One cycle first: whatever a library creates once per process (Gloo's, the allocator's) is
  // not a leak of the lifecycle.
  for (int k = 0; k < 2; ++k) {
    const auto fds_before = Descriptors();
    const int threads_before = CountEntries("/proc/self/task");
    OnRanks(size, [&](int rank) {
      auto rt = Runtime::Start(Options(rank, size, k), View(&job));
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      float sum = 0;
      ASSERT_TRUE(SumOnes(**rt, "x", &sum).ok());
      // A handle completed before shutdown still answers afterwards.
      TensorEntry barrier;
      barrier.request.op = OpType::kBarrier;
      barrier.request.name = "b";
      auto h = (*rt)->Enqueue(std::move(barrier));
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE((*rt)->handles().Wait(*h).ok());
      handles[k][rank] = *h;
      (*rt)->Shutdown();
      stopped[k][rank] = std::move(*rt);
    });
    if (k == 0) continue;
    // What a stopped runtime keeps is its TensorQueue's wake-up eventfd (closed with the object):
    // one for each of this incarnation's `size` runtimes, and nothing else.
    auto fds_after = Descriptors();
    for (int r = 0; r < size; ++r) {
      auto it = fds_after.find("anon_inode:[eventfd]");
      ASSERT_NE(it, fds_after.end()) << "no wake-up eventfd for a stopped runtime";
      fds_after.erase(it);
    }
    EXPECT_EQ(fds_after, fds_before) << "descriptors left open by shutdown\nbefore: "
                                     << Join(fds_before) << "\nafter:  " << Join(fds_after);
    EXPECT_EQ(CountEntries("/proc/self/task"), threads_before) << "threads left by shutdown";
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(stopped[k][r]->handles().Poll(handles[k][r]), 1);
      // The earlier incarnation's handle names nothing in this one (its ids start elsewhere).
      EXPECT_EQ(stopped[k][r]->handles().Poll(handles[0][r]), -1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RuntimeLifecycleTest, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace core
}  // namespace dadt
