// Executor (runtime/core/executor.h): one rank's execution of the coordinator's responses.
// Ranks run as threads over real Gloo (test/runtime/backends/rank_threads.h), each with its own
// Executor, HandleTable and TensorQueue. Covers the reduced values of fused and lone allreduces
// (prescale, postscale, Average), zeros from a joined rank, the layouts of allgather, alltoall,
// reducescatter and broadcast, barrier and join results, and the errors: a mismatch reaches every
// tensor's handle, a wrong-sized output names its tensor, a backend failure completes every fused
// tensor and breaks the job, a GPU tensor without a GPU data plane fails only its own handle.
// After any completion the tensor's name is free again. The timeline's bars:
// executor_timeline_test.cc.
#include "runtime/core/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "test/runtime/backends/rank_threads.h"
#include "test/runtime/core/executor_test_util.h"

namespace dadt {
namespace core {
namespace {

using testutil::RunRanks;

using namespace testing_executor;  // NOLINT: test helpers

class ExecutorTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
};

TEST_P(ExecutorTest, FusedAllreduceGivesEachTensorItsOwnSum) {
  const int n = size();
  const std::vector<int64_t> counts = {0, 1, 5, 7, 3};  // an empty tensor among them
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    std::vector<std::vector<float>> in(counts.size()), out(counts.size());
    std::vector<std::string> names;
    std::vector<int64_t> handles;
    for (size_t t = 0; t < counts.size(); ++t) {
      for (int64_t i = 0; i < counts[t]; ++i) in[t].push_back(100.0f * rank + 10.0f * t + i);
      out[t].assign(counts[t], -1.0f);
      names.push_back("grad." + std::to_string(t));
      handles.push_back(s.Add(Entry(OpType::kAllreduce, names.back(), DataType::kFloat32,
                                    {counts[t]}, in[t].data(), out[t].data())));
    }
    ASSERT_OK(s.executor.Execute(Make(Response::Type::kAllreduce, names, counts), s.entries));
    EXPECT_TRUE(s.entries.empty());
    for (size_t t = 0; t < counts.size(); ++t) {
      EXPECT_OK(s.handles.Wait(handles[t]));
      for (int64_t i = 0; i < counts[t]; ++i) {
        EXPECT_EQ(out[t][i], 100.0f * n * (n - 1) / 2 + n * (10.0f * t + i)) << names[t] << "[" << i << "]";
        EXPECT_EQ(in[t][i], 100.0f * rank + 10.0f * t + i) << "input of a fused tensor changed";
      }
      EXPECT_TRUE(s.NameFree(names[t]));
    }
  });
}

