// Lanes (runtime/core/lanes.h): CPU collectives on several threads over backend forks.
// Covers: no lanes without forks; many responses spread over the lanes give exact results on
// every rank (real Gloo, ranks as threads: the lanes must run the same collectives in the same
// order everywhere, or values go wrong or the ranks hang); Cancel fails only what has not
// started; the first failure is kept once, wakes the loop thread and every entry taken is
// completed; an entry the response does not name is failed, not leaked; the destructor drains.
// The failure cases use a fake forking backend whose collectives wait on a gate, so that "not
// started yet" is a fact of the test, not a matter of timing.
#include "runtime/core/lanes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace core {
namespace {

using testutil::RunRanks;
constexpr auto kGenerous = std::chrono::seconds(30);  // only to turn a hang into a failure

// State shared by a fake backend and its forks.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;        // collectives wait while false
  int entered = 0;         // collectives that started
  int fail_at = -1;        // the entered-th collective (0-based) fails and poisons every fork
  Status poison;
};

class GatedBackend : public backends::Backend {
 public:
  explicit GatedBackend(std::shared_ptr<Shared> shared, bool can_fork = true)
      : shared_(std::move(shared)), can_fork_(can_fork) {}
  const char* Name() const override { return "GATED"; }
  Status Allreduce(void*, int64_t, DataType, ReduceOp) override { return Collective(); }
  Status Allgatherv(const void*, void*, const std::vector<int64_t>&) override { return Collective(); }
  Status Broadcast(void*, int64_t, int) override { return Collective(); }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*,
                   const std::vector<int64_t>&) override {
    return Collective();
  }
  Status Reducescatter(const void*, void*, const std::vector<int64_t>&, DataType,
                       ReduceOp) override {
    return Collective();
  }
  Status Barrier() override { return Collective(); }
  std::unique_ptr<Backend> Fork() override {
    return can_fork_ ? std::make_unique<GatedBackend>(shared_) : nullptr;
  }

 private:
  Status Collective() {
    std::unique_lock<std::mutex> lock(shared_->mu);
    const int me = shared_->entered++;
    shared_->cv.notify_all();
    if (!shared_->poison.ok()) return shared_->poison;
    if (me == shared_->fail_at) {
      shared_->poison = Aborted("injected failure in collective " + std::to_string(me));
      shared_->cv.notify_all();
      return shared_->poison;
    }
    if (!shared_->cv.wait_for(lock, kGenerous, [&] { return shared_->open || !shared_->poison.ok(); })) {
      return TimeoutError("gate never opened");
    }
    return shared_->poison;
  }
  std::shared_ptr<Shared> shared_;
  bool can_fork_;
};

// One rank's handles and queue, and lanes over `backend`.
struct Loop {
  Loop(backends::Backend* backend, int count, int rank = 0, int size = 1)
      : lanes(Lanes::Create(backend, count, rank, size, &handles, &queue, nullptr, false, [this] {
          std::lock_guard<std::mutex> lock(mu);
          ++wakes;
          cv.notify_all();
        })) {}
  ~Loop() { lanes.reset(); }  // before the handles and queue it completes into

  // Builds the entry of a one-tensor allreduce of `data` (in place) and its response.
  std::pair<Response, EntryMap> Allreduce(const std::string& name, std::vector<float>& data,
                                          int64_t* handle) {
    TensorEntry e;
    e.request.name = name;
    e.request.shape = {static_cast<int64_t>(data.size())};
    e.input = data.data();
    e.output = data.data();
    e.handle = *handle = handles.Create();
    EXPECT_TRUE(queue.Push(e).ok());
    queue.Drain();
    Response r;
    r.names = {name};
    r.sizes = {static_cast<int64_t>(data.size())};
    EntryMap m;
    m.emplace(name, e);
    return {r, std::move(m)};
  }
  void Submit(const std::string& name, std::vector<float>& data, int64_t* handle) {
    auto job = Allreduce(name, data, handle);
    lanes->Submit(job.first, std::move(job.second));
  }
  bool WaitForWake() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kGenerous, [&] { return wakes > 0; });
  }

  HandleTable handles;
  TensorQueue queue;
  std::mutex mu;
  std::condition_variable cv;
  int wakes = 0;
  std::unique_ptr<Lanes> lanes;
};

