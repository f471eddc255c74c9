#include "runtime/core/negotiation/worker_negotiator.h"

#include <utility>

namespace dadt {
namespace core {

WorkerNegotiator::WorkerNegotiator(int rank, ResponseCache* cache) : rank_(rank), cache_(cache) {
  batch_.rank = rank;
}

uint64_t WorkerNegotiator::RefKey(int32_t slot, uint32_t generation) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(slot)) << 32) | generation;
}

void WorkerNegotiator::Submit(const Request& request) {
  if (auto ref = cache_->Lookup(request)) {
    ref->eager = request.eager;
    ref->data = request.data;
    sent_refs_[RefKey(ref->slot, ref->generation)] = EntryKey(request);
    batch_.cached.push_back(std::move(*ref));
  } else {
    batch_.requests.push_back(request);
  }
}

void WorkerNegotiator::RequestShutdown() {
  if (shutdown_requested_) return;
  shutdown_requested_ = true;
  batch_.shutdown = true;
}

std::optional<RequestList> WorkerNegotiator::TakeBatch() {
  if (batch_.requests.empty() && batch_.cached.empty() && !batch_.shutdown) return std::nullopt;
  RequestList out;
  out.rank = rank_;
  std::swap(out, batch_);
  return out;
}

std::optional<RequestList> WorkerNegotiator::Receive(const ResponseList& list,
                                                     const EntryMap& pending) {
  if (list.cache != CacheToggle::kUnchanged) cache_->SetActive(list.cache == CacheToggle::kOn);
  RequestList again;
  again.rank = rank_;
  for (const ResendEntry& resend : list.resend) {
    if (resend.rank != rank_) continue;
    auto it = sent_refs_.find(RefKey(resend.slot, resend.generation));
    if (it == sent_refs_.end()) continue;
    auto e = pending.find(it->second);
    sent_refs_.erase(it);
    if (e == pending.end()) continue;
    again.requests.push_back(e->second.request);
  }
  if (again.requests.empty()) return std::nullopt;
  return again;
}

}  // namespace core
}  // namespace dadt
