// ProcessSetTable: ids every rank agrees on, membership, set ranks, and the errors of bad adds and
// removes (docs/process-sets.md).
#include "runtime/core/process_sets.h"

#include <gtest/gtest.h>

namespace dadt {
namespace core {
namespace {

::testing::AssertionResult HasText(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << message << "' does not contain '" << part << "'";
}

TEST(ProcessSetTableTest, HoldsTheGlobalSetFromTheStart) {
  ProcessSetTable table(4, 2);
  EXPECT_EQ(table.ids(), (std::vector<int32_t>{0}));
  const ProcessSet* global = table.Find(0);
  ASSERT_NE(global, nullptr);
  EXPECT_EQ(global->ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(global->set_rank, 2);
  EXPECT_TRUE(global->included());
}

TEST(ProcessSetTableTest, AddSortsRanksAndGivesSetRanks) {
  ProcessSetTable table(4, 3);
  StatusOr<int32_t> id = table.Add({3, 1});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, 1);
  const ProcessSet* set = table.Find(*id);
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(set->size(), 2);
  EXPECT_EQ(set->set_rank, 1);
  EXPECT_EQ(set->SetRankOf(1), 0);
  EXPECT_EQ(set->SetRankOf(2), -1);
  EXPECT_EQ(set->Describe(), "process set 1 (ranks [1, 3])");
}

TEST(ProcessSetTableTest, NonMemberKnowsTheSetButIsNotIncluded) {
  ProcessSetTable table(4, 0);
  StatusOr<int32_t> id = table.Add({1, 3});
  ASSERT_TRUE(id.ok());
  EXPECT_FALSE(table.Find(*id)->included());
  EXPECT_EQ(table.Find(*id)->set_rank, -1);
}

// Every rank applies the same adds and removes in the same order, so every rank assigns the same
// ids, whatever its own membership.
TEST(ProcessSetTableTest, EveryRankAssignsTheSameIds) {
  std::vector<std::vector<int32_t>> ids_by_rank;
  for (int me = 0; me < 4; ++me) {
    ProcessSetTable table(4, me);
    std::vector<int32_t> ids;
    ids.push_back(*table.Add({0, 2}));
    ids.push_back(*table.Add({1, 3}));
    ids.push_back(*table.Add({2}));
    ASSERT_TRUE(table.Remove(ids[1]).ok());
    ids.push_back(*table.Add({0, 1, 2}));
    ids_by_rank.push_back(ids);
  }
  for (int me = 1; me < 4; ++me) EXPECT_EQ(ids_by_rank[me], ids_by_rank[0]) << "rank " << me;
  EXPECT_EQ(ids_by_rank[0], (std::vector<int32_t>{1, 2, 3, 2}));  // the freed id 2 is reused
}

// A reused id gets a new rendezvous scope: keys of the removed set can never be read by the new.
TEST(ProcessSetTableTest, ReusedIdGetsAFreshRendezvousScope) {
  ProcessSetTable table(2, 0);
  int32_t first = *table.Add({0});
  const std::string first_scope = RendezvousScope(*table.Find(first));
  ASSERT_TRUE(table.Remove(first).ok());
  int32_t second = *table.Add({1});
  EXPECT_EQ(second, first);
  EXPECT_NE(RendezvousScope(*table.Find(second)), first_scope);
  EXPECT_EQ(first_scope, "pset/1/");
  EXPECT_EQ(RendezvousScope(*table.Find(second)), "pset/2/");
}

TEST(ProcessSetTableTest, BadAddsAreRefusedNamingWhy) {
  ProcessSetTable table(4, 0);
  auto empty = table.Add({});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(empty.status().message(), "at least one rank"));

  auto outside = table.Add({1, 4});
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(outside.status().message(), "rank 4 is not in the job (ranks 0 to 3)"));

  auto negative = table.Add({-1});
  EXPECT_TRUE(HasText(negative.status().message(), "rank -1 is not in the job"));

  auto twice = table.Add({2, 1, 2});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(twice.status().message(), "[2, 1, 2]: rank 2 is listed more than once"));

  ASSERT_TRUE(table.Add({1, 2}).ok());
  auto duplicate = table.Add({2, 1});
  EXPECT_EQ(duplicate.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(duplicate.status().message(),
                      "duplicate process set: ranks [1, 2] are already process set 1"));

  auto global = table.Add({0, 1, 2, 3});
  EXPECT_TRUE(HasText(global.status().message(), "already process set 0"));
  EXPECT_EQ(table.ids(), (std::vector<int32_t>{0, 1}));  // nothing refused was registered
}

TEST(ProcessSetTableTest, RemoveRefusesTheGlobalSetAndUnknownIds) {
  ProcessSetTable table(2, 0);
  Status global = table.Remove(0);
  EXPECT_EQ(global.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(global.message(), "global process set"));
  Status unknown = table.Remove(5);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(unknown.message(), "process set 5 is not registered"));
  int32_t id = *table.Add({1});
  EXPECT_TRUE(table.Remove(id).ok());
  EXPECT_EQ(table.Find(id), nullptr);
  EXPECT_FALSE(table.Remove(id).ok());  // twice
}

TEST(ProcessSetTableTest, FindByRanksIgnoresOrder) {
  ProcessSetTable table(4, 0);
  int32_t id = *table.Add({0, 3});
  EXPECT_EQ(table.FindByRanks({3, 0}), std::optional<int32_t>(id));
  EXPECT_EQ(table.FindByRanks({0, 1, 2, 3}), std::optional<int32_t>(0));
  EXPECT_EQ(table.FindByRanks({1}), std::nullopt);
  EXPECT_EQ(table.NextId(), 2);
}

}  // namespace
}  // namespace core
}  // namespace dadt
