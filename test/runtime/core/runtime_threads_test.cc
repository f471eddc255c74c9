// The whole runtime with N ranks as threads in one process: real control channel over loopback,
// real Gloo data plane, one in-memory rendezvous store. Checks results, fusion on/off equivalence,
// mismatch errors on every rank, duplicate names and join.
#include "runtime/core/runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "test/runtime/core/thread_ranks.h"

namespace dadt {
namespace core {
namespace {

// Runs body(rank, runtime) on `size` threads, each with its own Runtime.
void RunRanks(int size, int64_t fusion_bytes, const std::function<void(int, Runtime&)>& body,
              int64_t eager_bytes = 32 * 1024) {
  testing_threads::RunThreadRanks(size, [&](RuntimeOptions& o) {
    o.fusion_threshold_bytes = fusion_bytes;
    o.eager_threshold_bytes = eager_bytes;
  }, body);
}

TensorEntry Entry(OpType op, const std::string& name, std::vector<float>& in, std::vector<float>& out) {
  TensorEntry e;
  e.request.op = op;
  e.request.name = name;
  e.request.dtype = DataType::kFloat32;
  e.request.shape = {static_cast<int64_t>(in.size())};
  e.request.reduce_op = ReduceOp::kSum;
  e.input = in.data();
  e.output = out.data();
  return e;
}

class RuntimeThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(RuntimeThreadsTest, ManyAllreducesFusedOrNotEagerOrNotGiveExactSums) {
  const int size = GetParam();
  for (int64_t eager : {int64_t{0}, int64_t{32} << 10})
  for (int64_t fusion : {int64_t{0}, int64_t{1} << 20}) {
    RunRanks(size, fusion, [&](int rank, Runtime& rt) {
      const int kTensors = 50;
      std::vector<std::vector<float>> in(kTensors), out(kTensors);
      std::vector<int64_t> handles;
      for (int t = 0; t < kTensors; ++t) {
        in[t].assign(1 + 37 * t, static_cast<float>(rank + t));
        out[t].assign(in[t].size(), -1.f);
        auto h = rt.Enqueue(Entry(OpType::kAllreduce, "t" + std::to_string(t), in[t], out[t]));
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        handles.push_back(*h);
      }
      for (int t = kTensors - 1; t >= 0; --t) {  // out of order on purpose
        ASSERT_TRUE(rt.handles().Wait(handles[t]).ok());
        const float expect = static_cast<float>(size * t + size * (size - 1) / 2);
        for (float v : out[t]) {
          ASSERT_EQ(v, expect) << "tensor " << t << " fusion " << fusion << " eager " << eager;
        }
      }
    }, eager);
  }
}

TEST_P(RuntimeThreadsTest, EagerAndDataPlanePathsAgreeOnEveryOp) {
  const int size = GetParam();
  std::vector<std::vector<float>> results;
  for (int64_t eager : {int64_t{0}, int64_t{1} << 20}) {
    std::vector<float> rank0_result;
    RunRanks(size, 1 << 20, [&](int rank, Runtime& rt) {
      std::vector<float> all;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct}) {
        std::vector<float> in(9), out(9);
        for (int i = 0; i < 9; ++i) in[i] = static_cast<float>((rank + 1) * (i % 3 + 1));
        TensorEntry e = Entry(OpType::kAllreduce, "op" + std::to_string(static_cast<int>(op)), in, out);
        e.request.reduce_op = op;
        e.request.prescale = 0.5;
        e.request.postscale = 3.0;
        auto h = rt.Enqueue(std::move(e));
        ASSERT_TRUE(h.ok());
        ASSERT_TRUE(rt.handles().Wait(*h).ok());
        all.insert(all.end(), out.begin(), out.end());
      }
      if (rank == 0) rank0_result = all;
    }, eager);
    results.push_back(rank0_result);
  }
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0], results[1]) << "eager and data-plane allreduce differ";
  // Spot-check Sum: 3 * sum_r 0.5 * (r + 1) * 1 for element 0.
  float expect = 0;
  for (int r = 0; r < size; ++r) expect += 0.5f * (r + 1);
  EXPECT_FLOAT_EQ(results[0][0], 3.0f * expect);
}

