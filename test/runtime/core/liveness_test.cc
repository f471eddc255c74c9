// Liveness bookkeeping on a fake clock (who is silent, when to warn and repeat, when to end), the
// heartbeat's wire format, the DADT_LIVENESS_* environment, and LivenessWatch itself with three
// ranks as threads over loopback UDP: a rank that stops sending is named on every rank, and the
// job ends on every other rank naming it.
#include "runtime/core/liveness.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/common/env.h"
#include "runtime/core/liveness_watch.h"

namespace dadt {
namespace core {
namespace {

using Clock = LivenessTracker::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

LivenessOptions Options(int warning_ms, int shutdown_ms) {
  LivenessOptions o;
  o.warning_time = milliseconds(warning_ms);
  o.shutdown_time = milliseconds(shutdown_ms);
  return o;
}

TEST(LivenessTrackerTest, NobodyIsSilentWhileHeartbeatsArrive) {
  const Clock::time_point t0 = Clock::now();
  LivenessTracker t(Options(2000, 6000), {1, 2}, t0);
  for (int s = 1; s <= 10; ++s) {
    t.OnHeard(1, t0 + seconds(s));
    t.OnHeard(2, t0 + seconds(s));
    EXPECT_TRUE(t.Silent(t0 + seconds(s) + milliseconds(1500)).empty());
  }
}

TEST(LivenessTrackerTest, SilentRankIsNamedAfterTheWarningTimeLongestFirst) {
  const Clock::time_point t0 = Clock::now();
  LivenessTracker t(Options(2000, 6000), {1, 2, 3}, t0);
  t.OnHeard(1, t0 + seconds(1));
  t.OnHeard(3, t0 + seconds(3));
  EXPECT_TRUE(t.Silent(t0 + milliseconds(1999)).empty());
  auto silent = t.Silent(t0 + milliseconds(3500));
  ASSERT_EQ(silent.size(), 2u);
  EXPECT_EQ(silent[0].rank, 2);
  EXPECT_EQ(silent[0].silent, milliseconds(3500));
  EXPECT_EQ(silent[1].rank, 1);
  EXPECT_EQ(silent[1].silent, milliseconds(2500));
}

TEST(LivenessTrackerTest, WarnsOnceThenAgainEveryWarningTimeAndEndsAtTheShutdownTime) {
  const Clock::time_point t0 = Clock::now();
  LivenessTracker t(Options(2000, 6000), {1}, t0);
  auto at = [&](int ms) { return t.Decide(t.Silent(t0 + milliseconds(ms)), t0 + milliseconds(ms)); };
  EXPECT_FALSE(at(1000).warn);
  EXPECT_TRUE(at(2000).warn);
  EXPECT_FALSE(at(2500).warn);
  EXPECT_FALSE(at(3999).warn);
  EXPECT_TRUE(at(4000).warn);
  EXPECT_FALSE(at(5999).end);
  const LivenessVerdict v = at(6000);
  EXPECT_TRUE(v.end);
}

TEST(LivenessTrackerTest, ASilenceThatEndsResetsTheRepeat) {
  const Clock::time_point t0 = Clock::now();
  LivenessTracker t(Options(2000, 6000), {1}, t0);
  EXPECT_TRUE(t.Decide(t.Silent(t0 + seconds(2)), t0 + seconds(2)).warn);
  t.OnHeard(1, t0 + milliseconds(2100));  // only slow: it came back
  EXPECT_FALSE(t.Decide(t.Silent(t0 + seconds(3)), t0 + seconds(3)).warn);
  // Silent again: a new silence warns as soon as it reaches the warning time.
  EXPECT_TRUE(t.Decide(t.Silent(t0 + milliseconds(4100)), t0 + milliseconds(4100)).warn);
}

TEST(LivenessTrackerTest, AReportedSilenceDecidesLikeAnOwnOne) {
  // A worker learns of other workers from rank 0's verdict.
  const Clock::time_point t0 = Clock::now();
  LivenessTracker t(Options(2000, 6000), {0}, t0);
  const LivenessVerdict v = t.Decide({SilentPeer{2, milliseconds(6100)}}, t0 + seconds(1));
  EXPECT_TRUE(v.warn);
  EXPECT_TRUE(v.end);
}

TEST(LivenessTrackerTest, ForgottenRankIsNeverSilentAndOffMeansNothing) {
  const Clock::time_point t0 = Clock::now();
  LivenessTracker t(Options(2000, 6000), {0}, t0);
  t.Forget(0);
  EXPECT_TRUE(t.Silent(t0 + seconds(100)).empty());
  LivenessTracker off(LivenessOptions::Off(), {0}, t0);
  EXPECT_TRUE(off.Silent(t0 + seconds(100)).empty());
}

TEST(HeartbeatTest, RoundTripsWithAndWithoutAVerdict) {
  Heartbeat hb;
  hb.token = 0xfedcba9876543210ULL;
  hb.rank = 3;
  hb.seq = 42;
  auto back = DecodeHeartbeat(EncodeHeartbeat(hb));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->token, hb.token);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->seq, 42u);
  EXPECT_TRUE(back->silent.empty());
  EXPECT_FALSE(back->end);

  hb.rank = 0;
  hb.silent = {SilentPeer{1, milliseconds(6500)}, SilentPeer{7, milliseconds(2000)}};
  hb.end = true;
  back = DecodeHeartbeat(EncodeHeartbeat(hb));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->silent.size(), 2u);
  EXPECT_EQ(back->silent[0].rank, 1);
  EXPECT_EQ(back->silent[0].silent, milliseconds(6500));
  EXPECT_EQ(back->silent[1].rank, 7);
  EXPECT_TRUE(back->end);
}

