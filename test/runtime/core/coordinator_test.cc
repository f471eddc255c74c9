// Negotiation logic with N simulated ranks: readiness, validation messages, ordering, release
// timing, join, groups, cached refs and shutdown.
#include "runtime/core/negotiation/coordinator.h"

#include <gtest/gtest.h>

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;

Request Allreduce(int rank, const std::string& name, Shape shape = {4},
                  DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = shape;
  r.dtype = dtype;
  return r;
}

class CoordinatorTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
  ResponseCache cache_{16};
  Clock::time_point t0_ = Clock::now();
};

TEST_P(CoordinatorTest, ReadyOnlyWhenEveryRankSubmitted) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r + 1 < size(); ++r) {
    c.Add(Allreduce(r, "w"), t0_);
    EXPECT_TRUE(c.Compute(t0_ + microseconds(5000)).responses.empty()) << "released early";
  }
  c.Add(Allreduce(size() - 1, "w"), t0_);
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kAllreduce);
  EXPECT_EQ(list.responses[0].names, std::vector<std::string>{"w"});
  EXPECT_EQ(list.responses[0].sizes, std::vector<int64_t>{4});
  EXPECT_EQ(c.pending(), 0u);
}

TEST_P(CoordinatorTest, ShapeMismatchNamesTensorRanksAndShapes) {
  if (size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r < size(); ++r) c.Add(Allreduce(r, "grad.fc1", r == 1 ? Shape{3} : Shape{2, 3}), t0_);
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  const Response& resp = list.responses[0];
  EXPECT_EQ(resp.type, Response::Type::kError);
  EXPECT_NE(resp.error.find("'grad.fc1'"), std::string::npos) << resp.error;
  EXPECT_NE(resp.error.find("rank 1: [3]"), std::string::npos) << resp.error;
  EXPECT_NE(resp.error.find("[2, 3]"), std::string::npos) << resp.error;
  EXPECT_NE(resp.error.find("shapes"), std::string::npos) << resp.error;
}

TEST_P(CoordinatorTest, DtypeOpAndRootMismatchesAreErrors) {
  if (size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r < size(); ++r) {
    c.Add(Allreduce(r, "d", {4}, r == 0 ? DataType::kFloat64 : DataType::kFloat32), t0_);
    Request b = Allreduce(r, "b");
    b.op = OpType::kBroadcast;
    b.root = r == 0 ? 0 : 1;
    c.Add(b, t0_);
    Request o = Allreduce(r, "o");
    o.reduce_op = r == 0 ? ReduceOp::kMax : ReduceOp::kSum;
    c.Add(o, t0_);
  }
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 3u);
  for (const Response& r : list.responses) EXPECT_EQ(r.type, Response::Type::kError);
  EXPECT_NE(list.responses[0].error.find("data types"), std::string::npos);
  EXPECT_NE(list.responses[0].error.find("float64"), std::string::npos);
  EXPECT_NE(list.responses[1].error.find("root"), std::string::npos);
  EXPECT_NE(list.responses[2].error.find("reduce operations"), std::string::npos);
}

TEST_P(CoordinatorTest, WaitsOneCycleForPartlySubmittedTensorsThenReleases) {
  if (size() < 2) GTEST_SKIP() << "needs a rank that is behind";
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r < size(); ++r) c.Add(Allreduce(r, "a"), t0_);
  c.Add(Allreduce(0, "b"), t0_);  // only rank 0 has b yet
  EXPECT_TRUE(c.Compute(t0_ + microseconds(100)).responses.empty());
  EXPECT_EQ(c.NextDeadline(), t0_ + microseconds(1000));
  ResponseList list = c.Compute(t0_ + microseconds(1000));
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].names, std::vector<std::string>{"a"});
}

TEST_P(CoordinatorTest, ReadyTensorsAreFusedInReadyOrder) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (const char* n : {"x", "y", "z"}) {
    for (int r = 0; r < size(); ++r) c.Add(Allreduce(r, n), t0_);
  }
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].names, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(list.responses[0].sizes, (std::vector<int64_t>{4, 4, 4}));
}

