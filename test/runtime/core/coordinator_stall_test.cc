// The coordinator's stall check with N simulated ranks: a rank that skips a tensor is named,
// joined ranks are not, cached refs count as submissions, shutdown, wake-up deadlines, and the
// warning's trip through the response list.
#include <gtest/gtest.h>

#include "runtime/core/negotiation/coordinator.h"

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

Request Allreduce(int rank, const std::string& name) {
  Request r;
  r.rank = rank;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = {4};
  return r;
}

StallOptions Stall(int warning_s, int shutdown_s = 0) {
  StallOptions o;
  o.warning_time = seconds(warning_s);
  o.shutdown_time = seconds(shutdown_s);
  return o;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CoordinatorStallTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
  std::unique_ptr<Coordinator> Make(const StallOptions& o) {
    auto c = std::make_unique<Coordinator>(size(), 1 << 20, microseconds(1000), &cache_);
    c->set_stall_options(o);
    return c;
  }
  ResponseCache cache_{16};
  Clock::time_point t0_ = Clock::now();
};

TEST_P(CoordinatorStallTest, SkippedTensorIsReportedWithTheMissingRank) {
  if (size() < 2) GTEST_SKIP() << "one rank cannot skip a tensor the others submitted";
  auto c = Make(Stall(2));
  const int skipper = size() - 1;
  for (int r = 0; r < size(); ++r) {
    if (r != skipper) c->Add(Allreduce(r, "grad.w"), t0_);
  }
  EXPECT_EQ(c->NextDeadline(), t0_ + seconds(2)) << "the loop must wake for the check";
  ResponseList early = c->Compute(t0_ + seconds(1));
  EXPECT_TRUE(early.stall_warning.empty());
  ResponseList list = c->Compute(t0_ + seconds(2));
  EXPECT_TRUE(list.responses.empty());
  EXPECT_EQ(list.outcome, Outcome::kContinue);
  ASSERT_FALSE(list.stall_warning.empty());
  EXPECT_TRUE(Contains(list.stall_warning, "missing rank " + std::to_string(skipper) + ": [grad.w]"))
      << list.stall_warning;
  EXPECT_TRUE(Contains(list.stall_warning, "tensor 'grad.w' (allreduce)")) << list.stall_warning;
  // The late rank arrives: the tensor completes and nothing is left to watch.
  c->Add(Allreduce(skipper, "grad.w"), t0_ + seconds(3));
  ResponseList done = c->Compute(t0_ + seconds(3));
  ASSERT_EQ(done.responses.size(), 1u);
  EXPECT_TRUE(done.stall_warning.empty());
  EXPECT_TRUE(c->Compute(t0_ + seconds(4)).stall_warning.empty());
  EXPECT_EQ(c->NextDeadline(), Clock::time_point::max()) << "an idle coordinator must not wake";
}

TEST_P(CoordinatorStallTest, TensorsEveryRankSubmitsInTimeNeverWarn) {
  auto c = Make(Stall(1));
  for (int step = 0; step < 20; ++step) {
    const auto t = t0_ + milliseconds(300 * step);
    for (int r = 0; r < size(); ++r) c->Add(Allreduce(r, "w" + std::to_string(step % 3)), t);
    ResponseList list = c->Compute(t + milliseconds(1));
    EXPECT_EQ(list.responses.size(), 1u);
    EXPECT_TRUE(list.stall_warning.empty());
  }
}

TEST_P(CoordinatorStallTest, JoinedRanksAreNotMissing) {
  if (size() < 3) GTEST_SKIP() << "needs a joined rank, a submitting rank and a missing one";
  auto c = Make(Stall(2));
  Request join;
  join.op = OpType::kJoin;
  join.name = "join";
  join.rank = 2;
  c->Add(join, t0_);
  for (int r = 0; r < size(); ++r) {
    if (r != 1 && r != 2) c->Add(Allreduce(r, "x"), t0_);
  }
  ResponseList list = c->Compute(t0_ + seconds(2));
  ASSERT_FALSE(list.stall_warning.empty());
  EXPECT_TRUE(Contains(list.stall_warning + "\n", "missing rank(s) 1\n")) << list.stall_warning;
  EXPECT_FALSE(Contains(list.stall_warning, "missing rank 2")) << list.stall_warning;
}