TEST_P(RuntimeThreadsTest, RepeatedStepsHitTheCacheAndStayCorrect) {
  const int size = GetParam();
  RunRanks(size, 1 << 20, [&](int rank, Runtime& rt) {
    std::vector<float> a(16), out(16);
    for (int step = 0; step < 20; ++step) {
      std::fill(a.begin(), a.end(), static_cast<float>(step * (rank + 1)));
      TensorEntry e = Entry(OpType::kAllreduce, "grad", a, out);
      e.request.reduce_op = ReduceOp::kAverage;
      auto h = rt.Enqueue(std::move(e));
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE(rt.handles().Wait(*h).ok());
      const float expect = step * (size + 1) / 2.0f;
      ASSERT_FLOAT_EQ(out[0], expect) << "step " << step;
    }
  });
}

TEST_P(RuntimeThreadsTest, ShapeMismatchFailsOnEveryRankNamingTheTensor) {
  const int size = GetParam();
  if (size < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  RunRanks(size, 1 << 20, [&](int rank, Runtime& rt) {
    std::vector<float> in(rank == 1 ? 3 : 4, 1.f), out(in.size());
    auto h = rt.Enqueue(Entry(OpType::kAllreduce, "bad.shape", in, out));
    ASSERT_TRUE(h.ok());
    Status s = rt.handles().Wait(*h);
    EXPECT_EQ(s.code(), StatusCode::kMismatch);
    EXPECT_NE(s.message().find("'bad.shape'"), std::string::npos) << s.message();
    // The job is still usable afterwards.
    std::vector<float> ok_in(2, 1.f), ok_out(2);
    auto h2 = rt.Enqueue(Entry(OpType::kAllreduce, "after", ok_in, ok_out));
    ASSERT_TRUE(h2.ok());
    EXPECT_TRUE(rt.handles().Wait(*h2).ok());
    EXPECT_EQ(ok_out[0], size);
  });
}

TEST_P(RuntimeThreadsTest, DuplicateInFlightNameIsRefusedAtOnce) {
  const int size = GetParam();
  // Rank 0 submits last, so on every other rank the first "dup" is certainly still in flight
  // when the second is enqueued. Rank 0 only completes the collective (a second "dup" it got
  // accepted would have no partner); alone, it checks both outcomes.
  std::atomic<int> others_done{0};
  RunRanks(size, 1 << 20, [&](int rank, Runtime& rt) {
    if (rank == 0) {
      while (others_done.load() < size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<float> in(4, 1.f), out(4), out2(4);
    auto h = rt.Enqueue(Entry(OpType::kAllreduce, "dup", in, out));
    ASSERT_TRUE(h.ok());
    if (rank == 0 && size > 1) {
      EXPECT_TRUE(rt.handles().Wait(*h).ok());
      return;
    }
    auto again = rt.Enqueue(Entry(OpType::kAllreduce, "dup", in, out2));
    if (rank != 0) {
      ASSERT_FALSE(again.ok()) << "a second 'dup' was accepted while the first was in flight";
      ++others_done;
    }
    if (!again.ok()) {
      EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(again.status().message().find("'dup'"), std::string::npos);
    } else {
      EXPECT_TRUE(rt.handles().Wait(*again).ok());
    }
    EXPECT_TRUE(rt.handles().Wait(*h).ok());
  });
}

TEST_P(RuntimeThreadsTest, JoinLetsRanksRunUnevenAllreduces) {
  const int size = GetParam();
  RunRanks(size, 1 << 20, [&](int rank, Runtime& rt) {
    // Rank r runs r + 1 allreduces, then joins; joined ranks contribute zeros.
    for (int i = 0; i <= rank; ++i) {
      std::vector<float> in(5, 1.f), out(5);
      auto h = rt.Enqueue(Entry(OpType::kAllreduce, "step" + std::to_string(i), in, out));
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE(rt.handles().Wait(*h).ok());
      EXPECT_EQ(out[0], static_cast<float>(size - i)) << "step " << i;
    }
    TensorEntry join;
    join.request.op = OpType::kJoin;
    auto h = rt.Enqueue(std::move(join));
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(rt.handles().Wait(*h).ok());
    EXPECT_EQ(rt.handles().IntResult(*h), size - 1);
  });
}

TEST_P(RuntimeThreadsTest, AllgatherWithUnevenFirstDimension) {
  const int size = GetParam();
  RunRanks(size, 1 << 20, [&](int rank, Runtime& rt) {
    std::vector<float> in(rank * 2, static_cast<float>(rank)), unused;
    TensorEntry e = Entry(OpType::kAllgather, "gather", in, unused);
    e.request.shape = {rank, 2};
    e.output = nullptr;
    auto h = rt.Enqueue(std::move(e));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(rt.handles().Wait(*h).ok());
    auto out = rt.handles().TakeOutput(*h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->shape, (Shape{size * (size - 1) / 2, 2}));
    const float* v = reinterpret_cast<const float*>(out->data.get());
    int64_t row = 0;
    for (int r = 0; r < size; ++r) {
      for (int i = 0; i < r * 2; ++i) EXPECT_EQ(v[row * 2 + i], r);
      row += r;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, RuntimeThreadsTest, ::testing::Values(1, 2, 3, 4));

// Across hosts Gloo measures the link when it connects, and a cycle time the user did not choose
// follows it (RuntimeOptions::CycleTimeMsForLink): every rank must come out with the same one (the
// coordinator's fusion window and each rank's request hold use it), a starting value the rule never
// gives (7 ms) must be replaced by one in its 1-5 ms range whatever rate loopback shows under load
// or a sanitizer, and a chosen cycle time is kept as it is.
TEST(RuntimeAcrossHostsTest, TheCycleTimeFollowsTheMeasuredLinkUnlessChosen) {
  for (bool chosen : {false, true}) {
    std::vector<double> cycle(2, -1);
    testing_threads::RunThreadRanks(2, [&](RuntimeOptions& o) {
      o.local_size = 1;  // as if on two hosts
      o.local_rank = 0;
      o.iface = "lo";
      o.cycle_time_ms = chosen ? 2.5 : 7.0;
      o.cycle_time_given = chosen;
    }, [&](int rank, Runtime& rt) {
      cycle[rank] = rt.options().cycle_time_ms;
      std::vector<float> in(1000, static_cast<float>(rank + 1)), out(1000);
      auto h = rt.Enqueue(Entry(OpType::kAllreduce, "x", in, out));
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      ASSERT_TRUE(rt.handles().Wait(*h).ok());
      EXPECT_EQ(out[999], 3.0f);
    });
    EXPECT_EQ(cycle[1], cycle[0]) << "chosen " << chosen;
    if (chosen) {
      EXPECT_EQ(cycle[0], 2.5);
    } else {
      EXPECT_GE(cycle[0], 1.0);
      EXPECT_LE(cycle[0], 5.0);
    }
  }
}

TEST(RuntimeOptionsLinkTest, CycleTimeGrowsWithTheLinkFromOneToFiveMs) {
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(0), 1.0);
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(-5), 1.0);
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(std::nan("")), 1.0);
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(117e6), 1.0);   // 1 Gbit/s
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(480e6), 3.0);
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(1170e6), 5.0);  // 10 Gbit/s
  EXPECT_EQ(RuntimeOptions::CycleTimeMsForLink(1e12), 5.0);
}

}  // namespace
}  // namespace core
}  // namespace dadt