TEST(HeartbeatTest, JunkIsRefused) {
  for (const char* junk : {"", "hello", "dadt-hb 1 2", "dadt-hb x 1 2", "dadt-hb 1 -1 2",
                           "dadt-hb 1 0 2 1:x", "dadt-hb 1 0 2 a:5", "other 1 0 2"}) {
    EXPECT_FALSE(DecodeHeartbeat(junk).has_value()) << junk;
  }
}

class LivenessEnvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv(env::kLivenessTimeout);
    unsetenv(env::kLivenessShutdownTime);
  }
};

TEST_F(LivenessEnvTest, DefaultsAreTenAndSixtySeconds) {
  auto o = LivenessOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->warning_time, seconds(10));
  EXPECT_EQ(o->shutdown_time, seconds(60));
  EXPECT_EQ(o->heartbeat_interval(), seconds(1));
}

TEST_F(LivenessEnvTest, FractionalSecondsZeroTurnsItOffAndJunkIsNamed) {
  setenv(env::kLivenessTimeout, "0.5", 1);
  setenv(env::kLivenessShutdownTime, "1.5", 1);
  auto o = LivenessOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->warning_time, milliseconds(500));
  EXPECT_EQ(o->shutdown_time, milliseconds(1500));
  EXPECT_EQ(o->heartbeat_interval(), milliseconds(100));

  setenv(env::kLivenessTimeout, "0", 1);
  o = LivenessOptions::FromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->enabled());

  setenv(env::kLivenessTimeout, "soon", 1);
  o = LivenessOptions::FromEnv();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find(env::kLivenessTimeout), std::string::npos);

  setenv(env::kLivenessTimeout, "5", 1);
  setenv(env::kLivenessShutdownTime, "2", 1);
  o = LivenessOptions::FromEnv();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find(env::kLivenessShutdownTime), std::string::npos);
}

// Three watches as ranks on loopback; "freezing" a rank stops its watch (no more heartbeats),
// as SIGSTOP stops a process's every thread.
struct Ended {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, std::string>> by_rank;  // (silent rank named, error)
};

std::vector<std::unique_ptr<LivenessWatch>> StartWatches(int size, const LivenessOptions& o,
                                                         Ended* ended, std::vector<int>* observer) {
  std::vector<std::unique_ptr<LivenessWatch>> w;
  std::vector<std::string> records;
  for (int r = 0; r < size; ++r) {
    auto bound = LivenessWatch::Bind(o, r, size, "127.0.0.1");
    EXPECT_TRUE(bound.ok()) << bound.status().message();
    records.push_back((*bound)->Record());
    w.push_back(std::move(*bound));
  }
  for (int r = 0; r < size; ++r) {
    LivenessWatch::Hooks h;
    h.in_flight = [] {
      return std::vector<InFlightTensor>{{"grad.w", "allreduce", true, Clock::now() - seconds(1)}};
    };
    h.on_end = [ended, observer, r](const std::string& error, int rank, const std::string&,
                                    milliseconds) {
      std::lock_guard<std::mutex> lock(ended->mu);
      ended->by_rank.emplace_back(rank, error);
      observer->push_back(r);
      ended->cv.notify_all();
    };
    EXPECT_TRUE(w[r]->Start(records, std::move(h)).ok());
  }
  return w;
}

void ExpectEndedNaming(int size, int frozen, const LivenessOptions& o) {
  Ended ended;
  std::vector<int> observers;
  auto w = StartWatches(size, o, &ended, &observers);
  std::this_thread::sleep_for(milliseconds(300));  // heartbeats flow; nobody is silent
  {
    std::lock_guard<std::mutex> lock(ended.mu);
    EXPECT_TRUE(ended.by_rank.empty());
  }
  const auto frozen_at = Clock::now();
  w[frozen]->Stop();
  std::unique_lock<std::mutex> lock(ended.mu);
  ASSERT_TRUE(ended.cv.wait_for(lock, seconds(10), [&] {
    return static_cast<int>(ended.by_rank.size()) == size - 1;
  })) << "only " << ended.by_rank.size() << " ranks ended";
  const auto took = Clock::now() - frozen_at;
  EXPECT_GE(took, o.shutdown_time - milliseconds(100));
  EXPECT_LT(took, o.shutdown_time + seconds(2));
  for (const auto& [rank, error] : ended.by_rank) {
    EXPECT_EQ(rank, frozen);
    EXPECT_NE(error.find("rank " + std::to_string(frozen) + " on host "), std::string::npos) << error;
    EXPECT_NE(error.find("stopped answering"), std::string::npos) << error;
    EXPECT_NE(error.find("allreduce 'grad.w' in a data-plane wait"), std::string::npos) << error;
  }
  for (int r : observers) EXPECT_NE(r, frozen);
  lock.unlock();
  for (auto& x : w) x->Stop();
}

TEST(LivenessWatchTest, FrozenWorkerEndsTheJobOnEveryOtherRank) {
  ExpectEndedNaming(3, /*frozen=*/1, Options(400, 1200));
}

TEST(LivenessWatchTest, FrozenCoordinatorEndsTheJobOnEveryWorker) {
  ExpectEndedNaming(3, /*frozen=*/0, Options(400, 1200));
}

TEST(LivenessWatchTest, NothingEndsWhileEveryRankSends) {
  Ended ended;
  std::vector<int> observers;
  auto w = StartWatches(3, Options(200, 600), &ended, &observers);
  std::this_thread::sleep_for(milliseconds(1500));
  for (auto& x : w) x->Stop();
  std::lock_guard<std::mutex> lock(ended.mu);
  EXPECT_TRUE(ended.by_rank.empty());
}

}  // namespace
}  // namespace core
}  // namespace dadt
