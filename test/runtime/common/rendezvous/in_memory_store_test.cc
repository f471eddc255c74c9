#include "runtime/common/rendezvous/in_memory_store.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dadt {
namespace rendezvous {
namespace {

using std::chrono::milliseconds;

TEST(InMemoryStoreTest, SetThenGet) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k", "v1").ok());
  ASSERT_TRUE(store.Set("k", "v2").ok());
  StatusOr<std::string> v = store.Get("k", milliseconds(0));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "v2");
}

TEST(InMemoryStoreTest, GetTimesOutNamingTheKey) {
  InMemoryStore store;
  auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> v = store.Get("coordinator/addr", milliseconds(50));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(45));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("coordinator/addr"), std::string::npos);
}

TEST(InMemoryStoreTest, GetWakesWhenAnotherThreadSets) {
  InMemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(30));
    ASSERT_TRUE(store.Set("late", "here").ok());
  });
  StatusOr<std::string> v = store.Get("late", milliseconds(5000));
  setter.join();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "here");
}

TEST(InMemoryStoreTest, ConcurrentAddsAreNotLost) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) ASSERT_TRUE(store.Add("count", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  StatusOr<int64_t> v = store.Add("count", 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 1000);
  StatusOr<std::string> s = store.Get("count", milliseconds(0));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "1000");
}

TEST(InMemoryStoreTest, AddOnNonNumberFails) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k", "abc").ok());
  EXPECT_EQ(store.Add("k", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store.Get("k", milliseconds(0)), "abc");
}

}  // namespace
}  // namespace rendezvous
}  // namespace dadt
