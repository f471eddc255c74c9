// PlanRound: which workers make up the next elastic round, and their geometry. A pure function of
// the usable slots, the live workers and --min-np/--max-np, so every ordering rule is unit-tested.
//
// Rules (the launcher <-> worker contract, docs/elastic.md):
//   1. Candidates: every live worker on a usable slot keeps it; every usable slot without a live
//      worker can take a new one. A live worker on a slot that is no longer usable (host dropped
//      by the discovery script, or blacklisted) is removed.
//   2. Hosts are ordered survivors first: hosts with a worker that ran in an earlier round, by
//      first-seen; then the others, by first-seen. Rank 0 is thereby on the oldest surviving host,
//      and it is a survivor, so the state the workers sync from rank 0 is never a fresh worker's.
//   3. Up to --max-np workers are taken: survivors, then live workers that have not run yet, then
//      new ones; each group in host order, then by slot. Live workers left out are removed.
//   4. Ranks: host by host in that order; within a host survivors first, then by slot. local_rank
//      counts the workers before it on its host; cross_rank the hosts before its own that have a
//      worker with the same local_rank; cross_size how many hosts have one (Horovod's definitions,
//      as dadtrun places ranks for a normal launch).
// When fewer than --min-np candidates exist the plan says so (enough = false) and assigns nothing.
//
//   RoundPlan plan = PlanRound(hosts.Usable(), live, /*min_np=*/2, /*max_np=*/0);
//   if (plan.enough) for (const PlannedWorker& w : plan.workers) ...  // w.worker_id empty: spawn
#pragma once

#include <string>
#include <vector>

#include "dadtrun/host_manager.h"

namespace dadt {
namespace dadtrun {

struct LiveWorker {
  std::string id;  // DADT_ELASTIC_WORKER_ID
  std::string host;
  int slot = 0;
  bool survivor = false;  // was in a published round already
};

struct PlannedWorker {
  std::string host;
  int slot = 0;
  std::string worker_id;  // empty: a new worker is to be spawned on this slot
  int rank = 0, size = 0, local_rank = 0, local_size = 0, cross_rank = 0, cross_size = 0;
  // "rank size local_rank local_size cross_rank cross_size": the contract's assignment value.
  std::string AssignmentValue() const;
};

struct RoundPlan {
  bool enough = false;
  int available = 0;  // candidates (rule 1), before --max-np
  std::vector<PlannedWorker> workers;     // by rank; empty unless enough
  std::vector<std::string> removed;       // live worker ids not in the round (rules 1 and 3)
};

// `max_np` 0: unbounded.
RoundPlan PlanRound(const std::vector<UsableHost>& usable, const std::vector<LiveWorker>& live, int min_np,
                    int max_np);

}  // namespace dadtrun
}  // namespace dadt
