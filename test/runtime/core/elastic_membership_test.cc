// JoinElasticRound and ParseElasticAssignment: the worker's half of the launcher's round protocol
// (runtime/core/elastic_membership.h), over an in-memory store playing the launcher.
#include "runtime/core/elastic_membership.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/common/rendezvous/in_memory_store.h"

namespace dadt {
namespace core {
namespace {

using std::chrono::milliseconds;

void Publish(rendezvous::InMemoryStore* s, int round, const std::string& worker,
             const std::string& value) {
  ASSERT_TRUE(s->Set("elastic/round/" + std::to_string(round) + "/assign/" + worker, value).ok());
  ASSERT_TRUE(s->Set("elastic/round", std::to_string(round)).ok());
}

TEST(ParseElasticAssignment, ReadsSixFieldsAndRefusesJunk) {
  auto g = ParseElasticAssignment("2 3 0 1 2 3");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->rank, 2);
  EXPECT_EQ(g->size, 3);
  EXPECT_EQ(g->local_rank, 0);
  EXPECT_EQ(g->local_size, 1);
  EXPECT_EQ(g->cross_rank, 2);
  EXPECT_EQ(g->cross_size, 3);
  for (const char* bad : {"", "1 2 3", "0 1 0 1 0 1 9", "3 3 0 1 0 1", "0 1 x 1 0 1", "removed"}) {
    auto r = ParseElasticAssignment(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos);
  }
}

TEST(JoinElasticRound, JoinsTheFirstRoundAfterTheLastOneThatAssignsThisWorker) {
  rendezvous::InMemoryStore s;
  Publish(&s, 1, "h/0/1", "0 1 0 1 0 1");
  ASSERT_TRUE(s.Set("elastic/notice", "4").ok());
  auto j = JoinElasticRound(&s, "h/0/1", 0, milliseconds(1000));
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->round, 1);
  EXPECT_EQ(j->notice, 4);
  EXPECT_EQ(ElasticScope(j->round), "elastic/1/");
  // Having run round 1, the worker waits for a later one; round 2 does not name it (it was for
  // other workers), round 3 does.
  std::thread driver([&s] {
    std::this_thread::sleep_for(milliseconds(50));
    Publish(&s, 2, "h/1/2", "0 1 0 1 0 1");
    std::this_thread::sleep_for(milliseconds(50));
    Publish(&s, 3, "h/0/1", "1 2 0 1 1 2");
  });
  j = JoinElasticRound(&s, "h/0/1", 1, milliseconds(5000));
  driver.join();
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->round, 3);
  EXPECT_EQ(j->geometry.rank, 1);
  EXPECT_EQ(j->geometry.size, 2);
}

TEST(JoinElasticRound, AFinishedRoundEndsTheWaitAtOnceNamingWhoFinished) {
  // The worker ran round 1, its world failed, and meanwhile another worker of round 1 exited 0:
  // the driver marks the round finished and will form no other, so waiting is pointless.
  rendezvous::InMemoryStore s;
  Publish(&s, 1, "h/0/1", "0 2 0 1 0 2");
  std::thread driver([&s] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(s.Set("elastic/round/1/finished", "rank 1 (worker g/0/2)").ok());
  });
  const auto start = std::chrono::steady_clock::now();
  auto j = JoinElasticRound(&s, "h/0/1", 1, milliseconds(30000));
  driver.join();
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(j.status().message().find("rank 1 (worker g/0/2) of round 1 finished training"), std::string::npos)
      << j.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  // A finished mark on an older round does not stop a worker waiting for a newer one.
  Publish(&s, 2, "h/0/1", "0 1 0 1 0 1");
  j = JoinElasticRound(&s, "h/0/1", 1, milliseconds(1000));
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->round, 2);
}

TEST(JoinElasticRound, RemovedIsItsOwnError) {
  rendezvous::InMemoryStore s;
  Publish(&s, 2, "h/0/1", "removed");
  auto j = JoinElasticRound(&s, "h/0/1", 1, milliseconds(1000));
  EXPECT_EQ(j.status().code(), StatusCode::kRemoved);
  EXPECT_NE(j.status().message().find("h/0/1"), std::string::npos);
}

TEST(JoinElasticRound, TimesOutNamingTheWorkerAndTheLastRound) {
  rendezvous::InMemoryStore s;
  Publish(&s, 1, "h/0/1", "0 1 0 1 0 1");
  auto j = JoinElasticRound(&s, "h/0/1", 1, milliseconds(100));
  EXPECT_EQ(j.status().code(), StatusCode::kTimeout);
  EXPECT_NE(j.status().message().find("h/0/1"), std::string::npos);
  EXPECT_NE(j.status().message().find("last round seen: 1"), std::string::npos);
}

TEST(JoinElasticRound, JunkRoundNumberIsRefused) {
  rendezvous::InMemoryStore s;
  ASSERT_TRUE(s.Set("elastic/round", "two").ok());
  auto j = JoinElasticRound(&s, "h/0/1", 0, milliseconds(100));
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("'two'"), std::string::npos);
}

}  // namespace
}  // namespace core
}  // namespace dadt
