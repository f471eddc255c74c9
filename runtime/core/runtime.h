// Runtime: the per-process engine, a thin owner of the loop. One object owns everything: the
// tensor queue, the handles, the response cache, the negotiation half of its rank (the
// Coordinator on rank 0, a WorkerNegotiator elsewhere), the response dispatcher, the control
// transport, the backend and the one loop thread. There is no other global state, so tests run
// several ranks as threads in one process. Start settles and connects the engines
// (engine_setup.h); Enqueue checks entries (entry_checks.h) and queues them.
//
// Threading (docs/thread_model.md): framework threads call Enqueue, the timeline and fusion-knob
// setters and the HandleTable; only the loop thread touches negotiation state, the backend and
// the entries it is executing. Methods that may run only there are named `...FromLoop` and check
// it in debug builds (loop_thread.h).
//
// One loop cycle (RunFromLoop):
//  1. sleep until an entry, a message, the coordinator's deadline or a probe is due (LoopPoller);
//  2. drain the TensorQueue: eager payloads attached, requests to the Coordinator (rank 0) or the
//     WorkerNegotiator's batch, which is sent to rank 0. After a drain that found entries, the
//     queue is left alone for one cycle time (the hold, see RunFromLoop);
//  3. read what arrived: rank 0 feeds requests to its Coordinator; a worker handles each
//     ResponseList (HandleResponsesFromLoop: resends, dispatch, outcome);
//  4. rank 0 computes what is released, broadcasts it and handles it like any worker.
//
//   RuntimeOptions opts = *RuntimeOptions::FromEnv();
//   auto rt = Runtime::Start(opts, /*store=*/nullptr);    // store from the environment
//   TensorEntry e; e.request.op = OpType::kAllreduce; ...
//   int64_t h = *(*rt)->Enqueue(std::move(e));
//   Status s = (*rt)->handles().Wait(h);
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "runtime/backends/backend.h"
#include "runtime/backends/control_transport.h"
#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"
#include "runtime/core/autotune_driver.h"
#include "runtime/core/negotiation/coordinator.h"
#include "runtime/core/engine_setup.h"
#include "runtime/core/executor.h"
#include "runtime/core/fusion_params.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/lanes.h"
#include "runtime/core/liveness_watch.h"
#include "runtime/core/loop_poller.h"
#include "runtime/core/loop_thread.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/response_dispatcher.h"
#include "runtime/core/runtime_options.h"
#include "runtime/core/set_backends.h"
#include "runtime/core/tensor_queue.h"
#include "runtime/core/timeline_control.h"
#include "runtime/core/negotiation/worker_negotiator.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

class Runtime {
 public:
  // Connects to the other ranks and starts the loop thread. `store` may be null: then it comes from
  // the environment (dadtrun's rendezvous server), or is in-memory for a single-process job.
  static StatusOr<std::unique_ptr<Runtime>> Start(const RuntimeOptions& options,
                                                  std::unique_ptr<KeyValueStore> store);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Validates and queues a collective; returns its handle. entry.request.rank is filled in here.
  StatusOr<int64_t> Enqueue(TensorEntry entry);
  // Ends the job for every rank (pending work fails), joins the loop thread and releases the
  // engines (their threads, sockets and communicators); the handles stay and keep answering.
  // Idempotent.
  void Shutdown();

  // Rank 0 writes every tensor's phases to `path` as a Chrome trace (docs/timeline.md); other
  // ranks accept the call and do nothing. Any thread may call these.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  Status StopTimeline();

  // Changes the fusion threshold (bytes) and/or cycle time (ms) of the running job; a negative
  // value keeps that knob. Only rank 0's coordinator uses them, so rank 0 applies them on its loop
  // thread before its next negotiation round and every rank follows from there; other ranks only
  // validate. A running autotuner stops (a knob set by hand is never tuned). Any thread.
  Status SetFusionParams(int64_t fusion_threshold_bytes, double cycle_time_ms);

  // Process sets (docs/process-sets.md). Collective over the global set: every rank calls them
  // in the same order with the same arguments; they block until the negotiated change is applied
  // on this rank. AddProcessSet returns the new set's id; InvalidArgument with the coordinator's
  // message when the ranks disagree, a rank is outside the job or listed twice, the list is
  // empty or a set of these ranks exists. RemoveProcessSet returns true when the set was
  // registered, false when not; InvalidArgument for id 0. Any framework thread.
  StatusOr<int32_t> AddProcessSet(const std::vector<int>& ranks);
  StatusOr<bool> RemoveProcessSet(int32_t id);
  // The registered sets (any thread).
  const SetBackends& process_sets() const { return *sets_; }

  HandleTable& handles() { return handles_; }
  const RuntimeOptions& options() const { return options_; }
  const char* backend_name() const { return backend_name_; }
  // True when the controller's library may be called from any thread (MPI_THREAD_MULTIPLE).
  bool controller_multi_threaded() const { return controller_multi_threaded_; }

 private:
  using Clock = std::chrono::steady_clock;

