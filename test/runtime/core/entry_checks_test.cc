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
  adasum.request.dtype = DataType::kFloat32;
  EXPECT_TRUE(ValidateEntry(adasum, 0, 2).ok());
  adasum.request.dtype = DataType::kInt32;
  EXPECT_TRUE(Mentions(ValidateEntry(adasum, 0, 2), "Adasum needs float16")) << "an int32 Adasum";
  TensorEntry adasum_rs = Entry(OpType::kReducescatter);
  adasum_rs.request.reduce_op = ReduceOp::kAdasum;
  adasum_rs.request.dtype = DataType::kFloat32;
  EXPECT_TRUE(Mentions(ValidateEntry(adasum_rs, 0, 2), "Adasum is an allreduce"));

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

// The caller's output tensor (as the C API describes it) is checked against the input here.
TensorEntry WithOutput(OpType op, Shape in, Shape out, DataType out_dtype = DataType::kFloat32,
                       int32_t out_device = kCpuDevice) {
  TensorEntry e = Entry(op, in);
  e.output_view.given = true;
  e.output_view.against_input = true;
  e.output_view.dtype = out_dtype;
  e.output_view.shape = out;
  e.output_view.device = out_device;
  return e;
}

TEST(EntryChecksTest, OutputMustMatchTheInput) {
  TensorEntry same = WithOutput(OpType::kAllreduce, {4}, {4});
  EXPECT_TRUE(PrepareEntry(&same, 0, 2).ok());
  TensorEntry shape = WithOutput(OpType::kAllreduce, {4}, {2, 2});
  EXPECT_TRUE(Mentions(PrepareEntry(&shape, 0, 2), "output of 't' must match the input's dtype"));
  TensorEntry dtype = WithOutput(OpType::kBroadcast, {4}, {4}, DataType::kFloat64);
  EXPECT_EQ(PrepareEntry(&dtype, 0, 2).code(), StatusCode::kInvalidArgument);
  TensorEntry device = WithOutput(OpType::kAllreduce, {4}, {4}, DataType::kFloat32, 0);
  EXPECT_TRUE(Mentions(PrepareEntry(&device, 0, 2), "must be on the input's device"));
}

TEST(EntryChecksTest, GatherOutputsAreHostMemorySizedFromTheirShape) {
  TensorEntry gather = WithOutput(OpType::kAllgather, {3, 2}, {7, 2});
  ASSERT_TRUE(PrepareEntry(&gather, 0, 2).ok());
  EXPECT_EQ(gather.output_bytes, 7 * 2 * 4);  // the first dimension is checked after negotiation
  TensorEntry rows = WithOutput(OpType::kAllgather, {3, 2}, {7, 3});
  EXPECT_TRUE(Mentions(PrepareEntry(&rows, 0, 2), "all dimensions but the first"));
  TensorEntry gpu = WithOutput(OpType::kAllgather, {3, 2}, {6, 2}, DataType::kFloat32, 0);
  gpu.request.device = 0;
  EXPECT_TRUE(Mentions(PrepareEntry(&gpu, 0, 2), "must be in host memory"));
  // A reducescatter output is sized here, then checked against this rank's share.
  TensorEntry share = WithOutput(OpType::kReducescatter, {5}, {3});
  EXPECT_TRUE(PrepareEntry(&share, 0, 2).ok());
  TensorEntry wrong_share = WithOutput(OpType::kReducescatter, {5}, {3});
  EXPECT_TRUE(Mentions(PrepareEntry(&wrong_share, 1, 2), "share needs 2 rows"));
}

// Only GPU reductions on the NCCL device data plane are asked; this test links no NCCL, so the
// answer is a refusal naming the tensor, which shows the question was asked.
TEST(EntryChecksTest, GpuReductionsAreCheckedAgainstTheDeviceDataPlane) {
  TensorEntry gpu = Entry(OpType::kAllreduce);
  gpu.request.device = 0;
  Status on_nccl = PrepareEntry(&gpu, 0, 2, "nccl");
  EXPECT_EQ(on_nccl.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(on_nccl, "tensor 't'")) << on_nccl.ToString();
  EXPECT_TRUE(PrepareEntry(&gpu, 0, 2, "").ok());  // staged through host memory: no NCCL
  TensorEntry host = Entry(OpType::kAllreduce);
  EXPECT_TRUE(PrepareEntry(&host, 0, 2, "nccl").ok());
  TensorEntry gather = Entry(OpType::kAllgather);
  gather.request.device = 0;
  EXPECT_TRUE(PrepareEntry(&gather, 0, 2, "nccl").ok());  // no reduction
}

TEST(EntryChecksTest, ProcessSetEntriesAreCheckedWithTheSetsRankAndSize) {
  ProcessSetTable table(4, /*my_rank=*/3);
  const ProcessSet& set = *table.Find(*table.Add({1, 3}));

  TensorEntry a2a = Entry(OpType::kAlltoall, {8, 2});
  ASSERT_TRUE(PrepareEntryInSet(&a2a, 3, set).ok());
  EXPECT_EQ(a2a.request.splits, (std::vector<int64_t>{4, 4})) << "one split per member";
  EXPECT_EQ(a2a.request.rank, 3) << "the request keeps the global rank";

  TensorEntry bc = Entry(OpType::kBroadcast);
  bc.request.root = 1;
  ASSERT_TRUE(PrepareEntryInSet(&bc, 3, set).ok());
  EXPECT_EQ(bc.request.root, 1) << "the root stays global";
  bc.request.root = 2;
  EXPECT_EQ(PrepareEntryInSet(&bc, 3, set).message(),
            "broadcast of tensor 't': root rank 2 is not a member of process set 1 (ranks [1, 3])");

  TensorEntry join = Entry(OpType::kJoin);
  EXPECT_TRUE(Mentions(PrepareEntryInSet(&join, 3, set), "global process set only"));
  TensorEntry gpu = Entry(OpType::kAllreduce);
  gpu.request.device = 0;
  EXPECT_EQ(PrepareEntryInSet(&gpu, 3, set).code(), StatusCode::kUnimplemented);

  ProcessSetTable other(4, /*my_rank=*/0);
  const ProcessSet& outside = *other.Find(*other.Add({1, 3}));
  TensorEntry ar = Entry(OpType::kAllreduce);
  EXPECT_EQ(PrepareEntryInSet(&ar, 0, outside).message(),
            "allreduce of tensor 't': rank 0 is not a member of process set 1 (ranks [1, 3])");

  TensorEntry add = Entry(OpType::kProcessSetAdd);
  add.request.process_set_id = 1;
  EXPECT_TRUE(Mentions(PrepareEntry(&add, 0, 4), "runs on the global process set (id 0)"));
  add.request.process_set_id = 0;
  add.input = nullptr;
  EXPECT_TRUE(PrepareEntry(&add, 0, 4).ok()) << "the ranks are the coordinator's to check";
}

}  // namespace
}  // namespace core
}  // namespace dadt
