// Point to point through negotiation (runtime/core/negotiation/peer_matcher.h) with 4 simulated
// ranks: a send and a receive of one name are released to the pair only, the moment both are in,
// whatever the other ranks do; swaps pair the two ranks that name each other, the one that waited
// longest first; disagreements (dtype, shape, who sends, a wrong partner) are errors for the two
// ranks concerned; a withdrawn exchange completes alone; an explicit receive whose sender never
// comes is a stall that names both. A neighbor allgather is a collective whose graph every rank
// must agree on.
#include <algorithm>

#include <gtest/gtest.h>

#include "runtime/core/negotiation/coordinator.h"
#include "runtime/core/negotiation/peer_matcher.h"

namespace dadt {
namespace core {
namespace {

using Clock = Coordinator::Clock;
using std::chrono::microseconds;
using std::chrono::seconds;

Request Peer(int rank, const std::string& name, std::vector<int64_t> send,
             std::vector<int64_t> recv, Shape shape = {4}) {
  Request r;
  r.rank = rank;
  r.op = OpType::kPeerExchange;
  r.name = name;
  r.shape = std::move(shape);
  r.send_ranks = std::move(send);
  r.recv_ranks = std::move(recv);
  return r;
}

Request Neighbor(int rank, std::vector<int64_t> send, std::vector<int64_t> recv) {
  Request r = Peer(rank, "nbr", std::move(send), std::move(recv));
  r.op = OpType::kNeighborAllgather;
  return r;
}

class CoordinatorP2PTest : public ::testing::Test {
 protected:
  std::vector<Response> Released() { return coordinator_.Compute(t0_).responses; }

  ResponseCache cache_{16};
  Coordinator coordinator_{4, 1 << 20, microseconds(0), &cache_};
  Clock::time_point t0_ = Clock::now();
};

TEST_F(CoordinatorP2PTest, SendAndReceiveAreReleasedToThePairAloneWhileOthersAreBusy) {
  // Ranks 2 and 3 have an allreduce half submitted: the pair does not wait for it.
  Request partial;
  partial.rank = 2;
  partial.name = "grad";
  partial.shape = {4};
  coordinator_.Add(partial, t0_);
  coordinator_.Add(Peer(0, "m", {1}, {}), t0_);
  EXPECT_TRUE(Released().empty()) << "rank 1 has not asked for it";
  coordinator_.Add(Peer(1, "m", {}, {0}), t0_);
  const Clock::time_point deadline = coordinator_.NextDeadline();
  EXPECT_LE(deadline, Clock::now()) << "a matched pair goes out at once";
  std::vector<Response> out = Released();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kPeerExchange);
  EXPECT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_EQ(out[0].names, std::vector<std::string>{"m"});
  std::vector<int64_t> pair = out[0].sizes;
  std::sort(pair.begin(), pair.end());
  EXPECT_EQ(pair, (std::vector<int64_t>{0, 1}));
}

TEST_F(CoordinatorP2PTest, EachResponseCarriesTheNextSequenceNumber) {
  coordinator_.Add(Peer(0, "a", {1}, {}), t0_);
  coordinator_.Add(Peer(1, "a", {}, {0}), t0_);
  coordinator_.Add(Peer(2, "b", {3}, {}), t0_);
  coordinator_.Add(Peer(3, "b", {}, {2}), t0_);
  std::vector<Response> first = Released();
  for (int r = 0; r < 4; ++r) coordinator_.Add(Neighbor(r, {(r + 1) % 4}, {(r + 3) % 4}), t0_);
  std::vector<Response> second = Released();
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0].root, 0);
  EXPECT_EQ(first[1].root, 1);
  EXPECT_EQ(second[0].type, Response::Type::kNeighborAllgather) << second[0].error;
  EXPECT_EQ(second[0].root, 2);
}

TEST_F(CoordinatorP2PTest, SwapsPairTheRanksThatNameEachOtherTheLongestWaitingFirst) {
  const std::vector<int64_t> all = {0, 1, 2, 3};
  auto others = [&](int64_t me) {
    std::vector<int64_t> v;
    std::copy_if(all.begin(), all.end(), std::back_inserter(v), [&](int64_t r) { return r != me; });
    return v;
  };
  coordinator_.Add(Peer(2, "g", others(2), others(2)), t0_);
  coordinator_.Add(Peer(3, "g", {1}, {1}), t0_);  // names rank 1 only: cannot take rank 2
  EXPECT_TRUE(Released().empty());
  coordinator_.Add(Peer(0, "g", others(0), others(0)), t0_);
  std::vector<Response> out = Released();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{2, 0})) << "rank 2 waited longest";
  coordinator_.Add(Peer(1, "g", others(1), others(1)), t0_);
  out = Released();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{3, 1}));
}

