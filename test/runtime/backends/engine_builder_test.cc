// CreateDataPlane with a fake engine: which backends a rank creates, in what order, with which
// geometry, store prefix and group color; flat when the hosts are uneven; unknown engines refused.
#include "runtime/backends/engine_builder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dadt {
namespace backends {
namespace {

std::vector<BackendOptions>& Created() {
  static std::vector<BackendOptions> created;
  return created;
}

class FakeBackend : public Backend {
 public:
  const char* Name() const override { return "FAKE"; }
  Status Allreduce(void*, int64_t, DataType, ReduceOp) override { return Status::OK(); }
  Status Allgatherv(const void*, void*, const std::vector<int64_t>&) override {
    return Status::OK();
  }
  Status Broadcast(void*, int64_t, int) override { return Status::OK(); }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*,
                   const std::vector<int64_t>&) override {
    return Status::OK();
  }
  Status Reducescatter(const void*, void*, const std::vector<int64_t>&, DataType,
                       ReduceOp) override {
    return Status::OK();
  }
  Status Barrier() override { return Status::OK(); }
};

const bool kRegistered = BackendRegistry::Register(
    "fake_engine_builder_test", [](const BackendOptions& o) -> StatusOr<std::unique_ptr<Backend>> {
      Created().push_back(o);
      return std::unique_ptr<Backend>(new FakeBackend());
    });

BackendOptions Geometry(int rank, int size, int local_rank, int local_size, int cross_rank,
                        int cross_size) {
  BackendOptions o;
  static_cast<JobGeometry&>(o) = JobGeometry{rank, size, local_rank, local_size, cross_rank,
                                             cross_size};
  o.store_prefix = "fake/";
  return o;
}

class EngineBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kRegistered);
    Created().clear();
  }
};

TEST_F(EngineBuilderTest, FlatUnlessAsked) {
  auto b = CreateDataPlane("fake_engine_builder_test", Geometry(3, 4, 1, 2, 1, 2), false);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(Created().size(), 1u);
  EXPECT_EQ(Created()[0].store_prefix, "fake/");
  EXPECT_EQ(Created()[0].group_color, -1);
}

TEST_F(EngineBuilderTest, HierarchicalCreatesFlatThenHostThenCrossHost) {
  // Rank 3 of 2 hosts x 2 ranks: local rank 1 on host 1.
  auto b = CreateDataPlane("fake_engine_builder_test", Geometry(3, 4, 1, 2, 1, 2), true);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_STREQ((*b)->Name(), "FAKE") << "the hierarchy keeps the flat engine's name";
  ASSERT_EQ(Created().size(), 3u);
  const BackendOptions& flat = Created()[0];
  const BackendOptions& local = Created()[1];
  const BackendOptions& cross = Created()[2];
  EXPECT_EQ(flat.rank, 3);
  EXPECT_EQ(flat.size, 4);
  EXPECT_EQ(local.rank, 1);
  EXPECT_EQ(local.size, 2);
  EXPECT_EQ(local.store_prefix, "fake/local/1/");
  EXPECT_EQ(local.group_color, 1);
  EXPECT_EQ(cross.rank, 1);
  EXPECT_EQ(cross.size, 2);
  EXPECT_EQ(cross.store_prefix, "fake/cross/1/");
  EXPECT_EQ(cross.group_color, 1);
}

TEST_F(EngineBuilderTest, UnevenOrSingleHostStaysFlat) {
  for (const BackendOptions& o : {Geometry(0, 3, 0, 2, 0, 2),    // 3 ranks, not 2 x 2
                                  Geometry(0, 4, 0, 4, 0, 1),    // one host
                                  Geometry(0, 4, 0, 1, 0, 4)}) {  // one rank per host
    Created().clear();
    auto b = CreateDataPlane("fake_engine_builder_test", o, true);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(Created().size(), 1u);
  }
}

TEST_F(EngineBuilderTest, UnknownEngineIsAnError) {
  EXPECT_FALSE(CreateDataPlane("no_such_engine", Geometry(0, 1, 0, 1, 0, 1), false).ok());
  EXPECT_FALSE(CreateDataPlane("no_such_engine", Geometry(0, 4, 0, 2, 0, 2), true).ok());
}

}  // namespace
}  // namespace backends
}  // namespace dadt
