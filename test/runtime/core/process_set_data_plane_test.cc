// Each process set gets its own Gloo data plane (docs/process-sets.md, "Data plane per set"):
// 4 ranks as threads build the global plane and one per set they belong to, from the job's options
// through SetBackendOptions, then reduce on disjoint sets at the same time and on an overlapping
// set, each seeing only its members' contributions.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/core/process_sets.h"
#include "test/runtime/backends/in_memory_kv_store.h"
#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace core {
namespace {

using backends::Backend;
using backends::BackendOptions;
using backends::BackendRegistry;

BackendOptions JobOptions(int rank, int size, KeyValueStore* store, const std::string& prefix) {
  BackendOptions o;
  o.rank = o.local_rank = rank;
  o.size = o.local_size = size;
  o.store = store;
  o.store_prefix = prefix;
  o.timeout = std::chrono::seconds(30);
  return o;
}

TEST(SetBackendOptionsTest, GeometryAndPrefixAreTheSets) {
  ProcessSetTable table(4, 3);
  const ProcessSet& set = *table.Find(*table.Add({1, 3}));
  BackendOptions job = JobOptions(3, 4, nullptr, "gloo/");
  BackendOptions o = SetBackendOptions(job, set);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.size, 2);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_size, 2);
  EXPECT_EQ(o.store_prefix, "gloo/pset/1/");
  EXPECT_EQ(o.member_ranks, (std::vector<int>{1, 3})) << "MPI_Comm_create_group's members";
  EXPECT_EQ(o.member_tag, 1) << "the seq";

  // A job over two hosts of two ranks: the set counts as spread over hosts.
  job.local_rank = 1;
  job.local_size = 2;
  job.cross_rank = 1;
  job.cross_size = 2;
  o = SetBackendOptions(job, set);
  EXPECT_EQ(o.local_size, 1);
  EXPECT_EQ(o.cross_rank, 1);
  EXPECT_EQ(o.cross_size, 2);
}

// Disjoint sets {0, 2} and {1, 3} reduce concurrently; then the overlapping set {1, 2, 3} and the
// global set; a set of one rank needs no peer.
TEST(ProcessSetDataPlaneTest, EachSetReducesOverItsMembersOnly) {
  constexpr int kSize = 4;
  testutil::InMemoryKeyValueStore store;
  const std::string prefix = testutil::UniqueStorePrefix();
  std::vector<std::vector<std::unique_ptr<Backend>>> keep(kSize);  // destroyed after every rank
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      const BackendOptions job = JobOptions(r, kSize, &store, prefix);
      ProcessSetTable table(kSize, r);
      const int32_t even = *table.Add({0, 2});
      const int32_t odd = *table.Add({1, 3});
      const int32_t upper = *table.Add({1, 2, 3});
      const int32_t alone = *table.Add({1});
      auto create = [&](int32_t id) -> Backend* {
        auto b = BackendRegistry::Create("gloo", SetBackendOptions(job, *table.Find(id)));
        EXPECT_TRUE(b.ok()) << table.Find(id)->Describe() << ": " << b.status().ToString();
        if (!b.ok()) return nullptr;
        keep[r].push_back(std::move(*b));
        return keep[r].back().get();
      };
      auto global = BackendRegistry::Create("gloo", job);
      ASSERT_TRUE(global.ok()) << global.status().ToString();

      // The same name-less allreduce on both disjoint sets at once: each sums its own members.
      Backend* mine = create(r % 2 == 0 ? even : odd);
      ASSERT_NE(mine, nullptr);
      int64_t v = 10 + r;
      EXPECT_OK(mine->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum));
      EXPECT_EQ(v, r % 2 == 0 ? 10 + 12 : 11 + 13) << "rank " << r;

      if (table.Find(upper)->included()) {
        Backend* up = create(upper);
        ASSERT_NE(up, nullptr);
        int64_t w = 100 * r;
        EXPECT_OK(up->Allreduce(&w, 1, DataType::kInt64, ReduceOp::kSum));
        EXPECT_EQ(w, 100 + 200 + 300) << "rank " << r;
      }

      if (r == 1) {  // a set of one rank reduces without a peer
        Backend* one = create(alone);
        ASSERT_NE(one, nullptr);
        int64_t x = 7;
        EXPECT_OK(one->Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum));
        EXPECT_EQ(x, 7);
      }

      int64_t g = 1;
      EXPECT_OK((*global)->Allreduce(&g, 1, DataType::kInt64, ReduceOp::kSum));
      EXPECT_EQ(g, kSize);
      EXPECT_OK((*global)->Barrier());  // every rank is done with every set before any leaves
      keep[r].push_back(std::move(*global));
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace core
}  // namespace dadt
