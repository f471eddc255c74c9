// ResponseDispatcher: what every rank does with each Response of a ResponseList, in order.
//
// Per response:
//  1. Timeline: the end of the NEGOTIATE_<OP> phase of each of its tensors this rank holds (and
//     one CYCLE_START mark per non-empty list, when asked for).
//  2. Response cache (workers' replicas only; rank 0's Coordinator fills its own): the slots the
//     coordinator assigned are recorded against this rank's requests, before the response runs,
//     so every replica changes at the same point of the response stream.
//  3. Route (RouteFor): a CPU collective that moves data goes to a lane with this rank's entries
//     for it; an eager allreduce of CPU tensors runs here at once (its result came with the
//     response, so it touches no connection and need not wait); anything else -- join, barrier,
//     mismatch error, GPU, a process set's add or remove or collective -- is a fence: the lanes
//     drain first, then it runs here.
// A failure stops the list: the caller aborts the job, and the entries of responses not run yet
// stay in the map for it to fail.
//
// Where responses run is a ResponseRunner: LanesAndExecutor in the runtime, a recording fake in
// tests. Not thread-safe: owned by the loop thread (set_mark_cycles excepted).
//
//   LanesAndExecutor runner(lanes.get(), executor.get());
//   ResponseDispatcher dispatcher(&runner, &events, rank == 0 ? nullptr : &cache, on_executed);
//   Status s = dispatcher.Dispatch(list.responses, entries);   // non-OK: abort the job
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/core/executor.h"
#include "runtime/core/lanes.h"
#include "runtime/core/negotiation/message.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/set_backends.h"
#include "runtime/core/tensor_queue.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

enum class Route {
  kLane,            // on a lane, with this rank's entries
  kHere,            // on the loop thread now, while the lanes keep running
  kHereAfterLanes,  // a fence: on the loop thread once the lanes are idle
};
const char* RouteName(Route route);

// Where `response` runs, given whether there are lanes at all.
Route RouteFor(const Response& response, bool have_lanes);

// The places a response can run. Called from the loop thread only.
class ResponseRunner {
 public:
  virtual ~ResponseRunner() = default;
  virtual bool has_lanes() const = 0;
  // Hands `response` and the entries it consumes to a lane.
  virtual void RunOnLane(const Response& response, EntryMap entries) = 0;
  // Waits until the lanes are idle; their first failure, if any.
  virtual Status DrainLanes() = 0;
  // Runs `response` on this thread, consuming its entries from `entries`.
  virtual Status RunHere(const Response& response, EntryMap& entries) = 0;
};

// The runtime's runner: `lanes` (null when the loop thread runs everything), `executor` (the
// global set's) and `sets` (may be null: the global set only), which applies adds and removes of
// process sets and runs the other sets' responses.
class LanesAndExecutor final : public ResponseRunner {
 public:
  LanesAndExecutor(Lanes* lanes, Executor* executor, SetBackends* sets = nullptr)
      : lanes_(lanes), executor_(executor), sets_(sets) {}
  bool has_lanes() const override { return lanes_ != nullptr; }
  void RunOnLane(const Response& response, EntryMap entries) override;
  Status DrainLanes() override;
  Status RunHere(const Response& response, EntryMap& entries) override;

 private:
  Lanes* lanes_;
  Executor* executor_;
  SetBackends* sets_;
};

class ResponseDispatcher {
 public:
  // `events` and `replica` may be null (no timeline; rank 0, whose cache the coordinator fills).
  // `on_executed` (may be empty) sees each response once it ran, or once a lane has it (the
  // autotuner counts them; in steady state lanes finish responses as fast as they get them).
  ResponseDispatcher(ResponseRunner* runner, const timeline::EventStream* events,
                     ResponseCache* replica, std::function<void(const Response&)> on_executed);

  // Runs `responses` in order, consuming their entries; the first failure stops it.
  Status Dispatch(const std::vector<Response>& responses, EntryMap& entries);

  // One CYCLE_START instant per dispatched non-empty list (DADT_TIMELINE_MARK_CYCLES). Any thread.
  void set_mark_cycles(bool on) { mark_cycles_ = on; }

 private:
  void MarkNegotiated(const Response& response, const EntryMap& entries) const;
  void FillReplica(const Response& response, const EntryMap& entries);

  ResponseRunner* runner_;
  const timeline::EventStream* events_;
  ResponseCache* replica_;
  std::function<void(const Response&)> on_executed_;
  std::atomic<bool> mark_cycles_{false};
};

}  // namespace core
}  // namespace dadt