TEST_P(CoordinatorTest, JoinedRanksCountAsReadyForAllreduceAndJoinReportsLastRank) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  Request join;
  join.op = OpType::kJoin;
  join.rank = size() - 1;
  c.Add(join, t0_);
  for (int r = 0; r + 1 < size(); ++r) c.Add(Allreduce(r, "tail"), t0_);
  ResponseList list = c.Compute(t0_);
  if (size() > 1) {
    ASSERT_EQ(list.responses.size(), 1u);
    EXPECT_EQ(list.responses[0].names, std::vector<std::string>{"tail"});
    for (int r = 0; r + 1 < size(); ++r) {
      Request j;
      j.op = OpType::kJoin;
      j.rank = r;
      c.Add(j, t0_);
    }
    list = c.Compute(t0_);
  }
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kJoin);
  EXPECT_EQ(list.responses[0].last_joined_rank, size() == 1 ? 0 : size() - 2);
}

// Horovod's test_horovod_join_allgather at 3 ranks: one rank joins and the others' allgathers,
// named apart by their own counters, each fail at once instead of waiting for the rest.
TEST_P(CoordinatorTest, AllgatherFailsAtOnceWhileARankHasJoined) {
  if (size() < 2) GTEST_SKIP() << "needs a rank that joins and one that does not";
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  Request join;
  join.op = OpType::kJoin;
  join.rank = 0;
  c.Add(join, t0_);
  Request g = Allreduce(1, "allgather.noname.7");
  g.op = OpType::kAllgather;
  c.Add(g, t0_);
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kError);
  EXPECT_NE(list.responses[0].error.find("join()"), std::string::npos) << list.responses[0].error;
  EXPECT_EQ(c.pending(), 0u);
}

TEST_P(CoordinatorTest, GroupIsReleasedOnlyWhenComplete) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  auto member = [&](int r, int i) {
    Request q = Allreduce(r, "g." + std::to_string(i));
    q.group_id = 7;
    q.group_size = 2;
    return q;
  };
  for (int r = 0; r < size(); ++r) c.Add(member(r, 0), t0_);
  EXPECT_TRUE(c.Compute(t0_ + microseconds(5000)).responses.empty());
  for (int r = 0; r < size(); ++r) c.Add(member(r, 1), t0_);
  ResponseList list = c.Compute(t0_ + microseconds(6000));
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].names.size(), 2u);
}

TEST_P(CoordinatorTest, CachedRefsResolveAndStaleOnesAskForResend) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r < size(); ++r) c.Add(Allreduce(r, "w"), t0_);
  ResponseList first = c.Compute(t0_);
  ASSERT_EQ(first.responses.size(), 1u);
  ASSERT_EQ(first.responses[0].cache_slots.size(), 1u);
  CachedRef ref{first.responses[0].cache_slots[0], first.responses[0].cache_generations[0]};
  for (int r = 0; r < size(); ++r) {
    RequestList l;
    l.rank = r;
    l.cached.push_back(ref);
    c.Receive(l, t0_);
  }
  ResponseList second = c.Compute(t0_);
  ASSERT_EQ(second.responses.size(), 1u);
  EXPECT_EQ(second.responses[0].names, std::vector<std::string>{"w"});
  RequestList stale;
  stale.rank = 0;
  stale.cached.push_back(CachedRef{ref.slot, ref.generation + 5});
  c.Receive(stale, t0_);
  ResponseList third = c.Compute(t0_);
  EXPECT_EQ(third.resend, (std::vector<ResendEntry>{{0, ref.slot, ref.generation + 5}}));
}

TEST_P(CoordinatorTest, ShutdownFromAnyRankEndsTheJob) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  c.Add(Allreduce(0, "pending"), t0_);
  c.RequestShutdown(size() - 1);
  ResponseList list = c.Compute(t0_);
  EXPECT_EQ(list.outcome, Outcome::kShutdown);
  EXPECT_EQ(list.cause_rank, size() - 1);
  EXPECT_NE(list.reason.find("rank " + std::to_string(size() - 1)), std::string::npos);
}

