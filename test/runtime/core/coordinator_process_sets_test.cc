// Negotiation per process set (docs/process-sets.md) with 4 simulated ranks: the same name in two
// sets is two tensors, each ready when its own members have submitted it; responses carry the set;
// fusion and the response cache keep sets apart; requests from outside a set are refused; join()
// counts for the global set only.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/core/negotiation/coordinator.h"

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;

Request Allreduce(int rank, const std::string& name, int32_t set, Shape shape = {4}) {
  Request r;
  r.rank = rank;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = shape;
  r.process_set_id = set;
  return r;
}

class CoordinatorProcessSetsTest : public ::testing::Test {
 protected:
  CoordinatorProcessSetsTest() {
    even_ = *sets_.Add({0, 2});
    odd_ = *sets_.Add({1, 3});
    coordinator_.set_process_sets(sets_);
  }
  ProcessSetTable sets_{4, 0};
  int32_t even_ = -1;
  int32_t odd_ = -1;
  ResponseCache cache_{16};
  Coordinator coordinator_{4, 1 << 20, microseconds(0), &cache_};
  Clock::time_point t0_ = Clock::now();
};

TEST_F(CoordinatorProcessSetsTest, SameNameInTwoSetsNegotiatesIndependently) {
  coordinator_.Add(Allreduce(0, "w", even_), t0_);
  coordinator_.Add(Allreduce(1, "w", odd_, {8}), t0_);  // another shape: another tensor
  EXPECT_TRUE(coordinator_.Compute(t0_).responses.empty()) << "released before rank 2 or 3";
  EXPECT_EQ(coordinator_.pending(), 2u);

  coordinator_.Add(Allreduce(2, "w", even_), t0_);
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u) << "the even set is complete, the odd one is not";
  EXPECT_EQ(list.responses[0].type, Response::Type::kAllreduce);
  EXPECT_EQ(list.responses[0].process_set_id, even_);
  EXPECT_EQ(list.responses[0].sizes, (std::vector<int64_t>{4}));

  coordinator_.Add(Allreduce(3, "w", odd_, {8}), t0_);
  list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kAllreduce) << list.responses[0].error;
  EXPECT_EQ(list.responses[0].process_set_id, odd_);
  EXPECT_EQ(list.responses[0].sizes, (std::vector<int64_t>{8}));
  EXPECT_EQ(coordinator_.pending(), 0u);
}

TEST_F(CoordinatorProcessSetsTest, FusionAndCacheKeepSetsApart) {
  for (int r : {0, 2}) coordinator_.Add(Allreduce(r, "a", even_), t0_);
  for (int r : {1, 3}) coordinator_.Add(Allreduce(r, "a", odd_), t0_);
  for (int r = 0; r < 4; ++r) coordinator_.Add(Allreduce(r, "a", 0), t0_);
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 3u) << "three sets, three collectives";
  std::vector<int32_t> sets;
  std::vector<int32_t> slots;
  for (const Response& resp : list.responses) {
    EXPECT_EQ(resp.names, (std::vector<std::string>{"a"}));
    sets.push_back(resp.process_set_id);
    ASSERT_EQ(resp.cache_slots.size(), 1u);
    slots.push_back(resp.cache_slots[0]);
  }
  std::sort(sets.begin(), sets.end());
  EXPECT_EQ(sets, (std::vector<int32_t>{0, even_, odd_}));
  std::sort(slots.begin(), slots.end());
  EXPECT_TRUE(std::unique(slots.begin(), slots.end()) == slots.end()) << "one cache slot per set";
}

// Members of a set reach it through cached references too: a ref resolves to its set's request.
TEST_F(CoordinatorProcessSetsTest, CachedRefResolvesToItsSetsTensor) {
  for (int r : {1, 3}) coordinator_.Add(Allreduce(r, "g", odd_), t0_);
  ResponseList first = coordinator_.Compute(t0_);
  ASSERT_EQ(first.responses.size(), 1u);
  CachedRef ref{first.responses[0].cache_slots[0], first.responses[0].cache_generations[0]};
  for (int r : {1, 3}) {
    RequestList batch;
    batch.rank = r;
    batch.cached.push_back(ref);
    coordinator_.Receive(batch, t0_);
  }
  ResponseList again = coordinator_.Compute(t0_);
  ASSERT_EQ(again.responses.size(), 1u);
  EXPECT_EQ(again.responses[0].process_set_id, odd_);
  EXPECT_EQ(again.responses[0].type, Response::Type::kAllreduce) << again.responses[0].error;
}

