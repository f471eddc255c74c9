// prescale_factor multiplies each rank's input before the reduction, postscale_factor the result
// after it (Horovod's definition), on every host data plane: the Executor's lone and fused
// allreduce and its reducescatter (ranks as threads over real Gloo), and the coordinator's eager
// reduction of small tensors (runtime/core/eager_reduce.h). Sums cannot tell the two orders apart
// (scaling commutes with addition), so these use Max and Product, where they differ from 2 ranks
// on: Max of (-1 * x_r) is -min(x_r), while -1 * Max(x_r) is -max(x_r); Product of (2 * x_r) is
// 2^n * prod(x_r), while 2 * Product(x_r) is 2 * prod(x_r).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/eager_reduce.h"
#include "runtime/core/executor.h"
#include "test/runtime/backends/rank_threads.h"
#include "test/runtime/core/executor_test_util.h"

namespace dadt {
namespace core {
namespace {

using testutil::RunRanks;

using namespace testing_executor;  // NOLINT: test helpers

class PrescaleOrderTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
};

double Factorial(int n) {
  double f = 1;
  for (int i = 2; i <= n; ++i) f *= i;
  return f;
}

TEST_P(PrescaleOrderTest, LoneAllreduceScalesEachInputBeforeMaxAndTheResultAfter) {
  const int n = size();
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    std::vector<float> in = {float(rank + 1), -float(rank + 1)}, out(2, 0.0f);
    const int64_t h = s.Add(Entry(OpType::kAllreduce, "w", DataType::kFloat32, {2}, in.data(),
                                  out.data()));
    Response r = Make(Response::Type::kAllreduce, {"w"}, {2}, DataType::kFloat32, ReduceOp::kMax);
    r.prescale = -1.0;
    r.postscale = 2.0;
    ASSERT_OK(s.executor.Execute(r, s.entries));
    EXPECT_OK(s.handles.Wait(h));
    // 2 * max_r(-(r + 1)) = -2 and 2 * max_r(r + 1) = 2n; scaling after the Max would give
    // -2n and -2.
    EXPECT_EQ(out, (std::vector<float>{-2.0f, 2.0f * n}));
  });
}

TEST_P(PrescaleOrderTest, FusedAllreduceScalesEachInputBeforeTheReduction) {
  const int n = size();
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    std::vector<double> a = {double(rank + 1), 3.0}, b = {double(rank + 2)};
    std::vector<double> a_out(2, 0.0), b_out(1, 0.0);
    const int64_t ha = s.Add(Entry(OpType::kAllreduce, "a", DataType::kFloat64, {2}, a.data(),
                                   a_out.data()));
    const int64_t hb = s.Add(Entry(OpType::kAllreduce, "b", DataType::kFloat64, {1}, b.data(),
                                   b_out.data()));
    Response r = Make(Response::Type::kAllreduce, {"a", "b"}, {2, 1}, DataType::kFloat64,
                      ReduceOp::kProduct);
    r.prescale = 2.0;
    ASSERT_OK(s.executor.Execute(r, s.entries));
    EXPECT_OK(s.handles.Wait(ha));
    EXPECT_OK(s.handles.Wait(hb));
    const double pow2 = static_cast<double>(1 << n);
    // prod_r 2 (r + 1) = 2^n n!, prod_r 2 * 3 = 6^n, prod_r 2 (r + 2) = 2^n (n + 1)!.
    EXPECT_DOUBLE_EQ(a_out[0], pow2 * Factorial(n));
    double six_n = 1;
    for (int i = 0; i < n; ++i) six_n *= 6.0;
    EXPECT_DOUBLE_EQ(a_out[1], six_n);
    EXPECT_DOUBLE_EQ(b_out[0], pow2 * Factorial(n + 1));
  });
}

TEST_P(PrescaleOrderTest, ReducescatterScalesEachInputBeforeTheReduction) {
  const int n = size();
  RunRanks("gloo", n, [&](int rank, backends::Backend& backend) {
    RankState s(&backend, rank, n);
    // Row q of rank r holds (q + 1) * (r + 1); each rank receives its own row.
    std::vector<float> in;
    for (int q = 0; q < n; ++q) in.push_back(float((q + 1) * (rank + 1)));
    const int64_t h = s.Add(Entry(OpType::kReducescatter, "rs", DataType::kFloat32, {n},
                                  in.data(), nullptr));
    Response r = Make(Response::Type::kReducescatter, {"rs"}, {}, DataType::kFloat32,
                      ReduceOp::kMax);
    r.prescale = -1.0;
    r.postscale = 3.0;
    ASSERT_OK(s.executor.Execute(r, s.entries));
    EXPECT_OK(s.handles.Wait(h));
    auto out = s.handles.TakeOutput(h);
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(out->shape, (Shape{1}));
    // 3 * max_r(-(rank + 1)(r + 1)) = -3 (rank + 1); after the Max it would be -3 (rank + 1) n.
    EXPECT_EQ(static_cast<const float*>(out->ptr())[0], -3.0f * (rank + 1));
  });
}

Request EagerRequest(int rank, const std::vector<float>& v, ReduceOp op, double pre) {
  Request r;
  r.rank = rank;
  r.name = "bias";
  r.dtype = DataType::kFloat32;
  r.shape = {static_cast<int64_t>(v.size())};
  r.reduce_op = op;
  r.prescale = pre;
  r.eager = true;
  r.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return r;
}

TEST_P(PrescaleOrderTest, EagerReductionScalesEachContributionBeforeCombining) {
  const int n = size();
  std::vector<Request> max_by_rank, prod_by_rank;
  for (int r = 0; r < n; ++r) {
    max_by_rank.push_back(EagerRequest(r, {float(r + 1), -float(r + 1)}, ReduceOp::kMax, -1.0));
    prod_by_rank.push_back(EagerRequest(r, {float(r + 1)}, ReduceOp::kProduct, 2.0));
  }
  Response mx, pr;
  ASSERT_TRUE(TryEagerReduce(max_by_rank, n, &mx));
  ASSERT_TRUE(TryEagerReduce(prod_by_rank, n, &pr));
  std::vector<float> got_max(2), got_prod(1);
  ASSERT_EQ(mx.data.size(), 2 * sizeof(float));
  ASSERT_EQ(pr.data.size(), sizeof(float));
  std::memcpy(got_max.data(), mx.data.data(), mx.data.size());
  std::memcpy(got_prod.data(), pr.data.data(), pr.data.size());
  EXPECT_EQ(got_max, (std::vector<float>{-1.0f, float(n)}));
  EXPECT_EQ(got_prod[0], static_cast<float>((1 << n) * Factorial(n)));
}

INSTANTIATE_TEST_SUITE_P(Ranks, PrescaleOrderTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace core
}  // namespace dadt
