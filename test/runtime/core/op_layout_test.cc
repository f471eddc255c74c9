// Layout arithmetic shared by the host and GPU executors (runtime/core/op_layout.h).
#include "runtime/core/op_layout.h"

#include <gtest/gtest.h>

namespace dadt {
namespace core {
namespace {

TEST(OpLayout, ScatterGivesTheFirstRanksOneMoreRow) {
  EXPECT_EQ(ScatterCounts({7, 3}, 3), (std::vector<int64_t>{9, 6, 6}));
  EXPECT_EQ(ScatterCounts({2}, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(ScatterCounts({0, 5}, 2), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(ScatterCounts({}, 1), (std::vector<int64_t>{1}));  // a scalar is one row
}

TEST(OpLayout, ScatterFirstRowIsTheRowsOfTheRanksBefore) {
  // 7 rows over 3 ranks: 3, 2, 2 rows starting at 0, 3, 5.
  EXPECT_EQ(ScatterFirstRow(7, 3, 0), 0);
  EXPECT_EQ(ScatterFirstRow(7, 3, 1), 3);
  EXPECT_EQ(ScatterFirstRow(7, 3, 2), 5);
  EXPECT_EQ(ScatterFirstRow(2, 4, 3), 2);  // ranks 2 and 3 get no row, after the last one
  EXPECT_EQ(ScatterFirstRow(0, 2, 1), 0);
}

TEST(OpLayout, AllgatherBytesAndShapeFollowEachRanksRows) {
  GatherLayout l = AllgatherLayout({2, 3}, DataType::kFloat16, {2, 0, 5}, 3);
  EXPECT_EQ(l.bytes, (std::vector<int64_t>{12, 0, 30}));
  EXPECT_EQ(l.out_shape, (Shape{7, 3}));
  EXPECT_EQ(AllgatherLayout({}, DataType::kInt64, {1, 1}, 2).out_shape, (Shape{2}));
}

TEST(OpLayout, AlltoallReadsItsRowAndColumnOfTheMatrix) {
  // 3 ranks; row r: rows rank r sends to ranks 0, 1, 2.
  const std::vector<int64_t> m = {1, 2, 3,
                                  4, 5, 6,
                                  7, 8, 9};
  AlltoallLayout l = MakeAlltoallLayout({6, 2}, DataType::kInt32, m, 3, 1);
  EXPECT_EQ(l.send, (std::vector<int64_t>{32, 40, 48}));  // 4, 5, 6 rows of 8 bytes
  EXPECT_EQ(l.splits, (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(l.recv, (std::vector<int64_t>{16, 40, 64}));
  EXPECT_EQ(l.out_shape, (Shape{15, 2}));
}

TEST(OpLayout, AverageRunsAsSumOnTheEngines) {
  EXPECT_EQ(BackendOp(ReduceOp::kAverage), ReduceOp::kSum);
  EXPECT_EQ(BackendOp(ReduceOp::kMax), ReduceOp::kMax);
}

}  // namespace
}  // namespace core
}  // namespace dadt