// Gloo reduces a fused response's tensors where they lie, with postscale and Average inside the
// collective (Backend::AllreducePieces), through shared memory on one host and over its ring
// otherwise. Both give the same result, in place and out of place (the same bits at 2 ranks;
// beyond, the ring adds in another order), and every rank the same bits.
TEST_P(ExecutorTest, FusedAverageHasTheSameBitsInSharedMemoryAndOverTheRing) {
  const int n = size();
  const std::vector<int64_t> counts = {3000, 1, 70000, 0, 513};
  std::vector<std::vector<std::vector<float>>> got(2, std::vector<std::vector<float>>(n));
  for (int ring = 0; ring < 2; ++ring) {
    RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
      RankState s(&backend, rank, n);
      std::vector<std::vector<float>> in(counts.size()), out(counts.size());
      std::vector<std::string> names;
      for (size_t t = 0; t < counts.size(); ++t) {
        for (int64_t i = 0; i < counts[t]; ++i) in[t].push_back(0.1f * static_cast<float>(i % 97) + 1.7f * rank + t);
        out[t].assign(counts[t], -1.0f);
        names.push_back("g." + std::to_string(t));
        float* dst = t % 2 ? in[t].data() : out[t].data();  // odd tensors in place
        s.Add(Entry(OpType::kAllreduce, names.back(), DataType::kFloat32, {counts[t]}, in[t].data(), dst));
      }
      Response r = Make(Response::Type::kAllreduce, names, counts, DataType::kFloat32, ReduceOp::kAverage);
      r.postscale = 3.0;
      ASSERT_OK(s.executor.Execute(r, s.entries));
      for (size_t t = 0; t < counts.size(); ++t) {
        const std::vector<float>& v = t % 2 ? in[t] : out[t];
        got[ring][rank].insert(got[ring][rank].end(), v.begin(), v.end());
      }
    }, std::chrono::seconds(60), [&](backends::BackendOptions& o) { o.shm_allreduce = ring == 0; });
  }
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_EQ(got[0][rank].size(), got[1][rank].size());
    for (size_t i = 0; i < got[0][rank].size(); ++i) {
      if (n <= 2) {
        ASSERT_EQ(got[0][rank][i], got[1][rank][i]) << "rank " << rank << " element " << i;
      } else {
        ASSERT_NEAR(got[0][rank][i], got[1][rank][i], 1e-4 * std::abs(got[1][rank][i])) << "element " << i;
      }
    }
    EXPECT_EQ(got[0][rank], got[0][0]) << "rank " << rank << " differs from rank 0";
  }
  // Spot check against the arithmetic: element 5 of tensor 0, 3 x the mean over ranks.
  float sum = 0;
  for (int q = 0; q < n; ++q) sum += 0.1f * 5 + 1.7f * q;
  EXPECT_NEAR(got[0][0][5], 3.0f * sum / n, 1e-4);
}

TEST_P(ExecutorTest, LoneAllreduceInPlaceAppliesPrescalePostscaleAndAverage) {
  const int n = size();
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    std::vector<double> buf = {1.0 + rank, -2.0 * rank, 0.5};
    const int64_t h = s.Add(Entry(OpType::kAllreduce, "w", DataType::kFloat64, {3}, buf.data(),
                                  buf.data()));
    Response r = Make(Response::Type::kAllreduce, {"w"}, {3}, DataType::kFloat64, ReduceOp::kAverage);
    r.prescale = 4.0;
    r.postscale = 0.25;
    ASSERT_OK(s.executor.Execute(r, s.entries));
    EXPECT_OK(s.handles.Wait(h));
    double s0 = 0, s1 = 0;
    for (int q = 0; q < n; ++q) {
      s0 += 1.0 + q;
      s1 += -2.0 * q;
    }
    // 4 * x summed, * 0.25, / n: the plain average.
    EXPECT_DOUBLE_EQ(buf[0], s0 / n);
    EXPECT_DOUBLE_EQ(buf[1], s1 / n);
    EXPECT_DOUBLE_EQ(buf[2], 0.5);
  });
}

TEST_P(ExecutorTest, JoinedRankContributesZeros) {
  const int n = size();
  if (n < 2) GTEST_SKIP() << "needs a rank that joined and one that did not";
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    const bool joined = rank == n - 1;
    std::vector<int32_t> in = {rank + 1, 10}, out(2, -1);
    int64_t h = -1;
    if (!joined) {
      h = s.Add(Entry(OpType::kAllreduce, "g", DataType::kInt32, {2}, in.data(), out.data()));
    }
    ASSERT_OK(s.executor.Execute(Make(Response::Type::kAllreduce, {"g"}, {2}, DataType::kInt32),
                                 s.entries));
    if (joined) return;
    EXPECT_OK(s.handles.Wait(h));
    // Ranks 0 .. n-2 contribute; the joined rank adds nothing.
    EXPECT_EQ(out, (std::vector<int32_t>{(n - 1) * n / 2, 10 * (n - 1)}));
  });
}