TEST_P(CoordinatorStallTest, RanksThatOnlyWaitInJoinAreNoStall) {
  auto c = Make(Stall(1));
  Request join;
  join.op = OpType::kJoin;
  join.name = "join";
  join.rank = 0;
  c->Add(join, t0_);
  ResponseList list = c->Compute(t0_ + seconds(5));
  EXPECT_TRUE(list.stall_warning.empty()) << "uneven inputs (join) are not a stall";
}

TEST_P(CoordinatorStallTest, CachedRefsCountAsSubmissions) {
  if (size() < 3) GTEST_SKIP() << "needs a cached submitter besides rank 0 and a missing rank";
  auto c = Make(Stall(2));
  for (int r = 0; r < size(); ++r) c->Add(Allreduce(r, "cached"), t0_);
  ResponseList first = c->Compute(t0_);
  ASSERT_EQ(first.responses.size(), 1u);
  ASSERT_EQ(first.responses[0].cache_slots.size(), 1u);
  CachedRef ref{first.responses[0].cache_slots[0], first.responses[0].cache_generations[0]};
  // Next step: rank 0 submits directly, rank 1 by cached ref, the last rank never.
  const auto t1 = t0_ + seconds(10);
  c->Add(Allreduce(0, "cached"), t1);
  for (int r = 1; r + 1 < size(); ++r) {
    RequestList l;
    l.rank = r;
    l.cached.push_back(ref);
    c->Receive(l, t1);
  }
  ResponseList list = c->Compute(t1 + seconds(2));
  EXPECT_TRUE(Contains(list.stall_warning, "missing rank " + std::to_string(size() - 1) + ": [cached]"))
      << list.stall_warning;
  EXPECT_TRUE(Contains(list.stall_warning, "submitted by rank(s) 0-" + std::to_string(size() - 2)))
      << list.stall_warning;
}

TEST_P(CoordinatorStallTest, ShutdownTimeEndsTheJobNamingTheTensor) {
  auto c = Make(Stall(1, 3));
  c->Add(Allreduce(0, "never"), t0_);
  if (size() == 1) {
    EXPECT_EQ(c->Compute(t0_).responses.size(), 1u) << "one rank is never stalled";
    return;
  }
  EXPECT_EQ(c->Compute(t0_ + seconds(2)).outcome, Outcome::kContinue);
  ResponseList list = c->Compute(t0_ + seconds(3));
  ASSERT_EQ(list.outcome, Outcome::kAbort)
      << "an abort, so every rank fails its pending work with the message";
  EXPECT_TRUE(Contains(list.reason, "tensor 'never'")) << list.reason;
  EXPECT_TRUE(Contains(list.reason, "missing rank(s) 1")) << list.reason;
}

TEST_P(CoordinatorStallTest, WithoutStallOptionsNothingIsChecked) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  c.Add(Allreduce(0, "lonely"), t0_);
  if (size() > 1) {
    EXPECT_EQ(c.NextDeadline(), Clock::time_point::max());
    EXPECT_TRUE(c.Compute(t0_ + seconds(3600)).stall_warning.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CoordinatorStallTest, ::testing::Values(1, 2, 3, 4, 7));

TEST(StallWarningWire, TravelsInTheResponseList) {
  ResponseList list;
  list.stall_warning = "stall: tensor 'a' missing rank 1";
  list.outcome = Outcome::kAbort;
  list.reason = "x";
  auto parsed = ParseResponseList(SerializeResponseList(list));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->stall_warning, list.stall_warning);
  std::string bytes = SerializeResponseList(list);
  bytes.resize(bytes.size() - 3);
  EXPECT_FALSE(ParseResponseList(bytes).ok()) << "a truncated warning is a malformed list";
}

}  // namespace
}  // namespace core
}  // namespace dadt