TEST_F(CoordinatorP2PTest, DisagreementsAreErrorsForTheTwoRanks) {
  Request wrong_dtype = Peer(1, "d", {}, {0});
  wrong_dtype.dtype = DataType::kFloat64;
  coordinator_.Add(Peer(0, "d", {1}, {}), t0_);
  coordinator_.Add(wrong_dtype, t0_);
  coordinator_.Add(Peer(2, "s", {3}, {}), t0_);
  coordinator_.Add(Peer(3, "s", {}, {2}, {5}), t0_);
  // Both send: neither can ever match.
  coordinator_.Add(Peer(0, "both", {1}, {}), t0_);
  coordinator_.Add(Peer(1, "both", {0}, {}), t0_);
  // Rank 2 receives from rank 1, which sends to rank 3.
  coordinator_.Add(Peer(2, "who", {}, {1}), t0_);
  coordinator_.Add(Peer(1, "who", {3}, {}), t0_);
  std::vector<Response> out = Released();
  ASSERT_EQ(out.size(), 4u);
  for (const Response& r : out) {
    EXPECT_EQ(r.type, Response::Type::kPeerExchange);
    EXPECT_EQ(r.sizes.size(), 2u) << "delivered to both ranks";
    EXPECT_FALSE(r.error.empty()) << r.names[0];
  }
  EXPECT_NE(out[0].error.find("data types"), std::string::npos) << out[0].error;
  EXPECT_NE(out[1].error.find("shapes"), std::string::npos) << out[1].error;
  EXPECT_NE(out[2].error.find("rank 1 sends 'both' to rank 0, but rank 0 sends 'both' to rank 1"),
            std::string::npos) << out[2].error;
  EXPECT_NE(out[3].error.find("rank 2 receives 'who' from rank 1, but rank 1 sends 'who' to rank 3"),
            std::string::npos) << out[3].error;
}

TEST_F(CoordinatorP2PTest, BadRequestsAreRefusedToTheirRankAlone) {
  coordinator_.Add(Peer(0, "self", {0}, {}), t0_);
  coordinator_.Add(Peer(1, "far", {}, {7}), t0_);
  coordinator_.Add(Peer(2, "none", {}, {}), t0_);
  Request in_set = Peer(3, "set", {0}, {});
  in_set.process_set_id = 1;
  coordinator_.Add(in_set, t0_);
  std::vector<Response> out = Released();
  ASSERT_EQ(out.size(), 4u);
  const char* why[] = {"itself", "not a rank of this job of 4", "names no rank",
                       "global process set only"};
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].sizes, std::vector<int64_t>{static_cast<int64_t>(i)});
    EXPECT_NE(out[i].error.find(why[i]), std::string::npos) << out[i].error;
  }
}

TEST_F(CoordinatorP2PTest, AWithdrawnExchangeCompletesAloneAndAMatchedOneIsNotUndone) {
  coordinator_.Add(Peer(0, "g", {1, 2}, {1, 2}), t0_);
  EXPECT_TRUE(Released().empty());
  Request withdraw = Peer(0, std::string("g") + kWithdrawSuffix, {}, {});
  withdraw.withdraw = true;
  coordinator_.Add(withdraw, t0_);
  std::vector<Response> out = Released();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names[0], "g");
  EXPECT_EQ(out[0].sizes, std::vector<int64_t>{0}) << "no partner";
  EXPECT_EQ(out[1].names[0], withdraw.name);
  // Rank 1 now asks for the same name: rank 0's request is gone, so it waits.
  coordinator_.Add(Peer(1, "g", {0}, {0}), t0_);
  EXPECT_TRUE(Released().empty());
  // Matched before the withdrawal arrives: the pair stands, the withdrawal only completes itself.
  coordinator_.Add(Peer(0, "g", {1}, {1}), t0_);
  withdraw.rank = 0;
  coordinator_.Add(withdraw, t0_);
  out = Released();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sizes.size(), 2u);
  EXPECT_EQ(out[1].names[0], withdraw.name);
}

TEST_F(CoordinatorP2PTest, AReceiveWhoseSenderNeverComesIsAStallNamingBoth) {
  StallOptions stall;
  stall.enabled = true;
  stall.warning_time = seconds(1);
  stall.shutdown_time = seconds(0);
  coordinator_.set_stall_options(stall);
  coordinator_.Add(Peer(2, "late", {}, {3}), t0_);
  // A swap with several candidates may wait for them by design: not a stall.
  coordinator_.Add(Peer(0, "g", {1, 3}, {1, 3}), t0_);
  ResponseList list = coordinator_.Compute(t0_ + seconds(5));
  EXPECT_NE(list.stall_warning.find("late"), std::string::npos) << list.stall_warning;
  EXPECT_EQ(list.stall_warning.find("'g'"), std::string::npos) << list.stall_warning;
  EXPECT_NE(list.stall_warning.find("3"), std::string::npos) << list.stall_warning;
}

TEST_F(CoordinatorP2PTest, ANeighborAllgatherNeedsEveryRankToAgreeOnTheGraph) {
  for (int r = 0; r < 4; ++r) coordinator_.Add(Neighbor(r, {(r + 1) % 4}, {(r + 3) % 4}), t0_);
  std::vector<Response> out = Released();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kNeighborAllgather) << out[0].error;
  // Rank 3 receives from rank 1 instead of rank 2.
  for (int r = 0; r < 4; ++r) {
    coordinator_.Add(Neighbor(r, {(r + 1) % 4}, {r == 3 ? 1 : (r + 3) % 4}), t0_);
  }
  out = Released();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, Response::Type::kError);
  EXPECT_NE(out[0].error.find("ranks disagree on the graph of neighbor_allgather 'nbr'"),
            std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("rank 2 sends to rank 3, but rank 3 receives from [1]"),
            std::string::npos) << out[0].error;
}

}  // namespace
}  // namespace core
}  // namespace dadt
