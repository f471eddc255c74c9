// StallInspector on a fake clock: when it warns, what the message names, repeats, shutdown,
// wake-up times, and the DADT_STALL_* environment.
#include "runtime/core/stall_inspector.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "runtime/common/env.h"

namespace dadt {
namespace core {
namespace {

using Clock = StallInspector::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

StallOptions Options(int warning_s, int shutdown_s = 0) {
  StallOptions o;
  o.warning_time = seconds(warning_s);
  o.shutdown_time = seconds(shutdown_s);
  return o;
}

PendingTensor Tensor(const std::string& name, Clock::time_point first_seen, std::vector<int> submitted,
                     std::vector<int> missing) {
  return PendingTensor{name, "allreduce", first_seen, std::move(submitted), std::move(missing)};
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class StallInspectorTest : public ::testing::Test {
 protected:
  Clock::time_point t0_ = Clock::now();
};

TEST_F(StallInspectorTest, IdleInspectorNeverWakesTheLoop) {
  StallInspector s(Options(60));
  EXPECT_EQ(s.next_check(), Clock::time_point::max());
  StallReport r = s.Check({}, t0_);
  EXPECT_TRUE(r.warning.empty());
  EXPECT_EQ(s.next_check(), Clock::time_point::max());
}

TEST_F(StallInspectorTest, FirstPendingTensorSchedulesOneCheckAfterTheWarningTime) {
  StallInspector s(Options(60));
  s.OnPending(t0_);
  EXPECT_EQ(s.next_check(), t0_ + seconds(60));
  s.OnPending(t0_ + seconds(5));  // a later tensor does not push the check back
  EXPECT_EQ(s.next_check(), t0_ + seconds(60));
}

TEST_F(StallInspectorTest, NoWarningBeforeTheWarningTime) {
  StallInspector s(Options(60));
  std::vector<PendingTensor> view = {Tensor("a", t0_, {0}, {1})};
  StallReport r = s.Check(view, t0_ + seconds(59));
  EXPECT_TRUE(r.warning.empty());
  EXPECT_TRUE(r.shutdown.empty());
  EXPECT_EQ(s.next_check(), t0_ + seconds(60));
}

TEST_F(StallInspectorTest, WarningNamesTensorsAndMissingRanks) {
  StallInspector s(Options(2));
  std::vector<PendingTensor> view = {Tensor("grad.fc1", t0_, {0, 2}, {1}),
                                     Tensor("grad.fc2", t0_ + milliseconds(100), {0}, {1, 2}),
                                     Tensor("young", t0_ + seconds(1), {2}, {0, 1})};
  StallReport r = s.Check(view, t0_ + milliseconds(2500));
  ASSERT_FALSE(r.warning.empty());
  EXPECT_TRUE(r.shutdown.empty());
  EXPECT_TRUE(Contains(r.warning, "missing rank 1: [grad.fc1, grad.fc2]")) << r.warning;
  EXPECT_TRUE(Contains(r.warning, "missing rank 2: [grad.fc2]")) << r.warning;
  EXPECT_TRUE(Contains(r.warning, "tensor 'grad.fc1' (allreduce) waiting 2.5 s: submitted by rank(s) 0, 2, "
                                  "missing rank(s) 1"))
      << r.warning;
  EXPECT_TRUE(Contains(r.warning, "more than 2.0 s")) << r.warning;
  EXPECT_FALSE(Contains(r.warning, "young")) << "a tensor pending for 1.5 s is not stalled yet";
  // Next look: when "young" reaches 2 s.
  EXPECT_EQ(s.next_check(), t0_ + seconds(3));
}

TEST_F(StallInspectorTest, StalledTensorIsReportedAgainOnlyAfterAnotherWarningTime) {
  StallInspector s(Options(10));
  std::vector<PendingTensor> view = {Tensor("a", t0_, {0}, {1})};
  EXPECT_FALSE(s.Check(view, t0_ + seconds(10)).warning.empty());
  EXPECT_EQ(s.next_check(), t0_ + seconds(20));
  EXPECT_TRUE(s.Check(view, t0_ + seconds(15)).warning.empty()) << "repeated within 10 s";
  EXPECT_EQ(s.next_check(), t0_ + seconds(20));
  // A newly stalled tensor is reported at once, without repeating "a".
  view.push_back(Tensor("b", t0_ + seconds(6), {1}, {0}));
  StallReport r = s.Check(view, t0_ + seconds(16));
  EXPECT_TRUE(Contains(r.warning, "'b'")) << r.warning;
  EXPECT_FALSE(Contains(r.warning, "'a'")) << r.warning;
  EXPECT_TRUE(Contains(s.Check(view, t0_ + seconds(20)).warning, "'a'"));
}

TEST_F(StallInspectorTest, ReleasedTensorIsForgottenAndItsNameStartsAfresh) {
  StallInspector s(Options(10));
  EXPECT_FALSE(s.Check({Tensor("a", t0_, {0}, {1})}, t0_ + seconds(10)).warning.empty());
  EXPECT_TRUE(s.Check({}, t0_ + seconds(11)).warning.empty());
  EXPECT_EQ(s.next_check(), Clock::time_point::max());
  // Same name, submitted again later: a new stall, judged from its own first submission.
  std::vector<PendingTensor> again = {Tensor("a", t0_ + seconds(12), {0}, {1})};
  EXPECT_TRUE(s.Check(again, t0_ + seconds(21)).warning.empty());
  EXPECT_FALSE(s.Check(again, t0_ + seconds(22)).warning.empty());
}

TEST_F(StallInspectorTest, ShutdownAfterTheShutdownTimeNamesTheCulprits) {
  StallInspector s(Options(2, 5));
  std::vector<PendingTensor> view = {Tensor("loss", t0_, {0, 1, 2}, {3}),
                                     Tensor("fresh", t0_ + seconds(4), {3}, {0, 1, 2})};
  StallReport r = s.Check(view, t0_ + seconds(2));
  EXPECT_TRUE(r.shutdown.empty());
  EXPECT_TRUE(Contains(r.warning, "'loss'"));
  EXPECT_EQ(s.next_check(), t0_ + seconds(4)) << "the warning repeat comes before the shutdown";
  r = s.Check(view, t0_ + seconds(5));
  ASSERT_FALSE(r.shutdown.empty());
  EXPECT_TRUE(Contains(r.shutdown, "tensor 'loss'")) << r.shutdown;
  EXPECT_TRUE(Contains(r.shutdown, "missing rank 3: [loss]")) << r.shutdown;
  EXPECT_TRUE(Contains(r.shutdown, "submitted by rank(s) 0-2")) << r.shutdown;
  EXPECT_TRUE(Contains(r.shutdown, env::kStallShutdownTime)) << r.shutdown;
  EXPECT_FALSE(Contains(r.shutdown, "'fresh'")) << "only tensors past the shutdown time are blamed";
}

TEST_F(StallInspectorTest, ShutdownShorterThanWarningStillFires) {
  StallInspector s(Options(60, 3));
  s.OnPending(t0_);
  EXPECT_EQ(s.next_check(), t0_ + seconds(3));
  StallReport r = s.Check({Tensor("a", t0_, {0}, {1})}, t0_ + seconds(3));
  EXPECT_FALSE(r.shutdown.empty());
}

TEST_F(StallInspectorTest, DisabledInspectorDoesNothing) {
  StallOptions o = Options(1, 1);
  o.enabled = false;
  StallInspector s(o);
  s.OnPending(t0_);
  EXPECT_EQ(s.next_check(), Clock::time_point::max());
  StallReport r = s.Check({Tensor("a", t0_, {0}, {1})}, t0_ + seconds(100));
  EXPECT_TRUE(r.warning.empty());
  EXPECT_TRUE(r.shutdown.empty());
}

TEST_F(StallInspectorTest, ManyRanksAndTensorsStayReadable) {
  StallInspector s(Options(1));
  std::vector<int> missing;
  for (int r = 1; r < 1000; ++r) missing.push_back(r);
  std::vector<PendingTensor> view;
  for (int i = 0; i < 50; ++i) view.push_back(Tensor("t" + std::to_string(i), t0_, {0}, {5, 6, 7, 9}));
  view.push_back(Tensor("wide", t0_ - seconds(1), {0}, missing));
  StallReport r = s.Check(view, t0_ + seconds(2));
  EXPECT_TRUE(Contains(r.warning, "missing rank(s) 1-999")) << r.warning;
  EXPECT_TRUE(Contains(r.warning, "missing rank(s) 5-7, 9")) << r.warning;
  EXPECT_TRUE(Contains(r.warning, "(31 more tensors not listed)")) << r.warning;
  EXPECT_TRUE(Contains(r.warning, "'wide'")) << "the oldest stall is listed first";
}

TEST_F(StallInspectorTest, TensorMostRanksSubmittedIsListedFirst) {
  StallInspector s(Options(1));
  // Rank 3 skipped "skipped" and went on to "next", which ranks 0-2 cannot reach.
  std::vector<PendingTensor> view = {Tensor("next", t0_, {3}, {0, 1, 2}),
                                     Tensor("skipped", t0_ + milliseconds(5), {0, 1, 2}, {3})};
  StallReport r = s.Check(view, t0_ + seconds(2));
  const size_t skipped = r.warning.find("tensor 'skipped'");
  const size_t next = r.warning.find("tensor 'next'");
  ASSERT_NE(skipped, std::string::npos);
  ASSERT_NE(next, std::string::npos);
  EXPECT_LT(skipped, next) << r.warning;
}

class StallOptionsEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* n : {env::kStallCheckTime, env::kStallShutdownTime, env::kStallCheckDisable}) unsetenv(n);
  }
};

TEST_F(StallOptionsEnvTest, DefaultsAreSixtySecondsAndNoShutdown) {
  auto o = StallOptions::FromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->enabled);
  EXPECT_EQ(o->warning_time, seconds(60));
  EXPECT_EQ(o->shutdown_time, seconds(0));
}