TEST_P(ExecutorTest, AllgatherConcatenatesEachRanksRowsInRankOrder) {
  const int n = size();
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    // Rank r has r + 1 rows of 2 columns; element (row, col) = 1000 r + 10 row + col.
    std::vector<int32_t> in;
    for (int row = 0; row <= rank; ++row) {
      for (int col = 0; col < 2; ++col) in.push_back(1000 * rank + 10 * row + col);
    }
    const int64_t h =
        s.Add(Entry(OpType::kAllgather, "emb", DataType::kInt32, {rank + 1, 2}, in.data(), nullptr));
    std::vector<int64_t> rows;
    for (int q = 0; q < n; ++q) rows.push_back(q + 1);
    ASSERT_OK(s.executor.Execute(Make(Response::Type::kAllgather, {"emb"}, rows, DataType::kInt32),
                                 s.entries));
    EXPECT_OK(s.handles.Wait(h));
    auto out = s.handles.TakeOutput(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->shape, (Shape{n * (n + 1) / 2, 2}));
    std::vector<int32_t> expected;
    for (int q = 0; q < n; ++q) {
      for (int row = 0; row <= q; ++row) {
        for (int col = 0; col < 2; ++col) expected.push_back(1000 * q + 10 * row + col);
      }
    }
    const int32_t* got = static_cast<const int32_t*>(out->ptr());
    EXPECT_EQ(std::vector<int32_t>(got, got + expected.size()), expected);
    EXPECT_TRUE(s.NameFree("emb"));
  });
}

TEST_P(ExecutorTest, AlltoallDeliversEachRanksRowsAndTheReceivedSplits) {
  const int n = size();
  // Rank r sends (r + j) % 3 rows to rank j; row k of them holds 100 r + 10 j + k.
  std::vector<int64_t> matrix;
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < n; ++j) matrix.push_back((r + j) % 3);
  }
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    std::vector<int64_t> in;
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < (rank + j) % 3; ++k) in.push_back(100 * rank + 10 * j + k);
    }
    const int64_t h = s.Add(Entry(OpType::kAlltoall, "route", DataType::kInt64,
                                  {static_cast<int64_t>(in.size())}, in.data(), nullptr));
    ASSERT_OK(s.executor.Execute(Make(Response::Type::kAlltoall, {"route"}, matrix,
                                      DataType::kInt64),
                                 s.entries));
    EXPECT_OK(s.handles.Wait(h));
    std::vector<int64_t> expected, splits;
    for (int j = 0; j < n; ++j) {
      splits.push_back((j + rank) % 3);
      for (int k = 0; k < (j + rank) % 3; ++k) expected.push_back(100 * j + 10 * rank + k);
    }
    EXPECT_EQ(s.handles.ReceivedSplits(h), splits);
    auto out = s.handles.TakeOutput(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->shape, (Shape{static_cast<int64_t>(expected.size())}));
    const int64_t* got = static_cast<const int64_t*>(out->ptr());
    EXPECT_EQ(std::vector<int64_t>(got, got + expected.size()), expected);
  });
}

TEST_P(ExecutorTest, ReducescatterGivesTheFirstRanksOneMoreRowAndLeavesTheInputAlone) {
  const int n = size();
  const int64_t rows = 2 * n + 1;  // not divisible by n (for n > 1)
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    // Element (row, col) of rank r: row * 2 + col + r.
    std::vector<float> in;
    for (int64_t row = 0; row < rows; ++row) {
      for (int col = 0; col < 2; ++col) in.push_back(static_cast<float>(row * 2 + col + rank));
    }
    const std::vector<float> original = in;
    const int64_t h = s.Add(Entry(OpType::kReducescatter, "rs", DataType::kFloat32, {rows, 2},
                                  in.data(), nullptr));
    Response r = Make(Response::Type::kReducescatter, {"rs"}, {}, DataType::kFloat32,
                      ReduceOp::kAverage);
    r.prescale = 2.0;
    ASSERT_OK(s.executor.Execute(r, s.entries));
    EXPECT_OK(s.handles.Wait(h));
    EXPECT_EQ(in, original) << "prescale must not write into the caller's input";
    const int64_t mine = rows / n + (rank < rows % n ? 1 : 0);
    int64_t first = 0;
    for (int q = 0; q < rank; ++q) first += rows / n + (q < rows % n ? 1 : 0);
    auto out = s.handles.TakeOutput(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->shape, (Shape{mine, 2}));
    const float* got = static_cast<const float*>(out->ptr());
    for (int64_t row = 0; row < mine; ++row) {
      for (int col = 0; col < 2; ++col) {
        // Average of 2 * (x + q) over q = 0 .. n-1: 2 x + (n - 1).
        const float x = static_cast<float>((first + row) * 2 + col);
        EXPECT_FLOAT_EQ(got[row * 2 + col], 2 * x + (n - 1)) << "row " << first + row;
      }
    }
  });
}

