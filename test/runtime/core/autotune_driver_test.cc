// AutotuneDriver (runtime/core/autotune_driver.h): rank 0's link between the executed responses
// and the autotuner. Covers: DADT_AUTOTUNE* parsing (off by default, bad values refused), the
// job's knobs applied to the coordinator at start, steps cut where an allreduce name comes round
// again (counted through the tuner's CSV log, one row per sample), the settled setting applied
// to the coordinator, knobs the user set never tuned, and StopTuning.
#include "runtime/core/autotune_driver.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/common/env.h"

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;

const char* const kVars[] = {env::kAutotune,           env::kAutotuneLog,
                             env::kAutotuneWarmupSamples, env::kAutotuneStepsPerSample,
                             env::kAutotuneMaxSamples,    env::kAutotuneNoise,
                             env::kFusionThreshold,       env::kCycleTime,
                             env::kCacheCapacity};

Request Allreduce(int rank, const std::string& name) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.shape = {4};  // 16 bytes of float32
  return r;
}

Response Executed(std::vector<std::string> names, Response::Type type = Response::Type::kAllreduce) {
  Response r;
  r.type = type;
  r.sizes.assign(names.size(), 4);
  r.names = std::move(names);
  return r;
}

class AutotuneDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
    const char* tmp = getenv("TEST_TMPDIR");
    log_ = std::string(tmp ? tmp : "/tmp") + "/autotune_driver_test.csv";
    std::remove(log_.c_str());
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }

  // Tuning every step as its own sample, logged to log_.
  void FastTuning(int max_samples) {
    setenv(env::kAutotune, "1", 1);
    setenv(env::kAutotuneWarmupSamples, "0", 1);
    setenv(env::kAutotuneStepsPerSample, "1", 1);
    setenv(env::kAutotuneMaxSamples, std::to_string(max_samples).c_str(), 1);
    setenv(env::kAutotuneLog, log_.c_str(), 1);
  }

  std::unique_ptr<AutotuneDriver> Start(int64_t fusion = 64 << 20, double cycle_ms = 5) {
    auto d = AutotuneDriver::FromEnv(fusion, cycle_ms, 1, &coordinator_);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(*d) : nullptr;
  }

  // The CSV's rows after the header.
  std::vector<std::string> Rows() const {
    std::ifstream in(log_);
    std::vector<std::string> rows;
    std::string line;
    bool header = true;
    while (std::getline(in, line)) {
      if (!header) rows.push_back(line);
      header = false;
    }
    return rows;
  }

  // Feeds one executed response, a little later than the previous one (a step needs > 0 s).
  void Run(AutotuneDriver& d, const Response& r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    d.OnExecuted(r);
  }

  // The coordinator's cycle time, read back through NextDeadline: one tensor ready at t0 while
  // another is partly submitted is released one cycle after t0.
  microseconds CycleTime(const std::string& ready, const std::string& partial) {
    const Clock::time_point t0 = Clock::now();
    coordinator_.Add(Allreduce(0, ready), t0);
    coordinator_.Add(Allreduce(1, ready), t0);
    coordinator_.Add(Allreduce(0, partial), t0);
    return std::chrono::duration_cast<microseconds>(coordinator_.NextDeadline() - t0);
  }

  ResponseCache cache_{16};
  Coordinator coordinator_{2, /*fusion_threshold_bytes=*/0, microseconds(1000000), &cache_};
  std::string log_;
};

TEST_F(AutotuneDriverTest, OffUnlessDadtAutotuneIsOn) {
  auto d = AutotuneDriver::FromEnv(1 << 20, 5, 1, &coordinator_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, nullptr);
  setenv(env::kAutotune, "0", 1);
  d = AutotuneDriver::FromEnv(1 << 20, 5, 1, &coordinator_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, nullptr);
}

TEST_F(AutotuneDriverTest, BadSettingsAreRefusedNamingTheVariable) {
  setenv(env::kAutotune, "1", 1);
  setenv(env::kAutotuneStepsPerSample, "0", 1);
  auto d = AutotuneDriver::FromEnv(1 << 20, 5, 1, &coordinator_);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  setenv(env::kAutotuneStepsPerSample, "ten", 1);
  d = AutotuneDriver::FromEnv(1 << 20, 5, 1, &coordinator_);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find(env::kAutotuneStepsPerSample), std::string::npos)
      << d.status().message();
}

TEST_F(AutotuneDriverTest, UnwritableLogIsAnError) {
  setenv(env::kAutotune, "1", 1);
  setenv(env::kAutotuneLog, "/nonexistent-dir/autotune.csv", 1);
  auto d = AutotuneDriver::FromEnv(1 << 20, 5, 1, &coordinator_);
  EXPECT_FALSE(d.ok());
}

TEST_F(AutotuneDriverTest, TheJobsCycleTimeIsAppliedAtStart) {
  setenv(env::kAutotune, "1", 1);
  auto d = Start(/*fusion=*/64 << 20, /*cycle_ms=*/7.5);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->tuning());
  EXPECT_EQ(CycleTime("a", "b"), microseconds(7500));
}

