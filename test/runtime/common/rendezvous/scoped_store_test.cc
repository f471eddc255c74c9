#include "runtime/common/rendezvous/scoped_store.h"

#include <gtest/gtest.h>

#include "runtime/common/rendezvous/in_memory_store.h"

namespace dadt {
namespace rendezvous {
namespace {

using std::chrono::milliseconds;

TEST(ScopedStoreTest, IncarnationScopesDiffer) {
  EXPECT_EQ(IncarnationScope(0), "run/0/");
  EXPECT_EQ(IncarnationScope(12), "run/12/");
  EXPECT_NE(IncarnationScope(1), IncarnationScope(11));
}

TEST(ScopedStoreTest, SetStoresUnderThePrefix) {
  InMemoryStore base;
  ScopedStore scoped(&base, IncarnationScope(3));
  ASSERT_TRUE(scoped.Set("ctrl/addr", "10.0.0.1:4000").ok());
  auto raw = base.Get("run/3/ctrl/addr", milliseconds(0));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ(*raw, "10.0.0.1:4000");
  EXPECT_FALSE(base.Get("ctrl/addr", milliseconds(0)).ok());
}

// The reason for the scope: what an earlier incarnation published is invisible to the next, whose
// Get waits for its own value instead of reading the stale one.
TEST(ScopedStoreTest, AnEarlierIncarnationsKeysAreNotSeen) {
  InMemoryStore base;
  ScopedStore first(&base, IncarnationScope(0));
  ScopedStore second(&base, IncarnationScope(1));
  ASSERT_TRUE(first.Set("ctrl/addr", "old").ok());
  auto stale = second.Get("ctrl/addr", milliseconds(20));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kTimeout);
  EXPECT_NE(stale.status().message().find("run/1/ctrl/addr"), std::string::npos)
      << stale.status().message();
  ASSERT_TRUE(second.Set("ctrl/addr", "new").ok());
  EXPECT_EQ(*second.Get("ctrl/addr", milliseconds(0)), "new");
  EXPECT_EQ(*first.Get("ctrl/addr", milliseconds(0)), "old");
}

}  // namespace
}  // namespace rendezvous
}  // namespace dadt
