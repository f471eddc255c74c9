// Adding and removing process sets through negotiation (docs/process-sets.md, "Add and remove are
// negotiated operations on the global set") with 4 simulated ranks: an add is released once every
// rank submitted it with the same ranks, and takes the lowest free id; disagreement, duplicates,
// bad ranks and removing the global set become errors for every rank; a remove fails the set's
// pending tensors before it, frees the id for the next add, and answers "not registered" with 0.
#include <gtest/gtest.h>

#include "runtime/core/negotiation/coordinator.h"

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;

Request AddSet(int rank, int call, std::vector<int64_t> ranks) {
  Request r;
  r.rank = rank;
  r.op = OpType::kProcessSetAdd;
  r.name = "dadt.process_set." + std::to_string(call);
  r.splits = std::move(ranks);
  return r;
}

Request RemoveSet(int rank, int call, int32_t id) {
  Request r;
  r.rank = rank;
  r.op = OpType::kProcessSetRemove;
  r.name = "dadt.process_set." + std::to_string(call);
  r.root = id;
  return r;
}

Request Allreduce(int rank, const std::string& name, int32_t set) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.shape = {4};
  r.process_set_id = set;
  return r;
}

class CoordinatorSetOpsTest : public ::testing::Test {
 protected:
  // Every rank submits `make(rank)`; returns the released responses.
  template <typename F>
  std::vector<Response> AllSubmit(F make) {
    for (int r = 0; r < 4; ++r) coordinator_.Add(make(r), t0_);
    return coordinator_.Compute(t0_).responses;
  }

  ResponseCache cache_{16};
  Coordinator coordinator_{4, 1 << 20, microseconds(0), &cache_};
  Clock::time_point t0_ = Clock::now();
};

TEST_F(CoordinatorSetOpsTest, AddIsReleasedWhenEveryRankAgreesAndTakesTheLowestFreeId) {
  for (int r = 0; r < 3; ++r) coordinator_.Add(AddSet(r, 0, {3, 1}), t0_);
  EXPECT_TRUE(coordinator_.Compute(t0_).responses.empty()) << "rank 3 has not called it";
  coordinator_.Add(AddSet(3, 0, {3, 1}), t0_);
  std::vector<Response> out = coordinator_.Compute(t0_).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kProcessSetAdd) << out[0].error;
  EXPECT_EQ(out[0].process_set_id, 0);
  EXPECT_EQ(out[0].root, 1);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{1, 3})) << "the ranks, sorted";
  ASSERT_NE(coordinator_.process_sets().Find(1), nullptr);

  out = AllSubmit([](int r) { return AddSet(r, 1, {0, 2}); });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].root, 2);

  // The new set negotiates at once: its members' requests are accepted.
  coordinator_.Add(Allreduce(1, "w", 1), t0_);
  coordinator_.Add(Allreduce(3, "w", 1), t0_);
  out = coordinator_.Compute(t0_).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kAllreduce) << out[0].error;
  EXPECT_EQ(out[0].process_set_id, 1);

  // Remove set 1: its id is reused by the next add.
  out = AllSubmit([](int r) { return RemoveSet(r, 2, 1); });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kProcessSetRemove) << out[0].error;
  EXPECT_EQ(out[0].root, 1);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{1}));
  EXPECT_EQ(coordinator_.process_sets().Find(1), nullptr);
  out = AllSubmit([](int r) { return AddSet(r, 3, {2, 3}); });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].root, 1);
}

TEST_F(CoordinatorSetOpsTest, TwoAddsInOneListGetDistinctIds) {
  for (int r = 0; r < 4; ++r) {
    coordinator_.Add(AddSet(r, 0, {0, 1}), t0_);
    coordinator_.Add(AddSet(r, 1, {2, 3}), t0_);
  }
  std::vector<Response> out = coordinator_.Compute(t0_).responses;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].root, 1);
  EXPECT_EQ(out[1].root, 2);
}

