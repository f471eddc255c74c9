// PlanRound: candidates, --min-np/--max-np, the oldest surviving host at rank 0, local and cross ranks.
#include "dadtrun/round_planner.h"

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

std::vector<std::string> Layout(const RoundPlan& p) {
  std::vector<std::string> out;
  for (const PlannedWorker& w : p.workers) {
    out.push_back(w.host + ":" + std::to_string(w.slot) + (w.worker_id.empty() ? "+" : "=" + w.worker_id));
  }
  return out;
}

TEST(RoundPlannerTest, FirstRoundFillsHostsInFirstSeenOrder) {
  RoundPlan p = PlanRound({{"h1", 0, {0, 1}}, {"h2", 1, {0}}}, {}, 2, 0);
  ASSERT_TRUE(p.enough);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h1:0+", "h1:1+", "h2:0+"}));
  EXPECT_EQ(p.workers[0].AssignmentValue(), "0 3 0 2 0 2");
  EXPECT_EQ(p.workers[1].AssignmentValue(), "1 3 1 2 0 1");
  EXPECT_EQ(p.workers[2].AssignmentValue(), "2 3 0 1 1 2");
  EXPECT_TRUE(p.removed.empty());
}

TEST(RoundPlannerTest, BelowMinNpAssignsNothing) {
  RoundPlan p = PlanRound({{"h1", 0, {0}}}, {{"h1/0/1", "h1", 0, true}, {"gone/0/2", "gone", 0, true}}, 2, 0);
  EXPECT_FALSE(p.enough);
  EXPECT_EQ(p.available, 1);
  EXPECT_TRUE(p.workers.empty());
  EXPECT_TRUE(p.removed.empty());
}

TEST(RoundPlannerTest, OldestSurvivingHostHoldsRankZero) {
  // h1 (oldest) lost its worker and came back with a fresh slot; h2 and h3 have survivors.
  std::vector<UsableHost> usable = {{"h1", 0, {0}}, {"h2", 1, {0}}, {"h3", 2, {0}}};
  std::vector<LiveWorker> live = {{"h3/0/3", "h3", 0, true}, {"h2/0/2", "h2", 0, true}};
  RoundPlan p = PlanRound(usable, live, 2, 0);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h2:0=h2/0/2", "h3:0=h3/0/3", "h1:0+"}));
  EXPECT_EQ(p.workers[0].AssignmentValue(), "0 3 0 1 0 3");
  EXPECT_EQ(p.workers[2].AssignmentValue(), "2 3 0 1 2 3");
}

TEST(RoundPlannerTest, SurvivorFirstWithinItsHost) {
  // Slot 0 of h1 was replaced; the survivor on slot 1 must be rank 0.
  RoundPlan p = PlanRound({{"h1", 0, {0, 1}}}, {{"h1/1/1", "h1", 1, true}}, 1, 0);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h1:1=h1/1/1", "h1:0+"}));
  EXPECT_EQ(p.workers[1].AssignmentValue(), "1 2 1 2 0 1");
}

TEST(RoundPlannerTest, WorkersOnUnusableSlotsAreRemoved) {
  std::vector<LiveWorker> live = {{"h1/0/1", "h1", 0, true}, {"h2/0/2", "h2", 0, true}, {"h1/3/4", "h1", 3, true}};
  RoundPlan p = PlanRound({{"h1", 0, {0}}, {"h3", 2, {0}}}, live, 1, 0);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h1:0=h1/0/1", "h3:0+"}));
  EXPECT_EQ(p.removed, (std::vector<std::string>{"h2/0/2", "h1/3/4"}));
}

TEST(RoundPlannerTest, MaxNpKeepsSurvivorsThenWaitingThenNew) {
  std::vector<UsableHost> usable = {{"h1", 0, {0, 1}}, {"h2", 1, {0, 1}}};
  std::vector<LiveWorker> live = {{"h2/1/5", "h2", 1, false}, {"h2/0/2", "h2", 0, true}};
  RoundPlan p = PlanRound(usable, live, 1, 2);
  EXPECT_EQ(p.available, 4);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h2:0=h2/0/2", "h2:1=h2/1/5"}));
  EXPECT_TRUE(p.removed.empty());
  p = PlanRound(usable, live, 1, 1);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h2:0=h2/0/2"}));
  EXPECT_EQ(p.removed, (std::vector<std::string>{"h2/1/5"}));
  EXPECT_EQ(p.workers[0].AssignmentValue(), "0 1 0 1 0 1");
  p = PlanRound(usable, live, 1, 3);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"h2:0=h2/0/2", "h2:1=h2/1/5", "h1:0+"}));
}

TEST(RoundPlannerTest, CrossRanksFollowHostOrder) {
  // 3 hosts with 2, 1 and 2 workers: local_rank 1 exists on two hosts only.
  RoundPlan p = PlanRound({{"a", 0, {0, 1}}, {"b", 1, {0}}, {"c", 2, {0, 1}}}, {}, 1, 0);
  std::vector<std::string> values;
  for (const PlannedWorker& w : p.workers) values.push_back(w.AssignmentValue());
  EXPECT_EQ(values, (std::vector<std::string>{"0 5 0 2 0 3", "1 5 1 2 0 2", "2 5 0 1 1 3", "3 5 0 2 2 3",
                                              "4 5 1 2 1 2"}));
}

TEST(RoundPlannerTest, TwoLiveWorkersOnOneSlotKeepTheFirst) {
  RoundPlan p = PlanRound({{"a", 0, {0}}}, {{"a/0/1", "a", 0, true}, {"a/0/2", "a", 0, false}}, 1, 0);
  EXPECT_EQ(Layout(p), (std::vector<std::string>{"a:0=a/0/1"}));
  EXPECT_EQ(p.removed, (std::vector<std::string>{"a/0/2"}));
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