TEST_F(CoordinatorProcessSetsTest, RequestFromOutsideTheSetIsAnError) {
  coordinator_.Add(Allreduce(1, "w", even_), t0_);
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  const Response& err = list.responses[0];
  EXPECT_EQ(err.type, Response::Type::kError);
  EXPECT_EQ(err.process_set_id, even_);
  EXPECT_EQ(err.names, (std::vector<std::string>{"w"}));
  EXPECT_NE(err.error.find("'w' in process set 1 from rank 1"), std::string::npos) << err.error;
  EXPECT_NE(err.error.find("rank 1 is not a member of process set 1"), std::string::npos)
      << err.error;
  EXPECT_EQ(coordinator_.pending(), 0u);
}

TEST_F(CoordinatorProcessSetsTest, RequestForAnUnregisteredSetIsAnError) {
  coordinator_.Add(Allreduce(0, "w", 9), t0_);
  const Clock::time_point deadline = coordinator_.NextDeadline();
  EXPECT_LE(deadline, Clock::now()) << "the error is due at once";
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kError);
  EXPECT_NE(list.responses[0].error.find("process set 9 is not registered"), std::string::npos)
      << list.responses[0].error;
}

// Disagreement inside a set names the set and the members' global ranks.
TEST_F(CoordinatorProcessSetsTest, MismatchNamesTheSetAndGlobalRanks) {
  coordinator_.Add(Allreduce(1, "w", odd_, {4}), t0_);
  coordinator_.Add(Allreduce(3, "w", odd_, {5}), t0_);
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  const std::string& e = list.responses[0].error;
  EXPECT_EQ(list.responses[0].type, Response::Type::kError);
  EXPECT_NE(e.find("'w' in process set 2"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1: [4]; rank 3: [5]"), std::string::npos) << e;
}

// A joined rank stands in for the global set's allreduces only: a set's tensor still waits for
// its members, and the set's pending work does not hold back the join response.
TEST_F(CoordinatorProcessSetsTest, JoinCountsForTheGlobalSetOnly) {
  Request join;
  join.op = OpType::kJoin;
  join.rank = 2;
  coordinator_.Add(join, t0_);
  coordinator_.Add(Allreduce(0, "w", even_), t0_);
  EXPECT_TRUE(coordinator_.Compute(t0_).responses.empty()) << "rank 2 joined, but is a member";
  for (int r : {0, 1, 3}) {
    join.rank = r;
    coordinator_.Add(join, t0_);
  }
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kJoin);
  EXPECT_EQ(coordinator_.pending(), 1u) << "the even set's 'w' still waits for rank 2";
}

// Grouped collectives: the same group id in two sets is two groups; each is released when its own
// members are all ready, never because the other set's members are.
TEST_F(CoordinatorProcessSetsTest, GroupsAreCompletePerSet) {
  auto grouped = [&](int rank, const std::string& name, int32_t set) {
    Request r = Allreduce(rank, name, set);
    r.group_id = 77;
    r.group_size = 2;
    return r;
  };
  for (int r : {0, 2}) coordinator_.Add(grouped(r, "g.a", even_), t0_);
  for (int r : {1, 3}) coordinator_.Add(grouped(r, "g.a", odd_), t0_);
  EXPECT_TRUE(coordinator_.Compute(t0_).responses.empty())
      << "each set has one of its group's two tensors";
  for (int r : {0, 2}) coordinator_.Add(grouped(r, "g.b", even_), t0_);
  ResponseList list = coordinator_.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u) << "the even set's group is complete, fused in one";
  EXPECT_EQ(list.responses[0].process_set_id, even_);
  EXPECT_EQ(list.responses[0].names, (std::vector<std::string>{"g.a", "g.b"}));
  EXPECT_EQ(coordinator_.pending(), 1u) << "the odd set's group still waits for g.b";
}

// A stalled tensor of a set names the set and only its members as missing: ranks outside the set
// never submit it and are not to blame.
TEST_F(CoordinatorProcessSetsTest, StallNamesOnlyTheSetsMissingMembers) {
  StallOptions stall;
  stall.warning_time = std::chrono::seconds(2);
  coordinator_.set_stall_options(stall);
  coordinator_.Add(Allreduce(1, "grad.w", odd_), t0_);
  ResponseList list = coordinator_.Compute(t0_ + std::chrono::seconds(2));
  const std::string& w = list.stall_warning;
  ASSERT_FALSE(w.empty());
  EXPECT_NE(w.find("missing rank 3: [grad.w (process set 2)]"), std::string::npos) << w;
  EXPECT_EQ(w.find("rank 0"), std::string::npos) << w;
  EXPECT_EQ(w.find("rank 2"), std::string::npos) << w;
}

}  // namespace
}  // namespace core
}  // namespace dadt