TEST_P(ExecutorTest, BroadcastCopiesTheRootsTensorToEveryRank) {
  const int n = size();
  const int root = n - 1;
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    std::vector<int32_t> in = {rank, rank * 7, 42}, out(3, -1);
    const int64_t h =
        s.Add(Entry(OpType::kBroadcast, "params", DataType::kInt32, {3}, in.data(), out.data()));
    Response r = Make(Response::Type::kBroadcast, {"params"}, {}, DataType::kInt32);
    r.root = root;
    ASSERT_OK(s.executor.Execute(r, s.entries));
    EXPECT_OK(s.handles.Wait(h));
    EXPECT_EQ(out, (std::vector<int32_t>{root, root * 7, 42}));
    EXPECT_TRUE(s.NameFree("params"));
  });
}

// A caller-supplied output of the wrong size on one rank is that rank's error on that tensor:
// its handle fails naming the tensor, the other ranks' collective still completes (they are in it
// already and must not wait for a rank that skipped it), and the job goes on.
TEST_P(ExecutorTest, WrongSizedOutputOnOneRankFailsOnlyThatRanksTensor) {
  const int n = size();
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    const bool wrong = rank == 0;
    // Allgather of one row of 2 floats per rank into a caller output.
    std::vector<float> in = {float(rank), float(rank) + 0.5f};
    std::vector<float> out(2 * n + (wrong ? 1 : 0), -1.0f);
    TensorEntry e = Entry(OpType::kAllgather, "ag", DataType::kFloat32, {1, 2}, in.data(), out.data());
    e.output_bytes = static_cast<int64_t>(out.size() * sizeof(float));
    const int64_t h = s.Add(e);
    EXPECT_OK(s.executor.Execute(Make(Response::Type::kAllgather, {"ag"}, std::vector<int64_t>(n, 1)),
                                 s.entries));
    // Reducescatter of n rows into a caller output of one row.
    std::vector<float> rin(n, 1.0f), rout(wrong ? 2 : 1, -1.0f);
    TensorEntry re = Entry(OpType::kReducescatter, "rs", DataType::kFloat32, {n}, rin.data(), rout.data());
    re.output_bytes = static_cast<int64_t>(rout.size() * sizeof(float));
    const int64_t hr = s.Add(re);
    EXPECT_OK(s.executor.Execute(Make(Response::Type::kReducescatter, {"rs"}, {}), s.entries));
    Status st = s.handles.Wait(h), rst = s.handles.Wait(hr);
    if (wrong) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("'ag'"), std::string::npos) << st.message();
      EXPECT_EQ(rst.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(rst.message().find("'rs'"), std::string::npos) << rst.message();
    } else {
      EXPECT_OK(st);
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(out[2 * q], float(q));
        EXPECT_EQ(out[2 * q + 1], float(q) + 0.5f);
      }
      EXPECT_OK(rst);
      EXPECT_EQ(rout[0], float(n));
    }
    EXPECT_TRUE(s.NameFree("ag"));
    EXPECT_TRUE(s.NameFree("rs"));
  }, /*timeout=*/std::chrono::seconds(20));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExecutorTest, ::testing::Values(1, 2, 3, 4));