TEST_F(CoordinatorSetOpsTest, DisagreementIsAnErrorNamingTheRanksAndTheirLists) {
  std::vector<Response> out = AllSubmit([](int r) {
    return AddSet(r, 0, r == 2 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{0, 1});
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kError);
  EXPECT_EQ(out[0].error,
            "ranks disagree on add_process_set (call 'dadt.process_set.0'): ranks 0, 1, 3: "
            "[0, 1]; rank 2: [0, 2]");
  EXPECT_EQ(coordinator_.process_sets().ids(), (std::vector<int32_t>{0})) << "nothing added";

  out = AllSubmit([](int r) { return r == 3 ? RemoveSet(r, 1, 1) : AddSet(r, 1, {0, 1}); });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].error.find("Mismatched collective operations"), std::string::npos) << out[0].error;

  out = AllSubmit([](int r) { return RemoveSet(r, 2, r == 0 ? 1 : 2); });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error,
            "ranks disagree on remove_process_set (call 'dadt.process_set.2'): rank 0: process "
            "set 1; ranks 1, 2, 3: process set 2");
}

TEST_F(CoordinatorSetOpsTest, BadAddsAndRemovesAreErrorsForEveryRank) {
  auto error_of = [&](auto make) {
    std::vector<Response> out = AllSubmit(make);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].type, Response::Type::kError);
    return out[0].error;
  };
  EXPECT_EQ(error_of([](int r) { return AddSet(r, 0, {}); }), "a process set needs at least one rank");
  EXPECT_NE(error_of([](int r) { return AddSet(r, 1, {0, 4}); }).find("rank 4 is not in the job"),
            std::string::npos);
  EXPECT_NE(error_of([](int r) { return AddSet(r, 2, {1, 1}); }).find("listed more than once"),
            std::string::npos);
  EXPECT_EQ(error_of([](int r) { return AddSet(r, 3, {0, 1, 2, 3}); }),
            "duplicate process set: ranks [0, 1, 2, 3] are already process set 0 (ranks [0, 1, 2, 3])");
  AllSubmit([](int r) { return AddSet(r, 4, {1, 2}); });
  EXPECT_EQ(error_of([](int r) { return AddSet(r, 5, {2, 1}); }),
            "duplicate process set: ranks [1, 2] are already process set 1 (ranks [1, 2])");
  EXPECT_EQ(error_of([](int r) { return RemoveSet(r, 6, 0); }),
            "the global process set (id 0) cannot be removed");

  std::vector<Response> out = AllSubmit([](int r) { return RemoveSet(r, 7, 5); });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kProcessSetRemove) << "not registered is not an error";
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{0}));
}

TEST_F(CoordinatorSetOpsTest, RemoveFailsTheSetsPendingTensorsFirst) {
  AllSubmit([](int r) { return AddSet(r, 0, {0, 1}); });
  AllSubmit([](int r) { return AddSet(r, 1, {2, 3}); });
  coordinator_.Add(Allreduce(1, "w", 1), t0_);  // rank 0 never submits it
  coordinator_.Add(Allreduce(2, "w", 2), t0_);  // set 2 is not removed: stays pending
  std::vector<Response> out = AllSubmit([](int r) { return RemoveSet(r, 2, 1); });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].type, Response::Type::kError);
  EXPECT_EQ(out[0].process_set_id, 1);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"w"}));
  EXPECT_EQ(out[0].error,
            "process set 1 was removed while tensor 'w' was in flight (submitted by ranks [1])");
  EXPECT_EQ(out[1].type, Response::Type::kProcessSetRemove);
  EXPECT_EQ(coordinator_.pending(), 1u) << "set 2's tensor is still pending";

  // A late request for the removed set is refused for its set and name.
  coordinator_.Add(Allreduce(0, "w", 1), t0_);
  out = coordinator_.Compute(t0_).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kError);
  EXPECT_NE(out[0].error.find("process set 1 is not registered"), std::string::npos) << out[0].error;
}

TEST_F(CoordinatorSetOpsTest, AddWhileARankHasJoinedFailsInsteadOfWaiting) {
  Request join;
  join.rank = 3;
  join.op = OpType::kJoin;
  coordinator_.Add(join, t0_);
  coordinator_.Add(AddSet(0, 0, {0, 1}), t0_);
  std::vector<Response> out = coordinator_.Compute(t0_).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kError);
  EXPECT_NE(out[0].error.find("have called join()"), std::string::npos) << out[0].error;
  EXPECT_EQ(coordinator_.process_sets().ids(), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace core
}  // namespace dadt
