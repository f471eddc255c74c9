#include "runtime/core/process_sets.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace dadt {
namespace core {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

}  // namespace

int ProcessSet::SetRankOf(int global_rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end() || *it != global_rank) return -1;
  return static_cast<int>(it - ranks.begin());
}

std::string ProcessSet::Describe() const {
  return "process set " + std::to_string(id) + " (ranks " + RankList(ranks) + ")";
}

std::string RendezvousScope(const ProcessSet& set) {
  return "pset/" + std::to_string(set.seq) + "/";
}

backends::BackendOptions SetBackendOptions(const backends::BackendOptions& job,
                                           const ProcessSet& set) {
  backends::BackendOptions o = job;
  o.rank = set.set_rank;
  o.size = set.size();
  if (job.local_size == job.size) {  // the job is on one host, so is the set
    o.local_rank = set.set_rank;
    o.local_size = set.size();
    o.cross_rank = 0;
    o.cross_size = 1;
  } else {
    o.local_rank = 0;
    o.local_size = 1;
    o.cross_rank = set.set_rank;
    o.cross_size = set.size();
  }
  o.store_prefix = job.store_prefix + RendezvousScope(set);
  o.group_color = -1;
  o.member_ranks = set.ranks;
  o.member_tag = static_cast<int>(set.seq % 32768);  // MPI guarantees tags up to 32767
  return o;
}

ProcessSetTable::ProcessSetTable(int job_size, int my_rank)
    : job_size_(job_size), my_rank_(my_rank) {
  ProcessSet global;
  global.id = 0;
  for (int r = 0; r < job_size; ++r) global.ranks.push_back(r);
  global.set_rank = global.SetRankOf(my_rank);
  sets_.emplace(0, std::move(global));
}

StatusOr<int32_t> ProcessSetTable::Add(std::vector<int> ranks) {
  if (ranks.empty()) return InvalidArgument("a process set needs at least one rank");
  const std::string given = RankList(ranks);
  std::sort(ranks.begin(), ranks.end());
  for (int r : ranks) {
    if (r < 0 || r >= job_size_) {
      return InvalidArgument("process set ranks " + given + ": rank " + std::to_string(r) +
                             " is not in the job (ranks 0 to " + std::to_string(job_size_ - 1) +
                             ")");
    }
  }
  auto dup = std::adjacent_find(ranks.begin(), ranks.end());
  if (dup != ranks.end()) {
    return InvalidArgument("process set ranks " + given + ": rank " + std::to_string(*dup) +
                           " is listed more than once");
  }
  if (std::optional<int32_t> existing = FindByRanks(ranks)) {
    return InvalidArgument("duplicate process set: ranks " + RankList(ranks) + " are already " +
                           sets_.at(*existing).Describe());
  }
  ProcessSet set;
  set.id = NextId();
  set.seq = ++last_seq_;
  set.ranks = std::move(ranks);
  set.set_rank = set.SetRankOf(my_rank_);
  const int32_t id = set.id;
  sets_.emplace(id, std::move(set));
  return id;
}

Status ProcessSetTable::Remove(int32_t id) {
  if (id == 0) return InvalidArgument("the global process set (id 0) cannot be removed");
  if (sets_.erase(id) == 0) {
    return InvalidArgument("process set " + std::to_string(id) + " is not registered");
  }
  return Status::OK();
}

const ProcessSet* ProcessSetTable::Find(int32_t id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second;
}

std::optional<int32_t> ProcessSetTable::FindByRanks(std::vector<int> ranks) const {
  std::sort(ranks.begin(), ranks.end());
  for (const auto& [id, set] : sets_) {
    if (set.ranks == ranks) return id;
  }
  return std::nullopt;
}

int32_t ProcessSetTable::NextId() const {
  int32_t id = 1;
  for (auto it = sets_.upper_bound(0); it != sets_.end() && it->first == id; ++it) ++id;
  return id;
}

std::vector<int32_t> ProcessSetTable::ids() const {
  std::vector<int32_t> out;
  for (const auto& entry : sets_) out.push_back(entry.first);
  return out;
}

}  // namespace core
}  // namespace dadt
