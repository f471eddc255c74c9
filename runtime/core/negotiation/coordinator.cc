#include "runtime/core/negotiation/coordinator.h"

#include <algorithm>
#include <sstream>

#include "runtime/common/logging.h"
#include "runtime/backends/adasum.h"
#include "runtime/core/eager_reduce.h"
#include "runtime/core/fusion_planner.h"
#include "runtime/core/negotiation/validation.h"

namespace dadt {
namespace core {

Coordinator::Coordinator(int size, int64_t fusion_threshold_bytes,
                         std::chrono::microseconds cycle_time, ResponseCache* cache)
    : size_(size),
      fusion_threshold_(fusion_threshold_bytes),
      cycle_time_(cycle_time),
      cache_(cache),
      sets_(size, /*my_rank=*/0),
      peers_(size),
      joined_(size, false) {}

const std::vector<int>* Coordinator::Members(int32_t set_id) const {
  const ProcessSet* set = sets_.Find(set_id);
  return set == nullptr ? nullptr : &set->ranks;
}

void Coordinator::RefuseRequest(const Request& request, const std::string& why) {
  Response resp;
  resp.type = Response::Type::kError;
  resp.names = {request.name};
  resp.process_set_id = request.process_set_id;
  resp.error = OpTypeName(request.op) + std::string(" of tensor ") +
               QuotedTensor(request.process_set_id, request.name) + " from rank " +
               std::to_string(request.rank) + " cannot be negotiated: " + why;
  refused_.push_back(std::move(resp));
}

void Coordinator::Receive(const RequestList& list, Clock::time_point now) {
  for (const Request& r : list.requests) Add(r, now);
  for (const CachedRef& ref : list.cached) {
    const Request* cached = cache_ ? cache_->Resolve(ref) : nullptr;
    if (cached == nullptr) {
      resend_.push_back(ResendEntry{list.rank, ref.slot, ref.generation});
      continue;
    }
    Request r = *cached;
    r.rank = list.rank;
    r.eager = ref.eager;
    r.data = ref.data;
    Add(r, now);
  }
  if (list.shutdown) RequestShutdown(list.rank);
}

void Coordinator::RequestShutdown(int rank) {
  if (shutdown_rank_ < 0) shutdown_rank_ = rank;
}

void Coordinator::Add(const Request& request, Clock::time_point now) {
  if (request.rank < 0 || request.rank >= size_) {
    DADT_LOG(ERROR) << "dropping request for '" << request.name << "' from invalid rank "
                    << request.rank;
    return;
  }
  if (request.op == OpType::kJoin) {
    if (!joined_[request.rank]) {
      joined_[request.rank] = true;
      ++joined_count_;
    }
    last_joined_ = request.rank;
    if (joined_count_ == size_) join_pending_response_ = true;
    for (auto& kv : table_) MarkReadyIfComplete(kv.first, kv.second, now);
    return;
  }
  if (request.op == OpType::kPeerExchange) {
    peers_.Add(request, now);
    if (stall_) stall_->OnPending(now);
    return;
  }
  const int32_t set_id = request.process_set_id;
  const std::vector<int>* members = Members(set_id);
  if (members == nullptr) {
    RefuseRequest(request, "process set " + std::to_string(set_id) + " is not registered");
    return;
  }
  auto at = std::lower_bound(members->begin(), members->end(), request.rank);
  if (at == members->end() || *at != request.rank) {
    RefuseRequest(request, "rank " + std::to_string(request.rank) + " is not a member of process set " +
                               std::to_string(set_id));
    return;
  }
  const size_t index = static_cast<size_t>(at - members->begin());
  const Key key{set_id, request.name};
  Pending& p = table_[key];
  if (p.by_rank.empty()) {
    p.by_rank.resize(members->size());
    for (auto& r : p.by_rank) r.rank = -1;
    p.first_seen = now;
    if (stall_) stall_->OnPending(now);
  }
  if (p.by_rank[index].rank >= 0) {
    DADT_LOG(ERROR) << "rank " << request.rank << " submitted " << QuotedTensor(set_id, request.name)
                    << " twice";
    return;
  }
  p.by_rank[index] = request;
  ++p.submitted;
  if (events_ && events_->enabled()) {
    events_->Emit(timeline::Event{timeline::NowMicros(), timeline::Phase::kInstant,
                                  timeline::TensorRow(OpTypeName(request.op), request.name),
                                  timeline::RankReadyActivity(request.rank),
                                  timeline::ReadyRankArgs(request.rank)});
  }
  MarkReadyIfComplete(key, p, now);
}

const Request* Coordinator::Pending::FirstSubmitted() const {
  for (const Request& r : by_rank) {
    if (r.rank >= 0) return &r;
  }
  return nullptr;
}

// Adds a ready tensor to the fusion and group bookkeeping.
void Coordinator::CountReady(const Pending& p) {
  const Request* first = p.FirstSubmitted();
  if (first == nullptr) return;
  ready_bytes_ += first->ByteSize();
  if (first->group_id >= 0) {
    auto& g = group_ready_[{first->process_set_id, first->group_id}];
    ++g.first;
    g.second = first->group_size;
  }
}

bool Coordinator::IsReady(const Key& key, const Pending& p) const {
  const bool global = key.first == 0;  // join() counts for the global set only
  // While a rank has joined, an op other than allreduce and barrier fails at once (BuildResponse
  // says why) on the ranks that submitted it: waiting for the others could wait forever, since
  // ranks that ran different numbers of unnamed collectives name it differently.
  if (global && joined_count_ > 0) {
    for (const Request& r : p.by_rank) {
      if (r.rank >= 0) {
        if (r.op != OpType::kAllreduce && r.op != OpType::kBarrier) return true;
        break;
      }
    }
  }
  for (size_t i = 0; i < p.by_rank.size(); ++i) {
    // In the global set, set rank i is global rank i.
    if (p.by_rank[i].rank < 0 && !(global && joined_[i])) return false;
  }
  return p.submitted > 0;
}

void Coordinator::MarkReadyIfComplete(const Key& key, Pending& p, Clock::time_point now) {
  if (p.ready || !IsReady(key, p)) return;
  p.ready = true;
  ready_.push_back(key);
  oldest_ready_ = std::min(oldest_ready_, now);
  CountReady(p);
}

bool Coordinator::GroupComplete(int32_t set_id, int64_t group_id) const {
  auto it = group_ready_.find({set_id, group_id});
  return it != group_ready_.end() && it->second.first >= it->second.second;
}

std::string Coordinator::Validate(const Key& key, const Pending& p) const {
  std::vector<int> joined;
  if (key.first == 0) {
    for (int r = 0; r < size_; ++r) {
      if (joined_[r]) joined.push_back(r);
    }
  }
  return ValidateRequests(key.first, key.second, p.by_rank, joined);
}

Response Coordinator::BuildResponse(const Key& key, const Pending& p) const {
  Response resp;
  resp.names = {key.second};
  resp.process_set_id = key.first;
  std::string error = Validate(key, p);
  if (!error.empty()) {
    resp.type = Response::Type::kError;
    resp.error = error;
    return resp;
  }
  const Request* first = p.FirstSubmitted();
  resp.type = ResponseTypeFor(first->op);
  resp.dtype = first->dtype;
  resp.reduce_op = first->reduce_op;
  resp.prescale = first->prescale;
  resp.postscale = first->postscale;
  resp.root = first->root;
  resp.device = first->device;
  resp.total_bytes = first->ByteSize();
  switch (first->op) {
    case OpType::kAllreduce:
      resp.sizes = {NumElements(first->shape)};
      if (key.first != 0 || joined_count_ == 0) {
        TryEagerReduce(p.by_rank, static_cast<int>(p.by_rank.size()), &resp);
      }
      break;
    case OpType::kAllgather:
      for (const Request& r : p.by_rank) resp.sizes.push_back(r.shape.empty() ? 1 : r.shape[0]);
      break;
    case OpType::kAlltoall:
      for (const Request& r : p.by_rank) resp.sizes.insert(resp.sizes.end(), r.splits.begin(), r.splits.end());
      break;
    default:
      break;
  }
  return resp;
}

Response Coordinator::ReleaseSetOp(const Key& key, const Pending& p,
                                   std::vector<Response>* released) {
  Response resp;
  resp.names = {key.second};
  resp.error = Validate(key, p);
  const Request& first = *p.FirstSubmitted();
  resp.type = resp.error.empty() ? ResponseTypeFor(first.op) : Response::Type::kError;
  if (!resp.error.empty()) return resp;
  if (first.op == OpType::kProcessSetAdd) {
    StatusOr<int32_t> id = sets_.Add(std::vector<int>(first.splits.begin(), first.splits.end()));
    if (!id.ok()) {
      resp.type = Response::Type::kError;
      resp.error = id.status().message();
      return resp;
    }
    resp.root = *id;
    for (int r : sets_.Find(*id)->ranks) resp.sizes.push_back(r);
    return resp;
  }
  const int32_t id = first.root;
  if (id == 0) {
    resp.type = Response::Type::kError;
    resp.error = "the global process set (id 0) cannot be removed";
    return resp;
  }
  resp.root = id;
  resp.sizes = {sets_.Find(id) != nullptr ? 1 : 0};
  if (resp.sizes[0] == 0) return resp;
  // The set's tensors still pending fail on the members that submitted them, before the remove.
  for (auto it = table_.lower_bound(Key{id, ""}); it != table_.end() && it->first.first == id;) {
    std::vector<int64_t> submitted;
    for (const Request& r : it->second.by_rank) {
      if (r.rank >= 0) submitted.push_back(r.rank);
    }
    Response failed;
    failed.type = Response::Type::kError;
    failed.names = {it->first.second};
    failed.process_set_id = id;
    failed.error = "process set " + std::to_string(id) + " was removed while tensor '" +
                   it->first.second + "' was in flight (submitted by ranks " +
                   RankListString(submitted) + ")";
    released->push_back(std::move(failed));
    it = table_.erase(it);
  }
  (void)sets_.Remove(id);
  return resp;
}

ResponseList Coordinator::Compute(Clock::time_point now) {
  ResponseList list;
  list.resend.swap(resend_);
  if (shutdown_rank_ >= 0) {
    list.outcome = Outcome::kShutdown;
    list.reason = "dadt was shut down by rank " + std::to_string(shutdown_rank_) +
                  " while this collective was pending";
    list.cause_rank = shutdown_rank_;
    return list;
  }
  if (stall_ && now >= stall_->next_check()) {
    CheckStalls(now, &list);
    if (list.outcome == Outcome::kAbort) return list;
  }
  const bool cache_on = cache_toggle_ == CacheToggle::kOn;
  if (cache_toggle_ != CacheToggle::kUnchanged && cache_ && cache_->enabled() != cache_on) {
    cache_->SetActive(cache_on);  // before any assignment below
    list.cache = cache_toggle_;
  }
  cache_toggle_ = CacheToggle::kUnchanged;
  const bool everything_ready = ready_.size() == table_.size();
  const bool release = !ready_.empty() &&
                       (everything_ready || now - oldest_ready_ >= cycle_time_ ||
                        (fusion_threshold_ > 0 && ready_bytes_ >= fusion_threshold_));
  if (release) {
    std::vector<Response> ready;
    std::vector<Key> held;  // grouped tensors whose group is not complete yet
    for (const Key& key : ready_) {
      auto it = table_.find(key);
      if (it == table_.end()) continue;  // failed by the remove of its set, earlier in this loop
      const Pending& p = it->second;
      const Request& canonical = *p.FirstSubmitted();  // ready: some rank has submitted
      const int64_t group = canonical.group_id;
      if (group >= 0 && !GroupComplete(key.first, group)) {
        held.push_back(key);
        continue;
      }
      const bool set_op =
          canonical.op == OpType::kProcessSetAdd || canonical.op == OpType::kProcessSetRemove;
      Response resp = set_op ? ReleaseSetOp(key, p, &ready) : BuildResponse(key, p);
      if (resp.type == Response::Type::kNeighborAllgather) resp.root = p2p_sequence_++ & 0x3fffffff;
      if (resp.type != Response::Type::kError && cache_ && cache_->enabled()) {
        if (canonical.Cacheable()) {
          // Already cached with this signature: keep its slot and generation (no churn).
          auto existing = cache_->Lookup(canonical);
          CachedRef ref = existing ? *existing : cache_->Assign(canonical);
          if (existing) cache_->Resolve(ref);  // marks it recently used
          resp.cache_slots = {ref.slot};
          resp.cache_generations = {ref.generation};
        }
      }
      table_.erase(it);
      ready.push_back(std::move(resp));
    }
    // Recompute bookkeeping for what stays held.
    group_ready_.clear();
    ready_bytes_ = 0;
    ready_.clear();
    for (const Key& key : held) {
      auto it = table_.find(key);
      if (it == table_.end()) continue;  // failed by a remove
      CountReady(it->second);
      ready_.push_back(key);
    }
    oldest_ready_ = ready_.empty() ? Clock::time_point::max() : now;
    list.responses = PlanFusion(std::move(ready), fusion_threshold_);
    for (Response& resp : list.responses) {
      // Adasum swaps tensors pair by pair (Backend::Exchange): its tags are point-to-point
      // sequence numbers, one block per fused response.
      if (resp.type != Response::Type::kAllreduce || resp.reduce_op != ReduceOp::kAdasum) continue;
      resp.root = p2p_sequence_ & 0x3fffffff;
      p2p_sequence_ = (p2p_sequence_ + static_cast<int32_t>(backends::AdasumSequences(size_))) &
                      0x3fffffff;
    }
  }
  if (peers_.HasReleasable()) {
    std::vector<Response> pairs = peers_.Take(&p2p_sequence_);
    list.responses.insert(list.responses.end(), std::make_move_iterator(pairs.begin()),
                          std::make_move_iterator(pairs.end()));
  }
  if (!refused_.empty()) {
    list.responses.insert(list.responses.begin(), std::make_move_iterator(refused_.begin()),
                          std::make_move_iterator(refused_.end()));
    refused_.clear();
  }
  // The table is ordered by set: nothing of the global set is pending when its first key is not.
  const bool global_idle = table_.empty() || table_.begin()->first.first != 0;
  if (join_pending_response_ && global_idle) {
    Response join;
    join.type = Response::Type::kJoin;
    join.last_joined_rank = last_joined_;
    list.responses.push_back(join);
    join_pending_response_ = false;
    std::fill(joined_.begin(), joined_.end(), false);
    joined_count_ = 0;
  }
  return list;
}

Coordinator::Clock::time_point Coordinator::NextDeadline() const {
  // Errors and matched peer exchanges go out at once.
  if (!refused_.empty() || peers_.HasReleasable()) return Clock::now();
  const auto stall = stall_ ? stall_->next_check() : Clock::time_point::max();
  if (ready_.empty()) return stall;
  return std::min(stall, oldest_ready_ + cycle_time_);
}

void Coordinator::set_stall_options(const StallOptions& options) {
  // One rank never waits for another.
  stall_ = options.enabled && size_ > 1 ? std::make_unique<StallInspector>(options) : nullptr;
  if (stall_ && !table_.empty()) stall_->OnPending(Clock::now());
}

void Coordinator::CheckStalls(Clock::time_point now, ResponseList* list) {
  std::vector<PendingTensor> waiting;
  for (const auto& [key, p] : table_) {
    if (p.ready) continue;
    const std::string name =
        key.first == 0 ? key.second : key.second + " (process set " + std::to_string(key.first) + ")";
    PendingTensor t{name, "", p.first_seen, {}, {}};
    const std::vector<int>* members = Members(key.first);
    for (size_t i = 0; i < p.by_rank.size(); ++i) {
      const int r = members != nullptr ? (*members)[i] : static_cast<int>(i);
      if (p.by_rank[i].rank >= 0) {
        if (t.op.empty()) t.op = OpTypeName(p.by_rank[i].op);
        t.submitted.push_back(r);
      } else if (!(key.first == 0 && joined_[r])) {
        t.missing.push_back(r);
      }
    }
    waiting.push_back(std::move(t));
  }
  peers_.AppendWaiting(&waiting);
  StallReport report = stall_->Check(waiting, now);
  list->stall_warning = std::move(report.warning);
  if (!report.shutdown.empty()) {
    list->outcome = Outcome::kAbort;
    list->reason = std::move(report.shutdown);
  }
}

}  // namespace core
}  // namespace dadt
