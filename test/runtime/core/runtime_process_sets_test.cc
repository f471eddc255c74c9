// Process sets through the whole runtime (docs/process-sets.md): 4 ranks as threads, each with
// its own Runtime over the TCP star and Gloo, add sets by negotiation, run collectives on them
// (the same name on two disjoint sets at once, a set of one rank, an overlapping set), remove
// them while tensors are pending, and get the errors the design lists on the right ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "runtime/core/runtime.h"
#include "test/runtime/core/thread_ranks.h"

namespace dadt {
namespace core {
namespace {

constexpr int kSize = 4;

// `eager_bytes`: allreduces up to this size are reduced by the coordinator (eager_reduce.h); 0
// sends every one through the set's data plane.
void RunRanks(const std::function<void(int, Runtime&)>& body, int64_t eager_bytes = 32 * 1024) {
  testing_threads::RunThreadRanks(kSize, [&](RuntimeOptions& o) { o.eager_threshold_bytes = eager_bytes; },
                                  [&](int r, Runtime& rt) {
    body(r, rt);
    TensorEntry end;  // no rank shuts the job down while another still works
    end.request.op = OpType::kBarrier;
    end.request.name = "end";
    auto h = rt.Enqueue(std::move(end));
    ASSERT_TRUE(h.ok());
    EXPECT_TRUE(rt.handles().Wait(*h).ok());
  }, [](int, Runtime& rt) {
    EXPECT_EQ(rt.process_sets().ids(), (std::vector<int32_t>{0})) << "shutdown drops sets";
  });
}

TensorEntry Entry(OpType op, const std::string& name, int32_t set, std::vector<float>& in,
                  std::vector<float>* out) {
  TensorEntry e;
  e.request.op = op;
  e.request.name = name;
  e.request.shape = {static_cast<int64_t>(in.size())};
  e.request.reduce_op = ReduceOp::kSum;
  e.request.process_set_id = set;
  e.input = in.data();
  e.output = out ? out->data() : nullptr;
  return e;
}

// Enqueues and waits; the status.
Status RunOne(Runtime& rt, TensorEntry e, int64_t* handle = nullptr) {
  auto h = rt.Enqueue(std::move(e));
  if (!h.ok()) return h.status();
  Status s = rt.handles().Wait(*h);
  if (handle) {
    *handle = *h;
  } else {
    rt.handles().Release(*h);
  }
  return s;
}

class RuntimeProcessSetsEagerTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(RuntimeProcessSetsEagerTest, CollectivesRunOverTheirSetsMembersOnly) {
  RunRanks([](int rank, Runtime& rt) {
    // Every rank adds the same sets in the same order; ids are the lowest free ones.
    auto even = rt.AddProcessSet({2, 0});
    auto odd = rt.AddProcessSet({1, 3});
    auto one = rt.AddProcessSet({3});
    auto upper = rt.AddProcessSet({1, 2, 3});
    ASSERT_TRUE(even.ok() && odd.ok() && one.ok() && upper.ok()) << even.status().ToString();
    EXPECT_EQ(std::vector<int32_t>({*even, *odd, *one, *upper}), std::vector<int32_t>({1, 2, 3, 4}));
    EXPECT_EQ(rt.process_sets().Find(*upper)->ranks, (std::vector<int>{1, 2, 3}));

    // The same name on the two disjoint sets at once: each sums its own members.
    std::vector<float> in(5, static_cast<float>(rank + 1)), out(5, -1.f);
    const int32_t mine = rank % 2 == 0 ? *even : *odd;
    ASSERT_TRUE(RunOne(rt, Entry(OpType::kAllreduce, "w", mine, in, &out)).ok());
    EXPECT_EQ(out[0], rank % 2 == 0 ? 1.f + 3.f : 2.f + 4.f) << "rank " << rank;

    // Average divides by the set's size.
    TensorEntry avg = Entry(OpType::kAllreduce, "avg", mine, in, &out);
    avg.request.reduce_op = ReduceOp::kAverage;
    ASSERT_TRUE(RunOne(rt, std::move(avg)).ok());
    EXPECT_EQ(out[4], rank % 2 == 0 ? 2.f : 3.f);

    if (rank == 3) {  // a set of one: no peer
      TensorEntry alone = Entry(OpType::kAllreduce, "w", *one, in, &out);
      alone.request.reduce_op = ReduceOp::kAverage;
      ASSERT_TRUE(RunOne(rt, std::move(alone)).ok());
      EXPECT_EQ(out[0], 4.f);
    }
    if (rank == 0) return;
    // The overlapping set {1, 2, 3}: a broadcast from global rank 2, an allgather in set-rank
    // order, a reducescatter whose rows are split over 3 ranks.
    std::vector<float> b(3, static_cast<float>(rank * 10)), bout(3, -1.f);
    TensorEntry bc = Entry(OpType::kBroadcast, "b", *upper, b, &bout);
    bc.request.root = 2;
    ASSERT_TRUE(RunOne(rt, std::move(bc)).ok());
    EXPECT_EQ(bout, std::vector<float>(3, 20.f));

    std::vector<float> g(1, static_cast<float>(rank));
    int64_t h = -1;
    ASSERT_TRUE(RunOne(rt, Entry(OpType::kAllgather, "g", *upper, g, nullptr), &h).ok());
    auto gathered = rt.handles().TakeOutput(h);
    rt.handles().Release(h);
    ASSERT_EQ(gathered->bytes, 3 * 4);
    const float* gv = static_cast<const float*>(gathered->ptr());
    EXPECT_EQ(std::vector<float>(gv, gv + 3), (std::vector<float>{1.f, 2.f, 3.f}));

    std::vector<float> rows(4, 1.f);
    ASSERT_TRUE(RunOne(rt, Entry(OpType::kReducescatter, "rs", *upper, rows, nullptr), &h).ok());
    auto share = rt.handles().TakeOutput(h);
    rt.handles().Release(h);
    EXPECT_EQ(share->bytes, (rank == 1 ? 2 : 1) * 4) << "4 rows over 3 ranks: 2, 1, 1";
    EXPECT_EQ(static_cast<const float*>(share->ptr())[0], 3.f);
  }, GetParam());
}

INSTANTIATE_TEST_SUITE_P(EagerOrDataPlane, RuntimeProcessSetsEagerTest,
                         ::testing::Values(int64_t{0}, int64_t{32} * 1024));

TEST(RuntimeProcessSetsTest, BadCallsFailOnTheCallerAndRefusedAddsOnEveryRank) {
  RunRanks([](int rank, Runtime& rt) {
    auto low = rt.AddProcessSet({0, 1});
    ASSERT_TRUE(low.ok()) << low.status().ToString();
    std::vector<float> in(4, 1.f), out(4);
    if (rank >= 2) {  // not a member: refused at once, here only
      auto h = rt.Enqueue(Entry(OpType::kAllreduce, "x", *low, in, &out));
      ASSERT_EQ(h.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(h.status().message(), "allreduce of tensor 'x': rank " + std::to_string(rank) +
                                          " is not a member of process set 1 (ranks [0, 1])");
    } else {
      TensorEntry bc = Entry(OpType::kBroadcast, "b", *low, in, &out);
      bc.request.root = 3;
      auto h = rt.Enqueue(std::move(bc));
      EXPECT_EQ(h.status().message(),
                "broadcast of tensor 'b': root rank 3 is not a member of process set 1 (ranks [0, 1])");
      TensorEntry a2a = Entry(OpType::kAlltoall, "a", *low, in, nullptr);
      a2a.request.splits = {1, 1, 1, 1};
      EXPECT_EQ(rt.Enqueue(std::move(a2a)).status().code(), StatusCode::kInvalidArgument)
          << "alltoall splits: one per set member";
    }
    auto none = rt.Enqueue(Entry(OpType::kAllreduce, "y", 7, in, &out));
    EXPECT_EQ(none.status().message(), "process set 7 is not registered (removed?)");

    // Refused by the coordinator: every rank gets the same error.
    auto dup = rt.AddProcessSet({1, 0});
    EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(dup.status().message(),
              "duplicate process set: ranks [0, 1] are already process set 1 (ranks [0, 1])");
    auto differ = rt.AddProcessSet(rank == 3 ? std::vector<int>{2, 3} : std::vector<int>{1, 2});
    EXPECT_EQ(differ.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(differ.status().message().find("ranks disagree on add_process_set"),
              std::string::npos) << differ.status().message();
    EXPECT_EQ(rt.RemoveProcessSet(0).status().code(), StatusCode::kInvalidArgument);

    // Remove: true, then false; the id is free for the next add.
    EXPECT_TRUE(*rt.RemoveProcessSet(*low));
    EXPECT_FALSE(*rt.RemoveProcessSet(*low));
    EXPECT_EQ(*rt.AddProcessSet({2, 3}), *low);
  });
}

TEST(RuntimeProcessSetsTest, RemoveFailsPendingTensorsWhileAnotherSetKeepsWorking) {
  RunRanks([](int rank, Runtime& rt) {
    auto low = rt.AddProcessSet({0, 1});
    auto high = rt.AddProcessSet({2, 3});
    ASSERT_TRUE(low.ok() && high.ok());
    std::vector<std::vector<float>> in(20, std::vector<float>(1000, 1.f)), out = in;
    std::vector<int64_t> busy;
    int64_t pending = -1;
    if (rank >= 2) {  // set {2, 3} is busy while {0, 1} goes away
      for (int i = 0; i < 20; ++i) {
        auto h = rt.Enqueue(Entry(OpType::kAllreduce, "t" + std::to_string(i), *high, in[i], &out[i]));
        ASSERT_TRUE(h.ok());
        busy.push_back(*h);
      }
    } else if (rank == 0) {  // rank 1 never submits it
      auto h = rt.Enqueue(Entry(OpType::kAllreduce, "p", *low, in[0], &out[0]));
      ASSERT_TRUE(h.ok());
      pending = *h;
    }
    auto removed = rt.RemoveProcessSet(*low);
    ASSERT_TRUE(removed.ok()) << removed.status().ToString();
    EXPECT_TRUE(*removed);
    if (rank == 0) {
      Status s = rt.handles().Wait(pending);
      EXPECT_EQ(s.message(),
                "process set 1 was removed while tensor 'p' was in flight (submitted by ranks [0])");
    }
    for (int i = 0; i < static_cast<int>(busy.size()); ++i) {
      ASSERT_TRUE(rt.handles().Wait(busy[i]).ok());
      EXPECT_EQ(out[i][999], 2.f);
    }
  });
}

}  // namespace
}  // namespace core
}  // namespace dadt
