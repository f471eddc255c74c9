// Eager allreduce (runtime/core/eager_reduce.h): the coordinator reduces small tensors itself.
// The result must be what the data plane gives (prescale each contribution, combine, postscale,
// then Average's division by the rank count), in fixed rank order, and the function must decline
// (leaving the response alone) whenever a rank joined, did not send its bytes, or sent the
// wrong number of them.
#include "runtime/core/eager_reduce.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/common/reduce.h"

namespace dadt {
namespace core {
namespace {

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> Values(const std::string& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

Request Eager(int rank, DataType dtype, Shape shape, std::string data,
              ReduceOp op = ReduceOp::kSum) {
  Request r;
  r.rank = rank;
  r.name = "bias";
  r.dtype = dtype;
  r.shape = std::move(shape);
  r.reduce_op = op;
  r.data = std::move(data);
  r.eager = true;
  return r;
}

// Rank r contributes {r + 1, 10 * (r + 1), -r} as float32.
std::vector<Request> ThreeFloatsPerRank(int size, ReduceOp op, double pre = 1, double post = 1) {
  std::vector<Request> by_rank;
  for (int r = 0; r < size; ++r) {
    std::vector<float> v = {float(r + 1), float(10 * (r + 1)), float(-r)};
    by_rank.push_back(Eager(r, DataType::kFloat32, {3}, Bytes(v), op));
    by_rank.back().prescale = pre;
    by_rank.back().postscale = post;
  }
  return by_rank;
}

class EagerReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(EagerReduceTest, SumMinMaxProductMatchTheElementWiseReduction) {
  const int n = GetParam();
  float sum0 = 0, sum1 = 0, sum2 = 0, prod0 = 1;
  for (int r = 0; r < n; ++r) {
    sum0 += r + 1;
    sum1 += 10 * (r + 1);
    sum2 += -r;
    prod0 *= r + 1;
  }
  Response resp;
  ASSERT_TRUE(TryEagerReduce(ThreeFloatsPerRank(n, ReduceOp::kSum), n, &resp));
  EXPECT_TRUE(resp.eager);
  EXPECT_EQ(Values<float>(resp.data), (std::vector<float>{sum0, sum1, sum2}));

  Response mn, mx, pr;
  ASSERT_TRUE(TryEagerReduce(ThreeFloatsPerRank(n, ReduceOp::kMin), n, &mn));
  ASSERT_TRUE(TryEagerReduce(ThreeFloatsPerRank(n, ReduceOp::kMax), n, &mx));
  ASSERT_TRUE(TryEagerReduce(ThreeFloatsPerRank(n, ReduceOp::kProduct), n, &pr));
  EXPECT_EQ(Values<float>(mn.data), (std::vector<float>{1, 10, float(-(n - 1))}));
  EXPECT_EQ(Values<float>(mx.data), (std::vector<float>{float(n), float(10 * n), 0}));
  EXPECT_EQ(Values<float>(pr.data)[0], prod0);
}

TEST_P(EagerReduceTest, AverageIsPrescaledSumPostscaledThenDividedByTheRankCount) {
  const int n = GetParam();
  Response resp;
  ASSERT_TRUE(TryEagerReduce(ThreeFloatsPerRank(n, ReduceOp::kAverage, 4.0, 0.5), n, &resp));
  float sum0 = 0;
  for (int r = 0; r < n; ++r) sum0 += 4.0f * (r + 1);
  const std::vector<float> got = Values<float>(resp.data);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_FLOAT_EQ(got[0], sum0 * 0.5f / n);
}

TEST_P(EagerReduceTest, IntegerAverageDividesLikeTheDataPlane) {
  const int n = GetParam();
  std::vector<Request> by_rank;
  int32_t sum = 0;
  for (int r = 0; r < n; ++r) {
    by_rank.push_back(Eager(r, DataType::kInt32, {1}, Bytes(std::vector<int32_t>{7 * r + 3}),
                            ReduceOp::kAverage));
    sum += 7 * r + 3;
  }
  Response resp;
  ASSERT_TRUE(TryEagerReduce(by_rank, n, &resp));
  // The data plane's rule for integers (runtime/common/reduce.h DivideBuffer), applied to the sum.
  int32_t expected = sum;
  ASSERT_TRUE(DivideBuffer(&expected, 1, DataType::kInt32, n).ok());
  EXPECT_EQ(Values<int32_t>(resp.data), (std::vector<int32_t>{expected}));
}

INSTANTIATE_TEST_SUITE_P(Ranks, EagerReduceTest, ::testing::Values(1, 2, 3, 4, 7));

// Every rank must get bit-identical results, so the order of the reduction is fixed: rank 0, 1, 2.
// In float32, (1 + 1e8) - 1e8 is 0 while (-1e8 + 1e8) + 1, the reverse order, is 1.
TEST(EagerReduce, ReducesInRankOrder) {
  std::vector<Request> by_rank = {
      Eager(0, DataType::kFloat32, {1}, Bytes(std::vector<float>{1.0f})),
      Eager(1, DataType::kFloat32, {1}, Bytes(std::vector<float>{1e8f})),
      Eager(2, DataType::kFloat32, {1}, Bytes(std::vector<float>{-1e8f})),
  };
  Response resp;
  ASSERT_TRUE(TryEagerReduce(by_rank, 3, &resp));
  EXPECT_EQ(Values<float>(resp.data), (std::vector<float>{0.0f}));
}

TEST(EagerReduce, EmptyTensorGivesAnEmptyResult) {
  std::vector<Request> by_rank = {Eager(0, DataType::kFloat32, {0}, ""),
                                  Eager(1, DataType::kFloat32, {0}, "")};
  Response resp;
  ASSERT_TRUE(TryEagerReduce(by_rank, 2, &resp));
  EXPECT_TRUE(resp.eager);
  EXPECT_TRUE(resp.data.empty());
}

// Declining leaves the response as it was, so that the data plane runs it.
void ExpectDeclined(const std::vector<Request>& by_rank, int size) {
  Response resp;
  EXPECT_FALSE(TryEagerReduce(by_rank, size, &resp));
  EXPECT_FALSE(resp.eager);
  EXPECT_TRUE(resp.data.empty());
}

TEST(EagerReduce, DeclinesWhenARankJoined) {
  std::vector<Request> by_rank = ThreeFloatsPerRank(3, ReduceOp::kSum);
  by_rank[1].rank = -1;  // joined: contributes zeros through the data plane
  ExpectDeclined(by_rank, 3);
}

TEST(EagerReduce, DeclinesWhenSomeRankDidNotSendItsBytes) {
  std::vector<Request> by_rank = ThreeFloatsPerRank(3, ReduceOp::kSum);
  by_rank[2].eager = false;
  by_rank[2].data.clear();
  ExpectDeclined(by_rank, 3);
}

TEST(EagerReduce, DeclinesAPayloadOfTheWrongSize) {
  std::vector<Request> by_rank = ThreeFloatsPerRank(3, ReduceOp::kSum);
  by_rank[1].data.pop_back();
  ExpectDeclined(by_rank, 3);
  by_rank = ThreeFloatsPerRank(3, ReduceOp::kSum);
  by_rank[0].data += "xxxx";
  ExpectDeclined(by_rank, 3);
}

TEST(EagerReduce, DeclinesWithNoRequests) { ExpectDeclined({}, 1); }

}  // namespace
}  // namespace core
}  // namespace dadt