TEST(Executor, MismatchErrorReachesEveryNamedTensorAndDoesNotBreakTheJob) {
  FakeBackend backend;
  RankState s(&backend, 0, 1);
  float a = 1, b = 2;
  const int64_t ha = s.Add(Entry(OpType::kAllreduce, "a", DataType::kFloat32, {1}, &a, &a));
  const int64_t hb = s.Add(Entry(OpType::kAllreduce, "b", DataType::kFloat32, {1}, &b, &b));
  Response r = Make(Response::Type::kError, {"a", "b"}, {});
  r.error = "tensor 'a': rank 1 sent shape [2], rank 0 sent [1]";
  EXPECT_OK(s.executor.Execute(r, s.entries));
  for (int64_t h : {ha, hb}) {
    Status st = s.handles.Wait(h);
    EXPECT_EQ(st.code(), StatusCode::kMismatch);
    EXPECT_EQ(st.message(), r.error);
  }
  EXPECT_TRUE(s.entries.empty());
  EXPECT_TRUE(s.NameFree("a"));
  EXPECT_TRUE(s.NameFree("b"));
}

TEST(Executor, BarrierCompletesAndJoinGivesTheLastRankToJoin) {
  FakeBackend backend;
  RankState s(&backend, 0, 1);
  const int64_t hb = s.Add(Entry(OpType::kBarrier, "barrier.0", DataType::kUint8, {0}, nullptr, nullptr));
  const int64_t hj = s.Add(Entry(OpType::kJoin, kJoinName, DataType::kUint8, {0}, nullptr, nullptr));
  EXPECT_OK(s.executor.Execute(Make(Response::Type::kBarrier, {"barrier.0"}, {}), s.entries));
  EXPECT_OK(s.handles.Wait(hb));
  Response join = Make(Response::Type::kJoin, {}, {});
  join.last_joined_rank = 3;
  EXPECT_OK(s.executor.Execute(join, s.entries));
  EXPECT_OK(s.handles.Wait(hj));
  EXPECT_EQ(s.handles.IntResult(hj), 3);
  EXPECT_TRUE(s.entries.empty());
}

TEST(Executor, OutputOfTheWrongSizeFailsNamingTheTensor) {
  FakeBackend backend;
  RankState s(&backend, 0, 1);
  std::vector<float> in(6), out(5);  // the gathered result is 6 floats
  TensorEntry e = Entry(OpType::kAllgather, "feat", DataType::kFloat32, {3, 2}, in.data(), out.data());
  e.output_bytes = static_cast<int64_t>(out.size() * sizeof(float));
  const int64_t h = s.Add(e);
  Status ret = s.executor.Execute(Make(Response::Type::kAllgather, {"feat"}, {3}), s.entries);
  Status st = s.handles.Wait(h);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'feat'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("24"), std::string::npos) << st.message();  // the bytes it needs
  EXPECT_OK(ret);  // the caller's mistake, not a broken job
  EXPECT_TRUE(s.NameFree("feat"));
}

