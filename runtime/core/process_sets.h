// ProcessSetTable: the process sets a rank knows of (docs/process-sets.md), by id.
//
// Id 0 is the global set (every rank of the job); it exists for the table's whole life and cannot
// be removed. Every rank applies the same adds and removes in the same order (they are negotiated
// operations on the global set, released in the one ResponseList stream), so every rank's table
// assigns the same ids: an add takes the lowest free id >= 1 (ids of removed sets are reused, as
// in Horovod's ProcessSetTable), and a registration sequence number that is never reused and
// names the set's rendezvous scope (RendezvousScope), so that keys of a removed set are never
// read by a later set that reuses its id.
//
//   ProcessSetTable table(/*job_size=*/4, /*my_rank=*/1);
//   StatusOr<int32_t> id = table.Add({3, 1});     // id 1, ranks {1, 3}
//   table.Find(*id)->set_rank;                    // 0: rank 1 is the set's first member
//   table.Remove(*id);
//
// Not thread-safe: the owner serialises access (the loop thread applies adds and removes).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/common/status.h"

namespace dadt {
namespace core {

struct ProcessSet {
  int32_t id = 0;
  int64_t seq = 0;         // registration sequence number; 0 for the global set
  std::vector<int> ranks;  // global ranks, ascending; a member's set rank is its index here
  int set_rank = -1;       // this process's rank within the set; -1 when not a member

  int size() const { return static_cast<int>(ranks.size()); }
  bool included() const { return set_rank >= 0; }
  // The set rank of `global_rank`, or -1 when it is not a member.
  int SetRankOf(int global_rank) const;
  // "process set 2 (ranks [1, 3])": how errors name the set.
  std::string Describe() const;
};

// "pset/<seq>/": the rendezvous prefix of the set's data-plane keys, inside the incarnation's
// scope (runtime/common/rendezvous/scoped_store.h).
std::string RendezvousScope(const ProcessSet& set);

// The options a member creates the set's data-plane Backend with, from the job's: rank and size
// within the set, the job's store and timeouts, and the store prefix
// `job.store_prefix + RendezvousScope(set)`, so that only the members meet and their keys are the
// set's registration's alone. Geometry: in a job on one host the set is on one host too (local =
// set rank and size); otherwise the set is treated as spread over hosts (one rank per host), which
// makes Gloo bind to the hostname; a per-set hierarchical plane needs each rank's host, which the
// table does not know yet. Only for a member (`set.included()`). Engines that meet through the
// store (Gloo) use the prefix; MPI uses member_ranks and member_tag (the seq) for
// MPI_Comm_create_group.
backends::BackendOptions SetBackendOptions(const backends::BackendOptions& job,
                                           const ProcessSet& set);

class ProcessSetTable {
 public:
  // A job of `job_size` ranks seen from `my_rank`; holds the global set (id 0) only.
  ProcessSetTable(int job_size, int my_rank);

  // Registers a set of the given global ranks (any order). InvalidArgument, naming what is wrong,
  // for an empty list, a rank outside [0, job_size), a rank listed twice, or the ranks of a set
  // already registered (the global set included). Returns the id.
  StatusOr<int32_t> Add(std::vector<int> ranks);
  // Unregisters `id`; its id becomes free. InvalidArgument for id 0 or an id not registered.
  Status Remove(int32_t id);

  // The set with this id, or null.
  const ProcessSet* Find(int32_t id) const;
  // The id of the set with exactly these global ranks (any order), if registered.
  std::optional<int32_t> FindByRanks(std::vector<int> ranks) const;
  // The id the next Add would assign.
  int32_t NextId() const;
  // Registered ids, ascending (0 first).
  std::vector<int32_t> ids() const;
  int job_size() const { return job_size_; }

 private:
  int job_size_;
  int my_rank_;
  int64_t last_seq_ = 0;
  std::map<int32_t, ProcessSet> sets_;
};

}  // namespace core
}  // namespace dadt
