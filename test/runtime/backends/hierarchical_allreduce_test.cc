// HierarchicalAllreduce against the flat allreduce, with ranks as threads on pretend hosts: the
// job's ranks are split into `hosts` groups of `per_host` consecutive ranks, each thread builds the
// flat, local and cross Gloo backends the way the runtime does, and every dtype/op/count must
// give what the flat backend gives (and the exact expected value: the inputs are small integers,
// so even float sums are exact here).
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backends/backend.h"
#include "runtime/backends/hierarchical_allreduce.h"
#include "test/runtime/backends/expected_values.h"
#include "test/runtime/backends/in_memory_kv_store.h"
#include "test/runtime/backends/rank_threads.h"

namespace dadt {
namespace backends {
namespace {

using testutil::Buffer;
using testutil::Expected;
using testutil::Get;
using testutil::Input;
using testutil::Put;

std::unique_ptr<Backend> Make(KeyValueStore* store, const std::string& prefix, JobGeometry g) {
  BackendOptions o;
  static_cast<JobGeometry&>(o) = g;
  o.store = store;
  o.store_prefix = prefix;
  o.timeout = std::chrono::seconds(60);
  auto b = BackendRegistry::Create("gloo", o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

void RunPretendHosts(int hosts, int per_host) {
  const int n = hosts * per_host;
  testutil::InMemoryKeyValueStore store;
  const std::string prefix = testutil::UniqueStorePrefix();
  auto rank_main = [&](int rank) {
    const int lr = rank % per_host, cr = rank / per_host;
    auto flat = Make(&store, prefix + "flat/", {rank, n, lr, per_host, cr, hosts});
    auto flat_for_h = Make(&store, prefix + "flat2/", {rank, n, lr, per_host, cr, hosts});
    auto local = Make(&store, prefix + "local/" + std::to_string(cr) + "/",
                      {lr, per_host, lr, per_host, 0, 1});
    auto cross = Make(&store, prefix + "cross/" + std::to_string(lr) + "/",
                      {cr, hosts, 0, 1, cr, hosts});
    if (!flat || !flat_for_h || !local || !cross) return;
    HierarchicalAllreduce h(std::move(flat_for_h), std::move(local), std::move(cross), lr,
                            per_host);
    EXPECT_STREQ(h.Name(), "GLOO");
    for (DataType dtype : {DataType::kInt32, DataType::kInt64, DataType::kUint8,
                           DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
        for (int64_t count : {0, 1, 3, 7, 1000, 100003}) {
          std::vector<char> a = Buffer(count, dtype), b = Buffer(count, dtype);
          for (int64_t i = 0; i < count; ++i) {
            Put(a.data(), i, dtype, Input(rank, i, dtype, op));
            Put(b.data(), i, dtype, Input(rank, i, dtype, op));
          }
          EXPECT_OK(flat->Allreduce(a.data(), count, dtype, op));
          EXPECT_OK(h.Allreduce(b.data(), count, dtype, op));
          for (int64_t i = 0; i < count; ++i) {
            const double want = Expected(n, i, dtype, op);
            if (Get(b.data(), i, dtype) != Get(a.data(), i, dtype) ||
                Get(b.data(), i, dtype) != want) {
              ADD_FAILURE() << "rank " << rank << " " << testutil::Describe(dtype, op, count)
                            << " [" << i << "]: hierarchical " << Get(b.data(), i, dtype)
                            << ", flat " << Get(a.data(), i, dtype) << ", want " << want;
              break;
            }
          }
        }
      }
    }
    // The other collectives go to the flat backend.
    int64_t v = rank == 1 ? 42 : 0;
    EXPECT_OK(h.Broadcast(&v, sizeof(v), 1));
    EXPECT_EQ(v, 42);
    EXPECT_OK(h.Barrier());
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
}

TEST(HierarchicalAllreduceTest, TwoHostsOfTwoEqualsFlat) { RunPretendHosts(2, 2); }
TEST(HierarchicalAllreduceTest, TwoHostsOfThreeEqualsFlat) { RunPretendHosts(2, 3); }
TEST(HierarchicalAllreduceTest, ThreeHostsOfTwoEqualsFlat) { RunPretendHosts(3, 2); }

}  // namespace
}  // namespace backends
}  // namespace dadt
