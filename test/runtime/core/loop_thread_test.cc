// The loop-thread rule: LoopThreadChecker knows its thread, and DADT_DCHECK_ON_LOOP stops a
// debug build that breaks the rule. This file is compiled without NDEBUG (see BUILD) so that the
// check is live; in release builds it is compiled out.
#include "runtime/core/loop_thread.h"

#include <gtest/gtest.h>

#include <thread>

#include "runtime/core/loop_poller.h"

namespace dadt {
namespace core {
namespace {

TEST(LoopThreadCheckerTest, KnowsTheThreadItWasBoundTo) {
  LoopThreadChecker checker;
  EXPECT_FALSE(checker.OnLoopThread()) << "not bound yet";
  std::thread loop([&] {
    checker.BindToThisThread();
    EXPECT_TRUE(checker.OnLoopThread());
  });
  loop.join();
  EXPECT_FALSE(checker.OnLoopThread());
}

TEST(LoopThreadCheckerTest, PassesOnTheLoopThread) {
  LoopThreadChecker checker;
  checker.BindToThisThread();
  DADT_DCHECK_ON_LOOP(checker);  // no abort
  SUCCEED();
}

#ifndef NDEBUG
TEST(LoopThreadCheckerDeathTest, DebugBuildsAbortOffTheLoop) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  LoopThreadChecker checker;
  std::thread([&] { checker.BindToThisThread(); }).join();
  EXPECT_DEATH({ DADT_DCHECK_ON_LOOP(checker); }, "must run on the runtime's loop thread");
}
#endif

TEST(PollTimeoutTest, RoundsUpToWholeMicroseconds) {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  EXPECT_EQ(PollTimeoutMicros(false, Clock::time_point::max(), now), -1) << "no deadline: forever";
  EXPECT_EQ(PollTimeoutMicros(true, Clock::time_point::max(), now), 0) << "immediate";
  EXPECT_EQ(PollTimeoutMicros(false, now - std::chrono::milliseconds(3), now), 0) << "overdue";
  EXPECT_EQ(PollTimeoutMicros(false, now + std::chrono::nanoseconds(1), now), 1);
  EXPECT_EQ(PollTimeoutMicros(false, now + std::chrono::microseconds(250), now), 250);
  EXPECT_EQ(PollTimeoutMicros(false, now + std::chrono::nanoseconds(250001), now), 251);
  EXPECT_EQ(PollTimeoutMicros(false, now + std::chrono::seconds(2), now), 2000000);
  EXPECT_EQ(PollTimeoutMicros(true, now + std::chrono::seconds(5), now), 0);
}

}  // namespace
}  // namespace core
}  // namespace dadt
