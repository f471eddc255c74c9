// What Enqueue fills in and refuses, before anything is queued (no runtime needed).
#include "runtime/core/entry_checks.h"

#include <gtest/gtest.h>

#include "runtime/core/executor.h"

namespace dadt {
namespace core {
namespace {

TensorEntry Entry(OpType op, Shape shape = {4}) {
  static float buf[64];
  TensorEntry e;
  e.request.op = op;
  e.request.name = "t";
  e.request.shape = shape;
  e.input = buf;
  e.output = buf;
  return e;
}

bool Mentions(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

TEST(EntryChecksTest, FillsRankJoinNameAndEvenSplits) {
  TensorEntry join = Entry(OpType::kJoin);
  ASSERT_TRUE(PrepareEntry(&join, 2, 4).ok());
  EXPECT_EQ(join.request.rank, 2);
  EXPECT_EQ(join.request.name, kJoinName);

  TensorEntry a2a = Entry(OpType::kAlltoall, {8, 2});
  ASSERT_TRUE(PrepareEntry(&a2a, 0, 4).ok());
  EXPECT_EQ(a2a.request.splits, (std::vector<int64_t>{2, 2, 2, 2}));
}

TEST(EntryChecksTest, UnevenAlltoallWithoutSplitsIsRefused) {
  TensorEntry a2a = Entry(OpType::kAlltoall, {7});
  Status s = PrepareEntry(&a2a, 0, 4);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s, "not divisible by 4")) << s.message();
}

TEST(EntryChecksTest, RefusalsNameTheTensor) {
  TensorEntry unnamed = Entry(OpType::kAllreduce);
  unnamed.request.name.clear();
  EXPECT_FALSE(ValidateEntry(unnamed, 0, 2).ok());

  TensorEntry root = Entry(OpType::kBroadcast);
  root.request.root = 2;
  Status s = ValidateEntry(root, 0, 2);
  EXPECT_TRUE(Mentions(s, "'t'") && Mentions(s, "root rank 2")) << s.message();

  TensorEntry no_output = Entry(OpType::kAllreduce);
  no_output.output = nullptr;
  EXPECT_TRUE(Mentions(ValidateEntry(no_output, 0, 2), "output buffer"));

  TensorEntry adasum = Entry(OpType::kAllreduce);
  adasum.request.reduce_op = ReduceOp::kAdasum;
  EXPECT_EQ(ValidateEntry(adasum, 0, 2).code(), StatusCode::kUnimplemented);

  TensorEntry bool_avg = Entry(OpType::kAllreduce);
  bool_avg.request.dtype = DataType::kBool;
  bool_avg.request.reduce_op = ReduceOp::kAverage;
  EXPECT_TRUE(Mentions(ValidateEntry(bool_avg, 0, 2), "bool"));

  TensorEntry group = Entry(OpType::kAllreduce);
  group.request.group_id = 3;
  group.request.group_size = 0;
  EXPECT_FALSE(ValidateEntry(group, 0, 2).ok());
}

TEST(EntryChecksTest, ReducescatterOutputMustHoldThisRanksShare) {
  TensorEntry rs = Entry(OpType::kReducescatter, {5, 2});  // 5 rows over 2 ranks: 3 and 2
  rs.output_bytes = 3 * 2 * 4;
  EXPECT_TRUE(ValidateEntry(rs, 0, 2).ok());
  EXPECT_FALSE(ValidateEntry(rs, 1, 2).ok());
  rs.output_bytes = 2 * 2 * 4;
  EXPECT_TRUE(ValidateEntry(rs, 1, 2).ok());
}

}  // namespace
}  // namespace core
}  // namespace dadt