TEST(Executor, BackendFailureCompletesEveryFusedTensorAndBreaksTheJob) {
  FakeBackend backend(Aborted("rank 2 disconnected: it exited or crashed"));
  RankState s(&backend, 0, 1);
  std::vector<float> a(3), b(4);
  const int64_t ha = s.Add(Entry(OpType::kAllreduce, "a", DataType::kFloat32, {3}, a.data(), a.data()));
  const int64_t hb = s.Add(Entry(OpType::kAllreduce, "b", DataType::kFloat32, {4}, b.data(), b.data()));
  Status ret = s.executor.Execute(Make(Response::Type::kAllreduce, {"a", "b"}, {3, 4}), s.entries);
  EXPECT_EQ(ret.code(), StatusCode::kAborted);
  for (int64_t h : {ha, hb}) {
    Status st = s.handles.Wait(h);
    EXPECT_EQ(st.code(), StatusCode::kAborted);
    EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(s.entries.empty());
  EXPECT_TRUE(s.NameFree("a"));
}

TEST(Executor, FailedAllocatingCollectiveCompletesItsHandleWithTheFailure) {
  FakeBackend backend(Aborted("connection reset"));
  RankState s(&backend, 0, 1);
  std::vector<float> in(4);
  const int64_t h =
      s.Add(Entry(OpType::kAlltoall, "a2a", DataType::kFloat32, {4}, in.data(), nullptr));
  Status ret = s.executor.Execute(Make(Response::Type::kAlltoall, {"a2a"}, {4}), s.entries);
  EXPECT_EQ(ret.code(), StatusCode::kAborted);
  EXPECT_EQ(s.handles.Wait(h).code(), StatusCode::kAborted);
  EXPECT_EQ(s.handles.TakeOutput(h), nullptr);
}

// Every per-tensor op is completed by the one path in ExecuteOne: with a failing backend each
// handle gets the failure, its name leaves the in-flight set, and the job breaks.
TEST(Executor, EveryPerTensorOpIsCompletedOnceWhenTheBackendFails) {
  FakeBackend backend(Aborted("peer lost"));
  const std::pair<OpType, Response::Type> ops[] = {
      {OpType::kAllgather, Response::Type::kAllgather},
      {OpType::kBroadcast, Response::Type::kBroadcast},
      {OpType::kAlltoall, Response::Type::kAlltoall},
      {OpType::kReducescatter, Response::Type::kReducescatter}};
  for (const auto& [op, type] : ops) {
    RankState s(&backend, 0, 1);
    std::vector<float> in(4), out(4);
    void* output = op == OpType::kBroadcast ? out.data() : nullptr;
    const int64_t h = s.Add(Entry(op, "t", DataType::kFloat32, {4}, in.data(), output));
    Status ret = s.executor.Execute(Make(type, {"t"}, {4}), s.entries);
    EXPECT_EQ(ret.code(), StatusCode::kAborted) << OpTypeName(op);
    EXPECT_EQ(s.handles.Wait(h).code(), StatusCode::kAborted) << OpTypeName(op);
    EXPECT_TRUE(s.entries.empty()) << OpTypeName(op);
    EXPECT_TRUE(s.NameFree("t")) << OpTypeName(op);
  }
}

TEST(Executor, GpuTensorWithoutAGpuDataPlaneFailsOnlyItsHandle) {
  FakeBackend backend;
  RankState s(&backend, 0, 1);
  float x = 1;
  TensorEntry e = Entry(OpType::kAllreduce, "cuda.grad", DataType::kFloat32, {1}, &x, &x);
  e.request.device = 0;
  const int64_t h = s.Add(e);
  Response r = Make(Response::Type::kAllreduce, {"cuda.grad"}, {1});
  r.device = 0;
  EXPECT_OK(s.executor.Execute(r, s.entries));  // the job goes on
  Status st = s.handles.Wait(h);
  EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(st.message().find("'cuda.grad'"), std::string::npos) << st.message();
  EXPECT_TRUE(s.NameFree("cuda.grad"));
}

TEST(Executor, EagerAllreduceCopiesTheCoordinatorsResultOut) {
  FakeBackend backend(Aborted("the data plane must not be used"));
  RankState s(&backend, 0, 1);
  std::vector<float> in = {1, 2}, out(2);
  const int64_t h = s.Add(Entry(OpType::kAllreduce, "b", DataType::kFloat32, {2}, in.data(), out.data()));
  Response r = Make(Response::Type::kAllreduce, {"b"}, {2});
  r.eager = true;
  const std::vector<float> result = {5, 7};
  r.data.assign(reinterpret_cast<const char*>(result.data()), 8);
  EXPECT_OK(s.executor.Execute(r, s.entries));
  EXPECT_OK(s.handles.Wait(h));
  EXPECT_EQ(out, result);
}

// Records the timeline events of one tensor as "B:ACTIVITY" / "E:ACTIVITY".

}  // namespace
}  // namespace core
}  // namespace dadt