TEST_F(StallOptionsEnvTest, ReadsFractionalSecondsAndDisable) {
  setenv(env::kStallCheckTime, "1.5", 1);
  setenv(env::kStallShutdownTime, "4", 1);
  auto o = StallOptions::FromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->warning_time, milliseconds(1500));
  EXPECT_EQ(o->shutdown_time, seconds(4));
  setenv(env::kStallCheckDisable, "1", 1);
  EXPECT_FALSE(StallOptions::FromEnv()->enabled);
}

TEST_F(StallOptionsEnvTest, JunkIsAnErrorNamingTheVariable) {
  for (const char* bad : {"abc", "-1", "0", "nan"}) {
    setenv(env::kStallCheckTime, bad, 1);
    auto o = StallOptions::FromEnv();
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_TRUE(Contains(o.status().message(), env::kStallCheckTime)) << o.status().message();
  }
  unsetenv(env::kStallCheckTime);
  setenv(env::kStallShutdownTime, "-3", 1);
  EXPECT_FALSE(StallOptions::FromEnv().ok());
  setenv(env::kStallShutdownTime, "0", 1);
  EXPECT_TRUE(StallOptions::FromEnv().ok()) << "0 means no shutdown";
  setenv(env::kStallCheckDisable, "maybe", 1);
  EXPECT_FALSE(StallOptions::FromEnv().ok());
}

}  // namespace
}  // namespace core
}  // namespace dadt