void WaitEntered(Shared& s, int n) {
  std::unique_lock<std::mutex> lock(s.mu);
  ASSERT_TRUE(s.cv.wait_for(lock, kGenerous, [&] { return s.entered >= n; }))
      << "only " << s.entered << " collectives started";
}

TEST(Lanes, NoLanesWithoutForksOrWithOneLane) {
  auto shared = std::make_shared<Shared>();
  GatedBackend no_fork(shared, /*can_fork=*/false);
  EXPECT_EQ(Loop(&no_fork, 2).lanes, nullptr);
  GatedBackend forks(shared);
  EXPECT_EQ(Loop(&forks, 1).lanes, nullptr);
  EXPECT_NE(Loop(&forks, 2).lanes, nullptr);
}

TEST(Lanes, RunsOnlyCpuCollectivesThatMoveDataAndAreNotEager) {
  Response r;
  EXPECT_TRUE(Lanes::Runs(r));
  r.device = kStagedGpuDevice;  // staged through host memory by the front end
  EXPECT_TRUE(Lanes::Runs(r));
  r.device = 0;
  EXPECT_FALSE(Lanes::Runs(r));
  r.device = kCpuDevice;
  r.eager = true;
  EXPECT_FALSE(Lanes::Runs(r));
  r.eager = false;
  for (auto t : {Response::Type::kBarrier, Response::Type::kJoin, Response::Type::kError}) {
    r.type = t;
    EXPECT_FALSE(Lanes::Runs(r));
  }
}

class LanesGlooTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(LanesGlooTest, ManyResponsesOverTheLanesGiveExactSumsOnEveryRank) {
  const int n = std::get<0>(GetParam());
  const int count = std::get<1>(GetParam());
  constexpr int kResponses = 40;
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    Loop loop(&backend, count, rank, n);
    ASSERT_NE(loop.lanes, nullptr);
    std::vector<std::vector<float>> data(kResponses);
    std::vector<int64_t> handles(kResponses);
    for (int t = 0; t < kResponses; ++t) {
      // Sizes vary so that the lanes finish out of order; 1000 floats and more take Gloo's ring.
      const int64_t elements = (t % 4 == 0) ? 5000 + t : 1 + t;
      for (int64_t i = 0; i < elements; ++i) data[t].push_back(static_cast<float>(rank + t + i % 7));
      loop.Submit("t" + std::to_string(t), data[t], &handles[t]);
    }
    loop.lanes->Drain();
    EXPECT_OK(loop.lanes->TakeFailure());
    for (int t = 0; t < kResponses; ++t) {
      ASSERT_EQ(loop.handles.Poll(handles[t]), 1) << "t" << t << " not complete after Drain";
      EXPECT_OK(loop.handles.Wait(handles[t]));
      for (size_t i = 0; i < data[t].size(); ++i) {
        const float expected = n * (n - 1) / 2.0f + n * static_cast<float>(t + i % 7);
        if (data[t][i] != expected) {
          ADD_FAILURE() << "t" << t << "[" << i << "] = " << data[t][i] << ", want " << expected;
          break;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(RanksAndLanes, LanesGlooTest,
                         ::testing::Values(std::make_tuple(2, 2), std::make_tuple(3, 2),
                                           std::make_tuple(2, 3)));

TEST(Lanes, CancelFailsOnlyWhatHasNotStarted) {
  auto shared = std::make_shared<Shared>();
  shared->open = false;
  GatedBackend backend(shared);
  Loop loop(&backend, 2);
  // Opens the gate however the test ends (before `loop` drains), so that a failed assertion does
  // not wait out kGenerous.
  std::shared_ptr<void> open_gate(nullptr, [&shared](void*) {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->open = true;
    shared->cv.notify_all();
  });
  std::vector<std::vector<float>> data(4, std::vector<float>(2, 1.0f));
  std::vector<int64_t> h(4);
  for (int i = 0; i < 4; ++i) loop.Submit("t" + std::to_string(i), data[i], &h[i]);
  WaitEntered(*shared, 2);  // t0 on lane 0 and t1 on lane 1 are running; t2 and t3 wait
  loop.lanes->Cancel(Aborted("shutting down"));
  for (int i : {2, 3}) {
    ASSERT_EQ(loop.handles.Poll(h[i]), 1) << "t" << i << " was queued: Cancel completes it";
    Status s = loop.handles.Wait(h[i]);
    EXPECT_EQ(s.code(), StatusCode::kAborted);
    EXPECT_EQ(s.message(), "shutting down");
  }
  EXPECT_EQ(loop.handles.Poll(h[0]), 0);
  EXPECT_EQ(loop.handles.Poll(h[1]), 0);
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->open = true;
  }
  shared->cv.notify_all();
  loop.lanes->Drain();
  EXPECT_OK(loop.handles.Wait(h[0]));
  EXPECT_OK(loop.handles.Wait(h[1]));
  EXPECT_EQ(shared->entered, 2);  // the cancelled ones never reached the backend
  EXPECT_OK(loop.lanes->TakeFailure());
}

TEST(Lanes, FirstFailureIsKeptOnceWakesTheLoopAndEveryEntryCompletes) {
  auto shared = std::make_shared<Shared>();
  shared->fail_at = 1;
  GatedBackend backend(shared);
  Loop loop(&backend, 2);
  constexpr int kJobs = 8;
  std::vector<std::vector<float>> data(kJobs, std::vector<float>(3, 1.0f));
  std::vector<int64_t> h(kJobs);
  for (int i = 0; i < kJobs; ++i) loop.Submit("t" + std::to_string(i), data[i], &h[i]);
  ASSERT_TRUE(loop.WaitForWake()) << "a failing lane did not wake the loop thread";
  loop.lanes->Drain();  // must not hang: what is queued behind the failure fails at once
  int failed = 0;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(loop.handles.Poll(h[i]), 1) << "t" << i << " never completed";
    Status s = loop.handles.Wait(h[i]);
    if (!s.ok()) {
      ++failed;
      EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    }
  }
  EXPECT_GE(failed, kJobs - 1);  // only a collective that finished before the failure succeeds
  Status first = loop.lanes->TakeFailure();
  EXPECT_EQ(first.code(), StatusCode::kAborted);
  EXPECT_NE(first.message().find("injected failure"), std::string::npos) << first.message();
  EXPECT_OK(loop.lanes->TakeFailure());  // taken once
  std::lock_guard<std::mutex> lock(loop.mu);
  EXPECT_EQ(loop.wakes, 1);
}

TEST(Lanes, EntryTheResponseDoesNotNameIsFailedNotLeaked) {
  auto shared = std::make_shared<Shared>();
  GatedBackend backend(shared);
  Loop loop(&backend, 2);
  std::vector<float> a(2, 1.0f), stray(2, 1.0f);
  int64_t ha, hs;
  auto job = loop.Allreduce("a", a, &ha);
  auto extra = loop.Allreduce("stray", stray, &hs);
  job.second.insert(extra.second.begin(), extra.second.end());
  loop.lanes->Submit(job.first, std::move(job.second));
  loop.lanes->Drain();
  EXPECT_OK(loop.handles.Wait(ha));
  ASSERT_EQ(loop.handles.Poll(hs), 1);
  Status s = loop.handles.Wait(hs);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("'stray'"), std::string::npos) << s.message();
  EXPECT_TRUE(loop.queue.Push([] {
    TensorEntry e;
    e.request.name = "stray";
    return e;
  }()).ok()) << "the stray name is still in flight";
}

TEST(Lanes, DestructorRunsWhatIsQueued) {
  auto shared = std::make_shared<Shared>();
  GatedBackend backend(shared);
  constexpr int kJobs = 10;
  std::vector<std::vector<float>> data(kJobs, std::vector<float>(1, 1.0f));
  std::vector<int64_t> h(kJobs);
  Loop loop(&backend, 3);
  for (int i = 0; i < kJobs; ++i) loop.Submit("t" + std::to_string(i), data[i], &h[i]);
  loop.lanes.reset();
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(loop.handles.Poll(h[i]), 1) << "t" << i;
    EXPECT_OK(loop.handles.Wait(h[i]));
  }
  EXPECT_EQ(shared->entered, kJobs);
}

}  // namespace
}  // namespace core
}  // namespace dadt
