// Runtime: the per-process engine. One object owns everything: the tensor queue, the handles, the
// response cache, the coordinator (on rank 0), the control channel, the backend and the one loop
// thread. There is no other global state, so tests run several ranks as threads in one process.
//
// Threading (docs/thread_model.md): framework threads call Enqueue and the HandleTable; only the
// loop thread touches negotiation state, the backend and the entries it is executing.
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
#include "runtime/core/control_channel.h"
#include "runtime/core/coordinator.h"
#include "runtime/core/executor.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/lanes.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/stall_inspector.h"
#include "runtime/core/tensor_queue.h"
#include "timeline/chrome_trace_writer.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

struct RuntimeOptions : JobGeometry {
  int64_t fusion_threshold_bytes = 128LL << 20;
  double cycle_time_ms = 1.0;
  int64_t cache_capacity = 1024;
  // Allreduces up to this many bytes travel with their negotiation (eager_reduce.h); 0 disables.
  int64_t eager_threshold_bytes = 32 * 1024;
  std::string backend = "gloo";
  // The engine for GPU tensors ("nccl"), or empty: the front end stages them through host memory
  // and `backend`. init(all_reduce_executor='nccl') sets it; DADT_DEVICE_BACKEND overrides.
  std::string device_backend;
  // Who carries negotiation: "gloo" (the TCP star over dadtrun's rendezvous) or "mpi" (MPI
  // messages; the geometry then comes from MPI). DADT_CONTROLLER, else "mpi" under plain mpirun.
  std::string controller = "gloo";
  // Allreduce inside hosts, then across them (DADT_HIERARCHICAL_ALLREDUCE).
  bool hierarchical_allreduce = false;
  // An MPI_Comm (as uintptr_t) for controller and data plane, 0 for MPI_COMM_WORLD.
  uintptr_t native_comm = 0;
  std::string iface;
  std::string secret;
  std::chrono::milliseconds start_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds op_timeout{std::chrono::seconds(300)};
  int64_t segment_bytes = 0;  // DADT_GLOO_SEGMENT_BYTES; 0: the engine's default
  // DADT_GLOO_THREADS: collectives in flight at once on engines that can (lanes.h); 1: one.
  int64_t gloo_threads = 2;
  // DADT_REALTIME_THREADS (off by default): with the Gloo controller, the loop thread, the lanes
  // and Gloo's transport thread run at real-time priority where allowed (thread_priority.h).
  bool realtime_threads = false;
  StallOptions stall;  // rank 0's stall inspector (DADT_STALL_*)

  // The launcher's environment (docs/running.md); junk values are InvalidArgument naming them.
  static StatusOr<RuntimeOptions> FromEnv();
};

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
  // Ends the job for every rank (pending work fails) and joins the loop thread. Idempotent.
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

  HandleTable& handles() { return handles_; }
  const RuntimeOptions& options() const { return options_; }
  const char* backend_name() const { return backend_->Name(); }
  // True when the controller's library may be called from any thread (MPI_THREAD_MULTIPLE).
  bool controller_multi_threaded() const { return channel_->multi_threaded(); }

 private:
  explicit Runtime(const RuntimeOptions& options);
  // The transport for options.controller; for MPI it also fills in the geometry it finds.
  static StatusOr<std::unique_ptr<backends::ControlTransport>> CreateTransport(
      RuntimeOptions* options, KeyValueStore* store);
  Status Validate(const TensorEntry& entry) const;
  // The loop thread: RunLoop, then waits for the lanes.
  void Loop();
  void RunLoop();
  // Returns true when the loop must end (shutdown or abort).
  bool HandleResponses(const ResponseList& list);
  // Moves this rank's entries for `r` out of entries_, for a lane.
  EntryMap TakeEntries(const Response& r);
  // Waits until the lanes are idle; their first failure, if any.
  Status DrainLanes();
  // Fails everything. `cause_rank` (when known) is the rank whose exit or failure caused this; it is
  // recorded at rendezvous ("cause/<rank>") so that dadtrun blames the root cause.
  void Abort(const Status& status, int cause_rank = -1);
  void FailAll(const Status& status);
  void RecordCause(int cause_rank);
  // At Start, once every rank is connected: rank 0's autotuner, and the timeline from
  // DADT_TIMELINE. A failure here is broadcast to the other ranks as the job's abort cause.
  Status StartRankZeroTools();
  // Loop thread: applies what SetFusionParams left in pending_params_.
  void ApplyPendingParams();

  const RuntimeOptions options_;
  std::unique_ptr<KeyValueStore> store_;
  std::unique_ptr<backends::Backend> backend_;
  std::unique_ptr<backends::ControlTransport> channel_;
  HandleTable handles_;
  TensorQueue queue_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  std::unique_ptr<Executor> executor_;
  // Runs CPU collectives two (gloo_threads) at a time; null when the loop runs them all itself.
  // Declared after backend_: its forks go first.
  std::unique_ptr<Lanes> lanes_;
  std::unique_ptr<AutotuneDriver> autotune_;  // rank 0, when DADT_AUTOTUNE is on

  // The one event stream (timeline now, autotuner later). Emitted from the loop thread and lanes.
  timeline::EventStream events_;
  std::mutex timeline_mu_;  // guards timeline_writer_ (start/stop from API threads)
  std::shared_ptr<timeline::ChromeTraceWriter> timeline_writer_;
  std::atomic<bool> mark_cycles_{false};

  // Loop-thread state.
  EntryMap entries_;
  std::unordered_map<uint64_t, std::string> sent_refs_;  // (slot, generation) -> name

  struct PendingParams {
    int64_t fusion_threshold_bytes = -1;
    double cycle_time_ms = -1;
  };
  std::mutex params_mu_;  // guards pending_params_ (set from API threads, taken by the loop)
  std::optional<PendingParams> pending_params_;

  std::atomic<bool> shutdown_requested_{false};
  bool shutdown_sent_ = false;
  std::mutex shutdown_mu_;
  std::thread loop_;
};

}  // namespace core
}  // namespace dadt
