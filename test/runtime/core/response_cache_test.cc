#include "runtime/core/response_cache.h"

#include <gtest/gtest.h>

namespace dadt {
namespace core {
namespace {

Request Req(const std::string& name, Shape shape = {8}) {
  Request r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = shape;
  return r;
}

TEST(ResponseCacheTest, ReplicaLooksUpWhatCoordinatorAssigned) {
  ResponseCache coordinator(4), replica(4);
  CachedRef ref = coordinator.Assign(Req("w"));
  replica.Put(ref, Req("w"));
  auto hit = replica.Lookup(Req("w"));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->slot, ref.slot);
  EXPECT_EQ(hit->generation, ref.generation);
  const Request* resolved = coordinator.Resolve(*hit);
  ASSERT_NE(resolved, nullptr);
  EXPECT_EQ(resolved->name, "w");
}

TEST(ResponseCacheTest, DifferentSignatureMisses) {
  ResponseCache c(4);
  c.Assign(Req("w", {8}));
  EXPECT_FALSE(c.Lookup(Req("w", {9})).has_value());
  Request other = Req("w", {8});
  other.reduce_op = ReduceOp::kMax;
  EXPECT_FALSE(c.Lookup(other).has_value());
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsedAndStaleRefsFail) {
  ResponseCache c(2);
  CachedRef a = c.Assign(Req("a"));
  CachedRef b = c.Assign(Req("b"));
  ASSERT_NE(c.Resolve(a), nullptr);  // a is now more recent than b
  CachedRef d = c.Assign(Req("d"));  // evicts b
  EXPECT_EQ(d.slot, b.slot);
  EXPECT_EQ(c.Resolve(b), nullptr) << "a ref to an evicted slot must be stale";
  EXPECT_NE(c.Resolve(a), nullptr);
  EXPECT_FALSE(c.Lookup(Req("b")).has_value());
  EXPECT_EQ(c.size(), 2);
}

TEST(ResponseCacheTest, ReassigningSameNameBumpsGeneration) {
  ResponseCache c(4);
  CachedRef first = c.Assign(Req("w", {8}));
  CachedRef second = c.Assign(Req("w", {16}));
  EXPECT_EQ(first.slot, second.slot);
  EXPECT_NE(first.generation, second.generation);
  EXPECT_EQ(c.Resolve(first), nullptr);
  EXPECT_NE(c.Resolve(second), nullptr);
}

TEST(ResponseCacheTest, UncacheableOpsAndDisabledCacheNeverHit) {
  ResponseCache off(0);
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.Lookup(Req("w")).has_value());
  ResponseCache c(4);
  Request g = Req("gather");
  g.op = OpType::kAllgather;
  c.Put(CachedRef{0, 1}, g);
  EXPECT_FALSE(c.Lookup(g).has_value());
}

TEST(ResponseCacheTest, TurningOffForgetsEntriesAndStalesRefs) {
  ResponseCache c(4);
  CachedRef ref = c.Assign(Req("w"));
  c.SetActive(false);
  EXPECT_FALSE(c.enabled());
  EXPECT_FALSE(c.Lookup(Req("w")).has_value());
  EXPECT_EQ(c.Resolve(ref), nullptr);
  c.SetActive(true);
  EXPECT_EQ(c.Resolve(ref), nullptr) << "a ref from before the switch must stay stale";
  CachedRef again = c.Assign(Req("w"));
  EXPECT_NE(c.Resolve(again), nullptr);
}

}  // namespace
}  // namespace core
}  // namespace dadt
