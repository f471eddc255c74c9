#include "runtime/core/fusion_planner.h"

#include <gtest/gtest.h>

namespace dadt {
namespace core {
namespace {

Response One(const std::string& name, int64_t elems, DataType dtype = DataType::kFloat32,
             ReduceOp op = ReduceOp::kSum) {
  Response r;
  r.type = Response::Type::kAllreduce;
  r.names = {name};
  r.sizes = {elems};
  r.dtype = dtype;
  r.reduce_op = op;
  r.total_bytes = elems * static_cast<int64_t>(DataTypeSize(dtype));
  return r;
}

std::vector<std::vector<std::string>> Names(const std::vector<Response>& rs) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : rs) out.push_back(r.names);
  return out;
}

TEST(FusionPlannerTest, PacksUpToThresholdInOrder) {
  std::vector<Response> in = {One("a", 10), One("b", 10), One("c", 10), One("d", 10)};
  auto out = PlanFusion(in, 80);  // two float32 tensors of 40 B fit per bucket
  EXPECT_EQ(Names(out), (std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "d"}}));
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(out[0].total_bytes, 80);
}

TEST(FusionPlannerTest, ThresholdZeroTurnsFusionOff) {
  auto out = PlanFusion({One("a", 1), One("b", 1)}, 0);
  EXPECT_EQ(out.size(), 2u);
}

TEST(FusionPlannerTest, LargerThanThresholdGoesAlone) {
  auto out = PlanFusion({One("a", 1), One("big", 1000), One("b", 1)}, 64);
  EXPECT_EQ(Names(out), (std::vector<std::vector<std::string>>{{"a", "b"}, {"big"}}));
}

TEST(FusionPlannerTest, IncompatibleTensorsAreNotMixed) {
  auto out = PlanFusion({One("f32", 4), One("f64", 4, DataType::kFloat64), One("f32b", 4),
                         One("max", 4, DataType::kFloat32, ReduceOp::kMax)},
                        1 << 20);
  EXPECT_EQ(Names(out),
            (std::vector<std::vector<std::string>>{{"f32", "f32b"}, {"f64"}, {"max"}}));
}

// The fusion buffer lives in one memory: GPU tensors are packed with GPU tensors only.
TEST(FusionPlannerTest, GpuAndCpuTensorsGoToSeparateBuffers) {
  Response g1 = One("g1", 4), g2 = One("g2", 4), s1 = One("staged", 4);
  g1.device = 0;
  g2.device = 0;
  s1.device = kStagedGpuDevice;
  auto out = PlanFusion({g1, One("c1", 4), g2, s1, One("c2", 4)}, 1 << 20);
  EXPECT_EQ(Names(out), (std::vector<std::vector<std::string>>{{"g1", "g2"}, {"c1", "c2"}, {"staged"}}));
  EXPECT_EQ(out[0].device, 0);
  EXPECT_EQ(out[1].device, kCpuDevice);
}

// Process sets run on different communicators: tensors of two sets never share a buffer, even
// with the same name (docs/process-sets.md).
TEST(FusionPlannerTest, ProcessSetsAreNeverMixed) {
  Response a1 = One("w", 4), b1 = One("w", 4), a2 = One("v", 4);
  a1.process_set_id = 1;
  b1.process_set_id = 2;
  a2.process_set_id = 1;
  auto out = PlanFusion({a1, b1, One("g", 4), a2}, 1 << 20);
  EXPECT_EQ(Names(out), (std::vector<std::vector<std::string>>{{"w", "v"}, {"w"}, {"g"}}));
  EXPECT_EQ(out[0].process_set_id, 1);
  EXPECT_EQ(out[1].process_set_id, 2);
  EXPECT_EQ(out[2].process_set_id, 0);
}

TEST(FusionPlannerTest, NonAllreducePassesThrough) {
  Response bcast;
  bcast.type = Response::Type::kBroadcast;
  bcast.names = {"p"};
  auto out = PlanFusion({One("a", 4), bcast, One("b", 4)}, 1 << 20);
  EXPECT_EQ(Names(out), (std::vector<std::vector<std::string>>{{"a", "b"}, {"p"}}));
}

TEST(FusionPlannerTest, TwoHundredSmallTensorsNeedFewBuffers) {
  std::vector<Response> in;
  int64_t total = 0;
  for (int i = 0; i < 200; ++i) {
    in.push_back(One("t" + std::to_string(i), 4096 + 1000 * i));
    total += in.back().total_bytes;
  }
  const int64_t threshold = 8 << 20;
  auto out = PlanFusion(in, threshold);
  EXPECT_LE(out.size(), static_cast<size_t>(total / threshold + 2));
  size_t names = 0;
  for (const auto& r : out) {
    EXPECT_LE(r.total_bytes, threshold);
    names += r.names.size();
  }
  EXPECT_EQ(names, 200u);
}

}  // namespace
}  // namespace core
}  // namespace dadt
