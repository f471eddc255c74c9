#include "dadtrun/host_manager.h"

#include <algorithm>

namespace dadt {
namespace dadtrun {
namespace {

constexpr ElasticClock::time_point kForever = ElasticClock::time_point::max();

}  // namespace

std::string HostChange::Kind() const {
  const bool up = !added.empty() || more_slots;
  const bool down = !removed.empty() || fewer_slots;
  if (up && down) return "mixed";
  if (up) return "added";
  if (down) return "removed";
  return "";
}

std::chrono::seconds HostManager::CooldownFor(int times) const {
  if (!cooldown_) return std::chrono::seconds(0);
  int64_t s = cooldown_->first.count();
  for (int i = 1; i < times && s < cooldown_->second.count(); ++i) s *= 2;
  return std::chrono::seconds(std::min<int64_t>(s, cooldown_->second.count()));
}

bool HostManager::SlotUsable(const Record& r, int slot) const {
  return r.listed && !r.blacklisted_until && slot >= 0 && slot < r.slots && r.resting.count(slot) == 0;
}

int HostManager::UsableSlots(const Record& r) const {
  int n = 0;
  for (int s = 0; s < r.slots; ++s) n += SlotUsable(r, s) ? 1 : 0;
  return n;
}

HostChange HostManager::ExpireRests(ElasticClock::time_point now) {
  HostChange change;
  for (auto& [host, r] : hosts_) {
    if (r.blacklisted_until) {
      if (*r.blacklisted_until == kForever || *r.blacklisted_until > now) continue;
      // Readmitted: its slots come back with it, and rule 2 counts afresh.
      r.blacklisted_until.reset();
      r.resting.clear();
      r.failures = 0;
      if (UsableSlots(r) > 0) change.added.push_back({host, UsableSlots(r)});
      continue;
    }
    for (auto it = r.resting.begin(); it != r.resting.end();) {
      if (it->second != kForever && it->second <= now) {
        if (r.listed && it->first < r.slots) change.more_slots = true;
        it = r.resting.erase(it);
      } else {
        ++it;
      }
    }
  }
  return change;
}

HostChange HostManager::Update(const std::vector<HostSlots>& listed, ElasticClock::time_point now) {
  HostChange change = ExpireRests(now);
  // The same name twice is one host (as PlaceRanks treats -H); order: first mention.
  std::vector<HostSlots> merged;
  for (const HostSlots& h : listed) {
    auto it = std::find_if(merged.begin(), merged.end(), [&h](const HostSlots& m) { return m.host == h.host; });
    if (it == merged.end()) {
      merged.push_back(h);
    } else {
      it->slots += h.slots;
    }
  }
  std::set<std::string> now_listed;
  for (const HostSlots& h : merged) {
    now_listed.insert(h.host);
    auto [it, inserted] = hosts_.try_emplace(h.host);
    Record& r = it->second;
    if (inserted) r.first_seen = next_first_seen_++;
    const bool was_listed = r.listed;
    const int old_slots = r.slots;
    r.listed = true;
    r.slots = h.slots;
    if (r.blacklisted_until) continue;  // comes back when its cooldown ends
    if (!was_listed) {
      if (UsableSlots(r) > 0) change.added.push_back({h.host, UsableSlots(r)});
    } else if (h.slots > old_slots) {
      change.more_slots = true;
    } else if (h.slots < old_slots) {
      change.fewer_slots = true;
    }
  }
  for (auto& [host, r] : hosts_) {
    if (!r.listed || now_listed.count(host)) continue;
    const bool was_usable = UsableSlots(r) > 0;
    r.listed = false;
    r.slots = 0;
    if (was_usable) change.removed.push_back(host);
  }
  return change;
}

FailureOutcome HostManager::RecordFailure(const std::string& host, int slot, ElasticClock::time_point now) {
  FailureOutcome out;
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return out;
  Record& r = it->second;
  if (r.blacklisted_until) {  // already out (another of its workers failed first)
    out.forever = *r.blacklisted_until == kForever;
    out.until = *r.blacklisted_until;
    return out;
  }
  ++r.failures;
  const int times = ++r.slot_rests_count[slot];
  out.forever = !cooldown_.has_value();
  out.cooldown = CooldownFor(times);
  out.until = out.forever ? kForever : now + out.cooldown;
  r.resting[slot] = out.until;
  if ((r.listed && UsableSlots(r) == 0) || r.failures >= kHostFailureLimit) {
    out.host_blacklisted = true;
    out.cooldown = CooldownFor(++r.blacklistings);
    out.until = out.forever ? kForever : now + out.cooldown;
    r.blacklisted_until = out.until;
  }
  return out;
}

std::vector<UsableHost> HostManager::Usable() const {
  std::vector<UsableHost> out;
  for (const auto& [host, r] : hosts_) {
    UsableHost u{host, r.first_seen, {}};
    for (int s = 0; s < r.slots; ++s) {
      if (SlotUsable(r, s)) u.slots.push_back(s);
    }
    if (!u.slots.empty()) out.push_back(std::move(u));
  }
  std::sort(out.begin(), out.end(),
            [](const UsableHost& a, const UsableHost& b) { return a.first_seen < b.first_seen; });
  return out;
}

bool HostManager::IsUsable(const std::string& host, int slot) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && SlotUsable(it->second, slot);
}

int HostManager::UsableSlotCount() const {
  int n = 0;
  for (const auto& [host, r] : hosts_) n += UsableSlots(r);
  return n;
}

int64_t HostManager::FirstSeen(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? -1 : it->second.first_seen;
}

}  // namespace dadtrun
}  // namespace dadt
