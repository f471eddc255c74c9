// WorkerNegotiator: the worker's half of negotiation (every rank but 0), the mirror of rank 0's
// Coordinator. Pure state machine, no I/O: the loop thread feeds it and sends what it returns,
// so it is unit-tested without a network.
//
// Protocol, as seen from a worker:
//  1. Submit: each request the rank enqueues joins the next batch -- as a CachedRef (slot,
//     generation; eager data rides along) when this rank's response-cache replica holds the same
//     signature, else in full. The ref is remembered until the coordinator has used it.
//  2. TakeBatch: once per loop cycle, everything submitted since the last batch (and a shutdown
//     request, if any) goes to the coordinator as one RequestList.
//  3. Receive: before a ResponseList's responses run, its cache toggle is applied to the replica,
//     and each resend entry naming this rank (a ref the coordinator could not resolve because the
//     slot was reassigned) is answered with the full request, if the tensor is still pending.
//  4. The replica learns new slots from the responses themselves (ResponseDispatcher fills it, at
//     the same point of the response stream on every rank).
// Rank 0 has no WorkerNegotiator: its requests go straight into its Coordinator.
// Not thread-safe: owned by the loop thread.
//
//   WorkerNegotiator n(/*rank=*/1, &cache);
//   n.Submit(entry.request);
//   if (auto batch = n.TakeBatch()) channel->SendToCoordinator(SerializeRequestList(*batch));
//   if (auto again = n.Receive(list, entries)) channel->SendToCoordinator(...);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "runtime/core/negotiation/message.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/tensor_queue.h"

namespace dadt {
namespace core {

class WorkerNegotiator {
 public:
  // `cache` is this rank's replica; it outlives the negotiator.
  WorkerNegotiator(int rank, ResponseCache* cache);

  // Step 1: adds this rank's new request to the next batch.
  void Submit(const Request& request);
  // Asks the coordinator to end the job for every rank, with the next batch. Once.
  void RequestShutdown();
  // Step 2: the batch to send now, or nullopt when there is nothing to say.
  std::optional<RequestList> TakeBatch();

  // Step 3: applies `list`'s cache toggle and returns the full requests to send again for the
  // resend entries that name this rank and a tensor still in `pending` (nullopt: none).
  std::optional<RequestList> Receive(const ResponseList& list, const EntryMap& pending);

  // Refs sent and not yet resolved by a resend (a ref stays known while the coordinator may still
  // ask for it again).
  size_t refs_in_flight() const { return sent_refs_.size(); }

 private:
  static uint64_t RefKey(int32_t slot, uint32_t generation);

  const int rank_;
  ResponseCache* cache_;
  RequestList batch_;
  bool shutdown_requested_ = false;
  std::unordered_map<uint64_t, std::string> sent_refs_;  // (slot, generation) -> EntryKey
};

}  // namespace core
}  // namespace dadt
