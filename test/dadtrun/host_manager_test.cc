// HostManager: first-seen order, change kinds, the failure rule and cooldowns (no clock: times are passed in).
#include "dadtrun/host_manager.h"

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

using std::chrono::seconds;

const ElasticClock::time_point t0{};

std::vector<std::string> Names(const std::vector<UsableHost>& hosts) {
  std::vector<std::string> out;
  for (const UsableHost& h : hosts) out.push_back(h.host);
  return out;
}

HostManager::Cooldown Range(int lo, int hi) { return std::make_pair(seconds(lo), seconds(hi)); }

TEST(HostManagerTest, FirstSeenOrderSurvivesRelisting) {
  HostManager m(Range(10, 100));
  HostChange c = m.Update({{"b", 1}, {"a", 2}}, t0);
  EXPECT_EQ(c.Kind(), "added");
  ASSERT_EQ(c.added.size(), 2u);
  EXPECT_EQ(Names(m.Usable()), (std::vector<std::string>{"b", "a"}));
  // Listed in another order: order stays first-seen.
  EXPECT_FALSE(m.Update({{"a", 2}, {"b", 1}}, t0).any());
  EXPECT_EQ(Names(m.Usable()), (std::vector<std::string>{"b", "a"}));
  // b dropped and listed again: still first.
  c = m.Update({{"a", 2}}, t0);
  EXPECT_EQ(c.Kind(), "removed");
  EXPECT_EQ(c.removed, (std::vector<std::string>{"b"}));
  EXPECT_EQ(m.Update({{"a", 2}, {"c", 1}, {"b", 1}}, t0).Kind(), "added");
  EXPECT_EQ(Names(m.Usable()), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(m.FirstSeen("c"), 2);
  EXPECT_EQ(m.FirstSeen("zz"), -1);
}

TEST(HostManagerTest, ChangeKinds) {
  HostManager m(std::nullopt);
  m.Update({{"a", 2}, {"b", 1}}, t0);
  EXPECT_EQ(m.Update({{"a", 3}, {"b", 1}}, t0).Kind(), "added");    // more slots
  EXPECT_EQ(m.Update({{"a", 1}, {"b", 1}}, t0).Kind(), "removed");  // fewer slots
  EXPECT_EQ(m.Update({{"a", 1}, {"c", 1}}, t0).Kind(), "mixed");    // b out, c in
  EXPECT_EQ(m.Update({{"a", 1}, {"c", 1}}, t0).Kind(), "");
  EXPECT_EQ(m.UsableSlotCount(), 2);
}

TEST(HostManagerTest, DuplicateNamesAreOneHost) {
  HostManager m(std::nullopt);
  m.Update({{"a", 1}, {"a", 2}}, t0);
  ASSERT_EQ(m.Usable().size(), 1u);
  EXPECT_EQ(m.Usable()[0].slots, (std::vector<int>{0, 1, 2}));
}

TEST(HostManagerTest, OneFailedSlotDoesNotBlacklistAHealthyHost) {
  HostManager m(Range(10, 100));
  m.Update({{"a", 2}, {"b", 1}}, t0);
  FailureOutcome out = m.RecordFailure("a", 1, t0);
  EXPECT_FALSE(out.host_blacklisted);
  EXPECT_EQ(out.cooldown, seconds(10));
  EXPECT_TRUE(m.IsUsable("a", 0));
  EXPECT_FALSE(m.IsUsable("a", 1));
  EXPECT_EQ(Names(m.Usable()), (std::vector<std::string>{"a", "b"}));
  // The slot rests its cooldown, then comes back (a notice-worthy change).
  EXPECT_FALSE(m.ExpireRests(t0 + seconds(9)).any());
  HostChange back = m.ExpireRests(t0 + seconds(10));
  EXPECT_EQ(back.Kind(), "added");
  EXPECT_TRUE(m.IsUsable("a", 1));
  // Failing again there: the slot rests twice as long.
  EXPECT_EQ(m.RecordFailure("a", 1, t0 + seconds(20)).cooldown, seconds(20));
}

TEST(HostManagerTest, OneSlotHostIsBlacklistedOnItsFirstFailure) {
  HostManager m(Range(30, 300));
  m.Update({{"a", 1}, {"b", 1}}, t0);
  FailureOutcome out = m.RecordFailure("b", 0, t0);
  EXPECT_TRUE(out.host_blacklisted);
  EXPECT_EQ(out.cooldown, seconds(30));
  EXPECT_EQ(out.until, t0 + seconds(30));
  EXPECT_EQ(Names(m.Usable()), (std::vector<std::string>{"a"}));
  // Still listed by the script, still out until its cooldown ends; no change reported meanwhile.
  EXPECT_FALSE(m.Update({{"a", 1}, {"b", 1}}, t0 + seconds(29)).any());
  HostChange back = m.Update({{"a", 1}, {"b", 1}}, t0 + seconds(30));
  ASSERT_EQ(back.added.size(), 1u);
  EXPECT_EQ(back.added[0].host, "b");
  EXPECT_EQ(Names(m.Usable()), (std::vector<std::string>{"a", "b"}));
  // Blacklisted again: the cooldown doubles, capped at MAX.
  EXPECT_EQ(m.RecordFailure("b", 0, t0 + seconds(40)).cooldown, seconds(60));
  m.ExpireRests(t0 + seconds(100));
  EXPECT_EQ(m.RecordFailure("b", 0, t0 + seconds(100)).cooldown, seconds(120));
  m.ExpireRests(t0 + seconds(220));
  EXPECT_EQ(m.RecordFailure("b", 0, t0 + seconds(220)).cooldown, seconds(240));
  m.ExpireRests(t0 + seconds(460));
  EXPECT_EQ(m.RecordFailure("b", 0, t0 + seconds(460)).cooldown, seconds(300));
}

TEST(HostManagerTest, HostWhereEverySlotFailedIsBlacklisted) {
  HostManager m(Range(10, 10));
  m.Update({{"a", 2}}, t0);
  EXPECT_FALSE(m.RecordFailure("a", 0, t0).host_blacklisted);
  EXPECT_TRUE(m.RecordFailure("a", 1, t0).host_blacklisted);
  EXPECT_EQ(m.UsableSlotCount(), 0);
  // A second failure report for a host already out changes nothing.
  EXPECT_FALSE(m.RecordFailure("a", 1, t0).host_blacklisted);
  // Back after the cooldown with every slot.
  m.ExpireRests(t0 + seconds(10));
  EXPECT_EQ(m.UsableSlotCount(), 2);
}

TEST(HostManagerTest, HostThatKeepsFailingIsBlacklisted) {
  HostManager m(Range(1, 1));
  m.Update({{"a", 8}}, t0);
  for (int i = 1; i < kHostFailureLimit; ++i) {
    EXPECT_FALSE(m.RecordFailure("a", 3, t0 + seconds(2 * i)).host_blacklisted) << i;
    m.ExpireRests(t0 + seconds(2 * i + 1));
    EXPECT_EQ(m.UsableSlotCount(), 8);
  }
  EXPECT_TRUE(m.RecordFailure("a", 3, t0 + seconds(100)).host_blacklisted);
  EXPECT_EQ(m.UsableSlotCount(), 0);
}

TEST(HostManagerTest, WithoutCooldownRangeARestIsForever) {
  HostManager m(std::nullopt);
  m.Update({{"a", 1}, {"b", 2}}, t0);
  FailureOutcome out = m.RecordFailure("a", 0, t0);
  EXPECT_TRUE(out.host_blacklisted);
  EXPECT_TRUE(out.forever);
  EXPECT_TRUE(m.RecordFailure("b", 1, t0).forever);
  m.ExpireRests(t0 + seconds(1000000));
  EXPECT_EQ(m.UsableSlotCount(), 1);  // b:0 only
}

TEST(HostManagerTest, DroppedWhileBlacklistedKeepsItsCooldown) {
  HostManager m(Range(30, 30));
  m.Update({{"a", 1}, {"b", 1}}, t0);
  m.RecordFailure("b", 0, t0);
  EXPECT_FALSE(m.Update({{"a", 1}}, t0 + seconds(1)).any());  // b was out already
  EXPECT_FALSE(m.Update({{"a", 1}, {"b", 1}}, t0 + seconds(2)).any());  // relisted, still resting
  EXPECT_EQ(m.Update({{"a", 1}, {"b", 1}}, t0 + seconds(30)).Kind(), "added");
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
