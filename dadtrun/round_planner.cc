#include "dadtrun/round_planner.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace dadt {
namespace dadtrun {

std::string PlannedWorker::AssignmentValue() const {
  return std::to_string(rank) + " " + std::to_string(size) + " " + std::to_string(local_rank) + " " +
         std::to_string(local_size) + " " + std::to_string(cross_rank) + " " + std::to_string(cross_size);
}

RoundPlan PlanRound(const std::vector<UsableHost>& usable, const std::vector<LiveWorker>& live, int min_np,
                    int max_np) {
  RoundPlan plan;
  // Rule 1.
  std::map<std::string, const UsableHost*> by_host;
  for (const UsableHost& h : usable) by_host[h.host] = &h;
  auto usable_slot = [&by_host](const std::string& host, int slot) {
    auto it = by_host.find(host);
    return it != by_host.end() && std::binary_search(it->second->slots.begin(), it->second->slots.end(), slot);
  };
  struct Candidate {
    std::string host;
    int slot = 0;
    std::string id;
    int group = 0;  // 0 survivor, 1 live not run yet, 2 new
  };
  std::vector<Candidate> candidates;
  std::map<std::string, std::vector<int>> taken;  // host -> slots with a live worker
  std::map<std::string, bool> has_survivor;
  for (const LiveWorker& w : live) {
    if (!usable_slot(w.host, w.slot) ||
        std::count(taken[w.host].begin(), taken[w.host].end(), w.slot) > 0) {  // two on one slot: keep the first
      plan.removed.push_back(w.id);
      continue;
    }
    taken[w.host].push_back(w.slot);
    candidates.push_back({w.host, w.slot, w.id, w.survivor ? 0 : 1});
    if (w.survivor) has_survivor[w.host] = true;
  }
  for (const UsableHost& h : usable) {
    for (int s : h.slots) {
      if (std::count(taken[h.host].begin(), taken[h.host].end(), s) == 0) candidates.push_back({h.host, s, "", 2});
    }
  }
  plan.available = static_cast<int>(candidates.size());
  if (plan.available < min_np) {
    plan.removed.clear();
    return plan;
  }
  plan.enough = true;
  // Rule 2: host order.
  std::vector<const UsableHost*> hosts;
  for (const UsableHost& h : usable) hosts.push_back(&h);
  std::stable_sort(hosts.begin(), hosts.end(), [&has_survivor](const UsableHost* a, const UsableHost* b) {
    return std::make_tuple(!has_survivor[a->host], a->first_seen) <
           std::make_tuple(!has_survivor[b->host], b->first_seen);
  });
  std::map<std::string, int> host_order;
  for (size_t i = 0; i < hosts.size(); ++i) host_order[hosts[i]->host] = static_cast<int>(i);
  // Rule 3: who is taken.
  std::sort(candidates.begin(), candidates.end(), [&host_order](const Candidate& a, const Candidate& b) {
    return std::make_tuple(a.group, host_order[a.host], a.slot) < std::make_tuple(b.group, host_order[b.host], b.slot);
  });
  const size_t n = max_np > 0 ? std::min<size_t>(candidates.size(), static_cast<size_t>(max_np)) : candidates.size();
  for (size_t i = n; i < candidates.size(); ++i) {
    if (!candidates[i].id.empty()) plan.removed.push_back(candidates[i].id);
  }
  candidates.resize(n);
  // Rule 4: ranks and geometry.
  std::sort(candidates.begin(), candidates.end(), [&host_order](const Candidate& a, const Candidate& b) {
    return std::make_tuple(host_order[a.host], a.group != 0, a.slot) <
           std::make_tuple(host_order[b.host], b.group != 0, b.slot);
  });
  std::map<std::string, int> per_host;
  for (const Candidate& c : candidates) ++per_host[c.host];
  std::map<std::string, int> seen_on_host;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    PlannedWorker w;
    w.host = c.host;
    w.slot = c.slot;
    w.worker_id = c.id;
    w.rank = static_cast<int>(i);
    w.size = static_cast<int>(n);
    w.local_rank = seen_on_host[c.host]++;
    w.local_size = per_host[c.host];
    for (const UsableHost* h : hosts) {
      auto count = per_host.find(h->host);
      if (count == per_host.end() || count->second <= w.local_rank) continue;
      if (host_order[h->host] < host_order[c.host]) ++w.cross_rank;
      ++w.cross_size;
    }
    plan.workers.push_back(w);
  }
  return plan;
}

}  // namespace dadtrun
}  // namespace dadt