TEST_F(AutotuneDriverTest, TheJobsFusionThresholdIsAppliedAtStart) {
  setenv(env::kAutotune, "1", 1);
  auto d = Start(/*fusion=*/16, /*cycle_ms=*/100);
  ASSERT_NE(d, nullptr);
  // 16 ready bytes reach the threshold: released at once although "b" is still pending (with the
  // coordinator's own threshold, 0, it would wait for the cycle).
  const Clock::time_point t0 = Clock::now();
  coordinator_.Add(Allreduce(0, "a"), t0);
  coordinator_.Add(Allreduce(1, "a"), t0);
  coordinator_.Add(Allreduce(0, "b"), t0);
  ResponseList list = coordinator_.Compute(t0);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].names, (std::vector<std::string>{"a"}));
}

TEST_F(AutotuneDriverTest, ResponseCacheIsSwitchedOnThroughTheCoordinator) {
  cache_.SetActive(false);
  setenv(env::kAutotune, "1", 1);
  auto d = Start();
  ASSERT_NE(d, nullptr);
  ResponseList list = coordinator_.Compute(Clock::now());
  EXPECT_EQ(list.cache, CacheToggle::kOn);  // every rank turns its cache on at the same point
}

TEST_F(AutotuneDriverTest, AStepEndsWhenAnAllreduceNameComesRoundAgain) {
  FastTuning(/*max_samples=*/10);
  auto d = Start();
  ASSERT_NE(d, nullptr);
  Run(*d, Executed({"a"}));
  Run(*d, Executed({"b", "c"}));
  EXPECT_EQ(Rows().size(), 0u);
  Run(*d, Executed({"a"}));  // step 1 ends; step 2 begins with "a"
  EXPECT_EQ(Rows().size(), 1u);
  Run(*d, Executed({"b"}));
  Run(*d, Executed({"d", "b"}));  // "b" again, fused with a new name: step 2 ends
  EXPECT_EQ(Rows().size(), 2u);
  // Responses that move no allreduce bytes do not count, even with repeated names.
  Run(*d, Executed({"a"}, Response::Type::kAllgather));
  Run(*d, Executed({"b"}, Response::Type::kBroadcast));
  Run(*d, Executed({"d"}, Response::Type::kBarrier));
  EXPECT_EQ(Rows().size(), 2u);
  EXPECT_TRUE(d->tuning());
}

TEST_F(AutotuneDriverTest, SettledSettingIsAppliedToTheCoordinator) {
  FastTuning(/*max_samples=*/2);
  // Only the cycle time is tuned (the other knobs were set by hand).
  setenv(env::kFusionThreshold, "1048576", 1);
  setenv(env::kCacheCapacity, "16", 1);
  auto d = Start(1 << 20, 5);
  ASSERT_NE(d, nullptr);
  for (int step = 0; step < 3; ++step) {
    Run(*d, Executed({"a"}));
    Run(*d, Executed({"b"}));
  }
  EXPECT_FALSE(d->tuning());
  std::vector<std::string> rows = Rows();
  ASSERT_EQ(rows.size(), 3u);  // two samples and the best
  ASSERT_EQ(rows[2].rfind("best,", 0), 0u) << rows[2];
  // best,<fusion>,<cycle ms>,<cache>,<hierarchical>,<score>
  std::stringstream ss(rows[2]);
  std::string label, fusion, cycle;
  std::getline(ss, label, ',');
  std::getline(ss, fusion, ',');
  std::getline(ss, cycle, ',');
  EXPECT_EQ(fusion, "1048576");  // fixed knobs keep their values
  EXPECT_EQ(CycleTime("x", "y"), microseconds(std::llround(std::stod(cycle) * 1000)));
  // Settled: later steps change nothing.
  for (int step = 0; step < 3; ++step) Run(*d, Executed({"a"}));
  EXPECT_EQ(Rows().size(), 3u);
}

TEST_F(AutotuneDriverTest, KnobsTheUserSetAreNeverTuned) {
  FastTuning(/*max_samples=*/2);
  setenv(env::kFusionThreshold, "1048576", 1);
  setenv(env::kCycleTime, "5", 1);
  setenv(env::kCacheCapacity, "16", 1);
  auto d = Start(1 << 20, 5);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->tuning());
  for (int step = 0; step < 4; ++step) Run(*d, Executed({"a"}));
  EXPECT_TRUE(Rows().empty());
  EXPECT_EQ(CycleTime("a", "b"), microseconds(5000));
}

TEST_F(AutotuneDriverTest, StopTuningEndsItWhereItIs) {
  FastTuning(/*max_samples=*/10);
  auto d = Start(1 << 20, 5);
  ASSERT_NE(d, nullptr);
  Run(*d, Executed({"a"}));
  Run(*d, Executed({"a"}));
  ASSERT_EQ(Rows().size(), 1u);
  d->StopTuning();
  EXPECT_FALSE(d->tuning());
  for (int step = 0; step < 4; ++step) Run(*d, Executed({"a"}));
  EXPECT_EQ(Rows().size(), 1u);  // no more samples, and no `best` row
  d->StopTuning();                 // no-op once stopped
}

}  // namespace
}  // namespace core
}  // namespace dadt
