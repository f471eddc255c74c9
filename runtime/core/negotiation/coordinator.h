// Coordinator: rank 0's negotiation logic. Pure state machine, no I/O, so it is unit-tested with
// any number of simulated ranks.
//
// Protocol, per tensor name:
//  1. Each rank submits a Request (directly, or as a CachedRef resolved through the ResponseCache).
//  2. When every rank that has not called join() has submitted the name, the tensor is ready. The
//     coordinator checks that op, dtype, shape, reduce op, scale factors, root rank and device agree
//     across ranks; a disagreement becomes an error Response naming the tensor, the ranks and what
//     differed, delivered to every rank.
//  3. Ready tensors are released as one ordered ResponseList, fused by the FusionPlanner. Release
//     happens at once when nothing else is partly submitted (a lone small allreduce never waits a
//     cycle), and otherwise when the oldest ready tensor has waited one cycle time or the ready
//     bytes reach the fusion threshold, so tensors arriving close together share a collective.
//  4. join(): a joined rank counts as having submitted every allreduce (it contributes zeros);
//     when all ranks have joined, a Join response carries the last rank to join.
//  5. Shutdown from any rank ends the job for every rank (pending work fails), as in Horovod, so a
//     rank that exits never leaves the others waiting forever.
//  Process sets (docs/process-sets.md): a request names its set (Request::process_set_id); the
//     same name in two sets is two tensors, ready when every member of its set has submitted it.
//     A request from a rank outside its set, or for a set not registered, becomes an error
//     response for that set and name. join() counts for the global set (id 0) only. Adds and
//     removes of sets are requests on the global set, ready like a barrier; released, they change
//     the coordinator's table (ReleaseSetOp), and every rank applies them in list order.
//  Point to point: a peer exchange is matched by pair as it arrives (peer_matcher.h), not by the
//     table; a neighbor allgather is a collective of every member whose graph is validated.
//  6. Stalls (stall_inspector.h): a name some ranks submitted and others (not joined) have not,
//     for DADT_STALL_CHECK_TIME_SECONDS, becomes a warning in the next ResponseList, which every
//     rank logs; past DADT_STALL_SHUTDOWN_TIME_SECONDS it becomes an abort naming the same.
// The other ranks' half of the protocol is WorkerNegotiator (worker_negotiator.h).
// Not thread-safe: owned by rank 0's loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/negotiation/message.h"
#include "runtime/core/negotiation/peer_matcher.h"
#include "runtime/core/process_sets.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/stall_inspector.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  Coordinator(int size, int64_t fusion_threshold_bytes, std::chrono::microseconds cycle_time,
              ResponseCache* cache);

  // Takes one rank's batch. Stale cached refs are queued for a resend request.
  void Receive(const RequestList& list, Clock::time_point now);
  void Add(const Request& request, Clock::time_point now);
  void RequestShutdown(int rank);

  // Decides what is released now. An empty list (no responses, no shutdown) means "nothing yet".
  ResponseList Compute(Clock::time_point now);
  // When Compute should run again even if no new request arrives; Clock::time_point::max() if never.
  Clock::time_point NextDeadline() const;

  // The coordinator's own table of process sets: the global set only at first; adds and removes
  // change it when they are released (in release order, which is the order every rank applies
  // them in, so its ids are every rank's). A request for a set not in it is an error. Replaces
  // the table (tests start from a table with sets).
  void set_process_sets(const ProcessSetTable& sets) { sets_ = sets; }
  const ProcessSetTable& process_sets() const { return sets_; }
  // Where "rank r ready" marks go (rank 0's timeline); may be null.
  void set_events(const timeline::EventStream* events) { events_ = events; }
  void set_fusion_threshold(int64_t bytes) { fusion_threshold_ = bytes; }
  // Switches the response cache on every rank at the next released list.
  void set_response_cache(bool on) { cache_toggle_ = on ? CacheToggle::kOn : CacheToggle::kOff; }
  void set_cycle_time(std::chrono::microseconds t) { cycle_time_ = t; }
  std::chrono::microseconds cycle_time() const { return cycle_time_; }
  size_t pending() const { return table_.size(); }
  // Watches for tensors some ranks submitted and others did not (stall_inspector.h); its warnings
  // and shutdowns go out in the ResponseLists that Compute returns. Off until this is called.
  void set_stall_options(const StallOptions& options);

 private:
  // A tensor is its process set and its name.
  using Key = std::pair<int32_t, std::string>;

  struct Pending {
    // Indexed by set rank: by_rank[i].rank == -1 until the set's i-th member submits (rank holds
    // the global rank, which errors name).
    std::vector<Request> by_rank;
    int submitted = 0;
    bool ready = false;
    Clock::time_point first_seen;  // when the first rank submitted it (stall inspector)

    // The request of the lowest rank that has submitted; the tensor's canonical description
    // once it is ready (every rank's agrees then). Null while no rank has submitted.
    const Request* FirstSubmitted() const;
  };

  // The global ranks of a set, ascending; null when the set is not registered.
  const std::vector<int>* Members(int32_t set_id) const;
  bool IsReady(const Key& key, const Pending& p) const;
  void CountReady(const Pending& p);
  void MarkReadyIfComplete(const Key& key, Pending& p, Clock::time_point now);
  Response BuildResponse(const Key& key, const Pending& p) const;
  std::string Validate(const Key& key, const Pending& p) const;
  // An add or remove of a process set (on the global set), ready and released now: checked
  // (agreement, then the table's own checks: ranks, duplicates, id 0) and applied to sets_. A
  // remove first fails the set's pending tensors, their error responses appended to `released`
  // (so they come before the remove).
  Response ReleaseSetOp(const Key& key, const Pending& p, std::vector<Response>* released);
  // Queues an error response for `request`'s set and name, released by the next Compute.
  void RefuseRequest(const Request& request, const std::string& why);
  bool GroupComplete(int32_t set_id, int64_t group_id) const;
  // Runs the stall inspector over the tensors not ready yet; fills list->stall_warning or abort.
  void CheckStalls(Clock::time_point now, ResponseList* list);

  int size_;
  int64_t fusion_threshold_;
  std::chrono::microseconds cycle_time_;
  ResponseCache* cache_;
  const timeline::EventStream* events_ = nullptr;

  ProcessSetTable sets_;
  PeerMatcher peers_;  // peer exchanges: matched by pair, not by the table below
  // Numbers the point-to-point responses (peer exchanges, neighbor allgathers) in release order;
  // the engines derive message tags from it (Response::root).
  int32_t p2p_sequence_ = 0;
  std::map<Key, Pending> table_;
  std::vector<Key> ready_;  // in the order tensors became ready
  std::vector<Response> refused_;  // error responses for requests that cannot be negotiated
  Clock::time_point oldest_ready_ = Clock::time_point::max();
  int64_t ready_bytes_ = 0;
  // (set id, group id) -> (members ready, group size): group ids are per set, since the front
  // ends derive them from member names, which two sets may share.
  std::map<std::pair<int32_t, int64_t>, std::pair<int, int>> group_ready_;

  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  bool join_pending_response_ = false;

  std::vector<ResendEntry> resend_;
  CacheToggle cache_toggle_ = CacheToggle::kUnchanged;
  int shutdown_rank_ = -1;
  std::unique_ptr<StallInspector> stall_;  // null: no stall check
};

}  // namespace core
}  // namespace dadt
