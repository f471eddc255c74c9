// HostManager: the elastic driver's view of its hosts: which exist (from the discovery script or
// the fixed -H list), in the order they were first seen, how many slots each has, and which hosts
// and slots rest after failures.
//
// The failure rule (docs/elastic.md, "How the driver works"):
//   1. A worker that fails makes its slot rest; the host's other slots keep working.
//   2. The whole host is blacklisted when none of its slots is left usable (so a one-slot host is
//      blacklisted on its first failure, as in Horovod), or when it has failed kHostFailureLimit
//      times since it was last (re)admitted: a host that keeps failing goes, one bad slot does not
//      take a healthy host with it.
//   3. A rest lasts the cooldown of --blacklist-cooldown-range MIN MAX: MIN seconds the first time
//      that slot (or host) is put out, doubling each time after, at most MAX. Without the flag a rest
//      lasts for the rest of the job (Horovod's default). When a host's blacklisting ends, its slots
//      come back with it.
// A host the discovery script stops listing keeps its record (first-seen order, failures, rest),
// so dropping and relisting it neither resets its cooldown nor makes it "new".
//
// Not thread-safe: the driver's loop owns it. Time is passed in, so tests need no clock.
//
//   HostManager hosts({std::make_pair(seconds(30), seconds(300))});
//   HostChange change = hosts.Update({{"h1", 2}, {"h2", 1}}, now);
//   FailureOutcome out = hosts.RecordFailure("h2", 0, now);  // out.host_blacklisted
//   for (const UsableHost& h : hosts.Usable()) ...
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dadtrun/hosts.h"

namespace dadt {
namespace dadtrun {

using ElasticClock = std::chrono::steady_clock;

// Rule 2's count of failures.
inline constexpr int kHostFailureLimit = 3;

struct UsableHost {
  std::string host;
  int64_t first_seen = 0;  // 0, 1, 2, ... in the order hosts were first seen
  std::vector<int> slots;  // usable slot indices, ascending
};

// What became usable or unusable, for a reason other than a failure.
struct HostChange {
  std::vector<HostSlots> added;        // new hosts, or back after their cooldown (usable slots)
  std::vector<std::string> removed;    // no longer listed
  bool more_slots = false;             // an existing host got usable slots (listed, or a rest ended)
  bool fewer_slots = false;            // an existing host lost listed slots
  bool any() const { return !added.empty() || !removed.empty() || more_slots || fewer_slots; }
  // "added", "removed" or "mixed" (the contract's notice kinds); "" when nothing changed.
  std::string Kind() const;
};

struct FailureOutcome {
  bool host_blacklisted = false;
  bool forever = false;  // no --blacklist-cooldown-range
  ElasticClock::time_point until;   // when the slot (or the whole host) is usable again
  std::chrono::seconds cooldown{0};
};

class HostManager {
 public:
  using Cooldown = std::optional<std::pair<std::chrono::seconds, std::chrono::seconds>>;
  explicit HostManager(Cooldown cooldown) : cooldown_(cooldown) {}

  // The hosts listed now (from one discovery run, or the fixed list once). Also ends the rests
  // that are over by `now` (as ExpireRests).
  HostChange Update(const std::vector<HostSlots>& listed, ElasticClock::time_point now);
  // Ends the rests that are over by `now`; what came back.
  HostChange ExpireRests(ElasticClock::time_point now);

  // A worker on `host`, slot `slot`, failed at `now`.
  FailureOutcome RecordFailure(const std::string& host, int slot, ElasticClock::time_point now);

  // Listed, not blacklisted hosts with at least one usable slot, in first-seen order.
  std::vector<UsableHost> Usable() const;
  bool IsUsable(const std::string& host, int slot) const;
  int UsableSlotCount() const;
  // First-seen index of a host ever seen, else -1.
  int64_t FirstSeen(const std::string& host) const;

 private:
  struct Record {
    int64_t first_seen = 0;
    int slots = 0;             // as listed now; 0 when not listed
    bool listed = false;
    int failures = 0;          // since last (re)admitted: rule 2
    int blacklistings = 0;     // times the host was put out: its next cooldown
    std::optional<ElasticClock::time_point> blacklisted_until;  // time_point::max(): forever
    std::map<int, int> slot_rests_count;                          // slot -> times it rested
    std::map<int, ElasticClock::time_point> resting;              // slot -> until
  };

  std::chrono::seconds CooldownFor(int times) const;  // times >= 1
  bool SlotUsable(const Record& r, int slot) const;
  int UsableSlots(const Record& r) const;

  Cooldown cooldown_;
  std::map<std::string, Record> hosts_;
  int64_t next_first_seen_ = 0;
};

}  // namespace dadtrun
}  // namespace dadt