TEST_P(CoordinatorTest, CacheSwitchTravelsWithTheNextListAndStopsAssignments) {
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  c.set_response_cache(false);
  for (int r = 0; r < size(); ++r) c.Add(Allreduce(r, "w"), t0_);
  ResponseList off = c.Compute(t0_);
  EXPECT_EQ(off.cache, CacheToggle::kOff);
  ASSERT_EQ(off.responses.size(), 1u);
  EXPECT_TRUE(off.responses[0].cache_slots.empty()) << "no slot may be assigned while off";
  c.set_response_cache(true);
  for (int r = 0; r < size(); ++r) c.Add(Allreduce(r, "w"), t0_);
  ResponseList on = c.Compute(t0_);
  EXPECT_EQ(on.cache, CacheToggle::kOn);
  ASSERT_EQ(on.responses.size(), 1u);
  EXPECT_EQ(on.responses[0].cache_slots.size(), 1u);
}

// A name that is a CPU tensor on one rank and a GPU tensor on another is refused on every rank,
// naming the tensor and each rank's device.
TEST_P(CoordinatorTest, MixedCpuAndGpuTensorsAreRefusedNamingEachRanksDevice) {
  if (size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r < size(); ++r) {
    Request a = Allreduce(r, "grad.gpu");
    a.device = r == 1 ? kCpuDevice : r;
    c.Add(a, t0_);
    Request g = Allreduce(r, "gathered");
    g.op = OpType::kAllgather;
    g.device = r == 1 ? 0 : kCpuDevice;
    c.Add(g, t0_);
  }
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 2u);
  const std::string& e = list.responses[0].error;
  EXPECT_EQ(list.responses[0].type, Response::Type::kError);
  EXPECT_NE(e.find("'grad.gpu'"), std::string::npos) << e;
  EXPECT_NE(e.find("CPU and GPU tensors cannot be mixed"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1: CPU"), std::string::npos) << e;
  EXPECT_NE(e.find("GPU 0"), std::string::npos) << e;
  EXPECT_EQ(list.responses[1].type, Response::Type::kError);
  EXPECT_NE(list.responses[1].error.find("allgather devices for tensor 'gathered'"), std::string::npos)
      << list.responses[1].error;
}

TEST_P(CoordinatorTest, GpuTensorStagedOnOneRankAndOnNcclOnAnotherIsRefused) {
  if (size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  Coordinator c(size(), 1 << 20, microseconds(1000), &cache_);
  for (int r = 0; r < size(); ++r) {
    Request a = Allreduce(r, "w");
    a.device = r == 1 ? kStagedGpuDevice : 0;
    c.Add(a, t0_);
  }
  ResponseList list = c.Compute(t0_);
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kError);
  EXPECT_NE(list.responses[0].error.find("staged through host memory"), std::string::npos)
      << list.responses[0].error;
}

// Each rank drives its own GPU: ordinals differ, the kind agrees, and the tensors are fused.
TEST_P(CoordinatorTest, GpuOrdinalsMayDifferAcrossRanks) {
  Coordinator c(size(), 1 << 20, microseconds(0), &cache_);
  for (int r = 0; r < size(); ++r) {
    for (const char* n : {"a", "b"}) {
      Request q = Allreduce(r, n);
      q.device = r % 2;
      c.Add(q, t0_);
    }
  }
  ResponseList list = c.Compute(t0_ + microseconds(10));
  ASSERT_EQ(list.responses.size(), 1u);
  EXPECT_EQ(list.responses[0].type, Response::Type::kAllreduce);
  EXPECT_EQ(list.responses[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_GE(list.responses[0].device, 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CoordinatorTest, ::testing::Values(1, 2, 3, 4, 7));

}  // namespace
}  // namespace core
}  // namespace dadt