  // Takes the connected engines and builds the rest (coordinator or negotiator, executor, lanes,
  // dispatcher); the loop thread starts later.
  explicit Runtime(Engines engines);
  // At Start, once every rank is connected: rank 0's autotuner, and the timeline from
  // DADT_TIMELINE. A failure here is broadcast to the other ranks as the job's abort cause.
  Status StartRankZeroTools();
  // At Start, on every rank (collective: the ranks allgather their liveness records on the data
  // plane): binds and starts the liveness watch (liveness_watch.h) when DADT_LIVENESS_* enables
  // it. A rank that cannot bind sends an empty record, and then no rank watches.
  Status StartLiveness();
  // The liveness watch's thread, once, when `rank` has been silent for the shutdown time: logs
  // `error`, records the silent rank at rendezvous ("unresponsive/<rank>", "cause/<this rank>")
  // and in DADT_LIVENESS_REPORT, and asks the loop to abort. A rank that is not elastic then
  // exits (code 1) after kLivenessExitGrace, even if its loop is blocked in a collective that
  // waits for the silent rank and can never return.
  void OnPeerUnresponsive(const std::string& error, int rank, const std::string& host,
                          std::chrono::milliseconds silent);

  // The loop thread's body: binds the thread checker, runs RunFromLoop, then waits for the lanes.
  void LoopMain();
  void RunFromLoop();
  // Step 2: drains the queue into the coordinator or the negotiator's batch; adds a shutdown
  // request once Shutdown was called. Returns how many entries it drained.
  size_t SubmitQueuedFromLoop(Clock::time_point now);
  // How long the queue is left alone after a drain that found entries: the cycle time.
  std::chrono::microseconds HoldFromLoop() const;
  // Steps 2 (sending), 3 and 4. Returns true when the loop must end (shutdown or abort).
  bool ExchangeFromLoop(Clock::time_point now);
  // Returns true when the loop must end (shutdown or abort).
  bool HandleResponsesFromLoop(const ResponseList& list);
  // Fails everything. `cause_rank` (when known) is the rank whose exit or failure caused this; it
  // is recorded at rendezvous ("cause/<rank>") so that dadtrun blames the root cause.
  void AbortFromLoop(const Status& status, int cause_rank = -1);
  void FailAllFromLoop(const Status& status);
  // Applies what SetFusionParams posted (rank 0).
  void ApplyFusionParamsFromLoop();
  void RecordCause(int cause_rank);
  // Once the loop has ended: the lanes, the backend, the control transport and the stores go now,
  // not when the next init() replaces this object (the executor's and the runner's pointers to
  // them are never used again: only the loop used them).
  void ReleaseEnginesAfterLoop();

  const RuntimeOptions options_;
  std::unique_ptr<KeyValueStore> store_;         // the job's (ready/, cause/)
  std::unique_ptr<KeyValueStore> scoped_store_;  // this incarnation's, for the engines
  std::unique_ptr<backends::Backend> backend_;
  std::unique_ptr<backends::ControlTransport> channel_;
  const char* const backend_name_;
  const bool controller_multi_threaded_;
  HandleTable handles_;
  TensorQueue queue_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;      // rank 0 only
  std::unique_ptr<WorkerNegotiator> negotiator_;  // every other rank
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<SetBackends> sets_;  // the process sets; their backends go before backend_
  // Runs CPU collectives two (gloo_threads) at a time; null when the loop runs them all itself.
  // Declared after backend_: its forks go first.
  std::unique_ptr<Lanes> lanes_;
  std::unique_ptr<LanesAndExecutor> runner_;
  std::unique_ptr<ResponseDispatcher> dispatcher_;
  std::unique_ptr<AutotuneDriver> autotune_;  // rank 0, when DADT_AUTOTUNE is on

  // The one event stream (timeline now, autotuner later). Emitted from the loop thread and lanes.
  timeline::EventStream events_;
  TimelineControl timeline_{&events_};
  FusionParamsMailbox fusion_params_;  // SetFusionParams -> rank 0's loop thread

  LoopThreadChecker loop_checker_;
  EntryMap entries_;  // loop thread: what this rank has drained and not finished

  // Blocks on a process-set add or remove entry; its integer result.
  StatusOr<int64_t> RunSetChange(TensorEntry entry);
  std::atomic<int64_t> set_changes_{0};  // names the k-th add or remove: "dadt.process_set.<k>"

  // Liveness: the watch, and the failure it posts for the loop thread (under liveness_mu_).
  std::unique_ptr<LivenessWatch> liveness_;
  std::atomic<bool> liveness_failed_{false};
  std::mutex liveness_mu_;
  Status liveness_failure_;
  int liveness_cause_ = -1;

  std::atomic<bool> shutdown_requested_{false};
  bool shutdown_sent_ = false;
  Clock::time_point hold_until_{};  // the queue is not drained before then (RunFromLoop)
  std::mutex shutdown_mu_;
  std::thread loop_;
};

}  // namespace core
}  // namespace dadt
