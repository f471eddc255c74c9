// Runtime: the API threads' calls and the loop thread (runtime_start.cc wires the parts together).
#include "runtime/core/runtime.h"

#include <cmath>
#include <utility>
#include <vector>

#include "runtime/common/logging.h"
#include "runtime/common/thread_priority.h"
#include "runtime/core/eager_reduce.h"
#include "runtime/core/entry_checks.h"

namespace dadt {
namespace core {

Runtime::~Runtime() { Shutdown(); }

void Runtime::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  shutdown_requested_ = true;
  queue_.Wake();
  if (loop_.joinable()) loop_.join();
  // Before the engines and stores go: the watch's thread uses the store when it ends the job.
  if (liveness_) liveness_->Stop();
  if (executor_) executor_->ReleaseDevice();  // waits for GPU work, then aborts the communicator
  (void)StopTimeline();
  ReleaseEnginesAfterLoop();
}

void Runtime::ReleaseEnginesAfterLoop() {
  lanes_.reset();  // drains and joins the lane threads; their forks go before the backend
  if (sets_) sets_->ReleaseAll();  // the next init() starts with the global set only
  backend_.reset();
  channel_.reset();
  scoped_store_.reset();
  store_.reset();
}

Status Runtime::StartTimeline(const std::string& path, bool mark_cycles) {
  if (options_.rank != 0) return Status::OK();  // rank 0 sees every negotiation; it writes
  DADT_RETURN_IF_ERROR(timeline_.Start(path));
  dispatcher_->set_mark_cycles(mark_cycles);
  return Status::OK();
}

Status Runtime::StopTimeline() { return timeline_.Stop(); }

Status Runtime::SetFusionParams(int64_t fusion_threshold_bytes, double cycle_time_ms) {
  if (!std::isfinite(cycle_time_ms)) {
    return InvalidArgument("cycle time must be a finite number of ms, got " +
                           std::to_string(cycle_time_ms));
  }
  if (options_.rank != 0) return Status::OK();
  fusion_params_.Post(fusion_threshold_bytes, cycle_time_ms);
  queue_.Wake();
  return Status::OK();
}

void Runtime::ApplyFusionParamsFromLoop() {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  auto p = fusion_params_.Take();
  if (!p) return;
  if (autotune_) autotune_->StopTuning();
  if (p->fusion_threshold_bytes >= 0) coordinator_->set_fusion_threshold(p->fusion_threshold_bytes);
  if (p->cycle_time_ms >= 0) {
    coordinator_->set_cycle_time(RuntimeOptions::CycleTimeFromMs(p->cycle_time_ms));
  }
}

StatusOr<int64_t> Runtime::Enqueue(TensorEntry entry) {
  const int32_t set_id = entry.request.process_set_id;
  if (set_id == 0) {
    DADT_RETURN_IF_ERROR(PrepareEntry(&entry, options_.rank, options_.size,
                                      options_.engines.device_data_plane));
  } else {
    std::optional<ProcessSet> set = sets_->Find(set_id);
    if (!set) {
      return InvalidArgument("process set " + std::to_string(set_id) +
                             " is not registered (removed?)");
    }
    DADT_RETURN_IF_ERROR(PrepareEntryInSet(&entry, options_.rank, *set));
  }
  entry.handle = handles_.Create();
  entry.enqueue_us = timeline::NowMicros();
  const int64_t h = entry.handle;
  Status s = queue_.Push(std::move(entry));
  if (!s.ok()) {
    handles_.Release(h);
    return s;
  }
  return h;
}

StatusOr<int64_t> Runtime::RunSetChange(TensorEntry entry) {
  entry.request.name = "dadt.process_set." + std::to_string(set_changes_++);
  auto h = Enqueue(std::move(entry));
  if (!h.ok()) return h.status();
  Status s = handles_.Wait(*h);
  const int64_t result = handles_.IntResult(*h);
  handles_.Release(*h);
  // The coordinator's refusals (disagreement, bad ranks, duplicates) are bad arguments.
  if (s.code() == StatusCode::kMismatch) return InvalidArgument(s.message());
  if (!s.ok()) return s;
  return result;
}

StatusOr<int32_t> Runtime::AddProcessSet(const std::vector<int>& ranks) {
  TensorEntry e;
  e.request.op = OpType::kProcessSetAdd;
  e.request.splits.assign(ranks.begin(), ranks.end());
  auto id = RunSetChange(std::move(e));
  if (!id.ok()) return id.status();
  return static_cast<int32_t>(*id);
}

StatusOr<bool> Runtime::RemoveProcessSet(int32_t id) {
  TensorEntry e;  // id 0 is refused by the coordinator, on every rank alike
  e.request.op = OpType::kProcessSetRemove;
  e.request.root = id;
  auto removed = RunSetChange(std::move(e));
  if (!removed.ok()) return removed.status();
  return *removed == 1;
}

void Runtime::FailAllFromLoop(const Status& status) {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  for (TensorEntry& e : queue_.Close(status)) entries_.emplace(EntryKey(e.request), std::move(e));
  for (auto& kv : entries_) {
    HandleResult r;
    r.status = status;
    executor_->Finish(kv.second, std::move(r));
  }
  entries_.clear();
}

void Runtime::AbortFromLoop(const Status& status, int cause_rank) {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  Status s = Aborted("dadt job aborted: " + status.message());
  DADT_LOG(ERROR) << s.message();
  if (lanes_) lanes_->Cancel(s);  // what a lane is running now ends on its own
  RecordCause(cause_rank);
  if (options_.rank == 0 && channel_ && options_.size > 1) {
    const ResponseList why = ResponseList::Shutdown(status.message(), cause_rank);
    (void)channel_->Broadcast(SerializeResponseList(why));
  }
  FailAllFromLoop(s);
}

void Runtime::RecordCause(int cause_rank) {
  // Before any handle fails: the launcher must know the cause before this rank can exit.
  if (cause_rank >= 0 && cause_rank != options_.rank && store_) {
    (void)store_->Set("cause/" + std::to_string(options_.rank), std::to_string(cause_rank));
  }
}

bool Runtime::HandleResponsesFromLoop(const ResponseList& list) {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  if (!list.stall_warning.empty()) {
    DADT_LOG(WARNING) << list.stall_warning;
  }
  if (list.outcome == Outcome::kAbort) {
    AbortFromLoop(Aborted(list.reason), list.cause_rank);
    return true;
  }
  if (liveness_) {  // what this rank now waits for in the data plane (the watch names it)
    const auto now = Clock::now();
    for (const Response& r : list.responses) {
      if (Executor::MovesData(r.type)) queue_.MarkReleased(r.process_set_id, r.names, now);
    }
  }
  if (negotiator_) {
    if (auto again = negotiator_->Receive(list, entries_)) {
      Status s = channel_->SendToCoordinator(SerializeRequestList(*again));
      if (!s.ok()) {
        AbortFromLoop(s);
        return true;
      }
    }
  }
  Status s = dispatcher_->Dispatch(list.responses, entries_);
  if (!s.ok()) {
    AbortFromLoop(s);
    return true;
  }
  if (list.outcome == Outcome::kShutdown) {
    s = runner_->DrainLanes();
    if (!s.ok()) {
      AbortFromLoop(s);
      return true;
    }
    if (!entries_.empty() || list.cause_rank != options_.rank) RecordCause(list.cause_rank);
    FailAllFromLoop(Aborted(list.reason.empty() ? "dadt has been shut down" : list.reason));
    return true;
  }
  return false;
}

void Runtime::LoopMain() {
  loop_checker_.BindToThisThread();
  if (options_.UsesRealtimeThreads()) {
    Status s = MakeThisThreadRealtime();
    if (!s.ok()) {
      DADT_LOG(INFO) << s.message();
    }
  }
  RunFromLoop();
  // However the loop ended, what the lanes still hold runs (or fails) before the runtime stops.
  if (lanes_) lanes_->Drain();
  // Every rank's loop ends at about the same moment; silence after that is no news.
  if (liveness_) liveness_->Stop();
  // Here, not in Shutdown: every rank's loop ends at about the same moment (the coordinator's
  // shutdown list), however late each user calls shutdown().
  channel_->Close();
}

void Runtime::RunFromLoop() {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  LoopPoller poller(queue_.wake_fd(), channel_.get());
  // The first pass does not block: frames that arrived behind the hellos are already buffered.
  bool first_pass = true;
  while (true) {
    // Step 1: sleep until there is something to do. While this rank's earlier entries are still
    // in flight, entries that come within a cycle time of the last drain that found some are held
    // until the cycle has passed, with the queue unwatched: during backward a gradient comes every
    // few hundred microseconds, and without the hold each would cost the framework thread a
    // wake-up write, the loop a wake-up, and (on a worker) a request message of its own, on cores
    // the training threads need. An entry with nothing of this rank in flight (a lone allreduce,
    // or the next of a loop that waits for each) goes at once, and the coordinator's fusion
    // window holds what is ready for up to a cycle anyway.
    const bool immediate = first_pass || (shutdown_requested_ && !shutdown_sent_);
    auto held = [this](Clock::time_point t) { return !entries_.empty() && t < hold_until_; };
    const bool holding = !immediate && held(Clock::now());
    auto deadline = coordinator_ ? coordinator_->NextDeadline() : Clock::time_point::max();
    if (holding) deadline = std::min(deadline, hold_until_);
    if (poller.Wait(deadline, immediate, /*awaiting=*/!entries_.empty(), /*watch_queue=*/!holding)) {
      queue_.ClearWake();
    }
    first_pass = false;
    if (lanes_) {  // a lane that failed woke us
      Status failed = lanes_->TakeFailure();
      if (!failed.ok()) {
        AbortFromLoop(failed);
        return;
      }
    }
    if (liveness_failed_) {  // the watch found a rank silent for the shutdown time
      Status failure;
      int cause;
      {
        std::lock_guard<std::mutex> lock(liveness_mu_);
        failure = liveness_failure_;
        cause = liveness_cause_;
      }
      AbortFromLoop(failure, cause);
      return;
    }
    if (coordinator_) ApplyFusionParamsFromLoop();
    const auto now = Clock::now();
    if (!held(now) || (shutdown_requested_ && !shutdown_sent_)) {
      if (holding) queue_.ClearWake();  // a signal written while the queue was not watched
      if (SubmitQueuedFromLoop(now) > 0) hold_until_ = now + HoldFromLoop();
    }
    if (ExchangeFromLoop(now)) return;
  }
}

std::chrono::microseconds Runtime::HoldFromLoop() const {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  return coordinator_ ? coordinator_->cycle_time() : options_.cycle_time();
}

size_t Runtime::SubmitQueuedFromLoop(Clock::time_point now) {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  const bool traced = events_.enabled();
  std::vector<TensorEntry> drained = queue_.Drain();
  for (TensorEntry& e : drained) {
    Request& req = e.request;
    if (traced) {
      const int64_t t = timeline::NowMicros();
      const std::string row = timeline::TensorRow(OpTypeName(req.op), req.name);
      events_.Emit({e.enqueue_us, timeline::Phase::kBegin, row, timeline::kQueue, ""});
      events_.Emit({t, timeline::Phase::kEnd, row, timeline::kQueue, ""});
      events_.Emit({t, timeline::Phase::kBegin, row, timeline::NegotiateActivity(OpTypeName(req.op)), ""});
    }
    // Kept in the entry too: a resend carries the payload again.
    AttachEagerInput(&req, e.input, options_.eager_threshold_bytes);
    if (coordinator_) {
      coordinator_->Add(req, now);
    } else {
      negotiator_->Submit(req);
    }
    std::string key = EntryKey(req);
    entries_.emplace(std::move(key), std::move(e));
  }
  if (shutdown_requested_ && !shutdown_sent_) {
    shutdown_sent_ = true;
    if (coordinator_) {
      coordinator_->RequestShutdown(options_.rank);
    } else {
      negotiator_->RequestShutdown();
    }
  }
  return drained.size();
}

bool Runtime::ExchangeFromLoop(Clock::time_point now) {
  DADT_DCHECK_ON_LOOP(loop_checker_);
  Status s;
  if (negotiator_) {
    if (auto batch = negotiator_->TakeBatch()) {
      s = channel_->SendToCoordinator(SerializeRequestList(*batch));
      DADT_LOG(TRACE) << "sent " << batch->requests.size() << " requests, " << batch->cached.size()
                      << " cached refs" << (batch->shutdown ? ", shutdown" : "");
    }
  }
  std::vector<std::pair<int, std::string>> inbox;
  Status read = channel_->ReadAvailable(&inbox);
  for (auto& msg : inbox) {
    if (coordinator_) {
      auto list = ParseRequestList(msg.second);
      if (!list.ok()) {
        s = list.status();
        break;
      }
      list->rank = msg.first;
      DADT_LOG(TRACE) << "from rank " << msg.first << ": " << list->requests.size()
                      << " requests, " << list->cached.size() << " cached refs";
      coordinator_->Receive(*list, now);
    } else {
      auto list = ParseResponseList(msg.second);
      if (!list.ok()) {
        s = list.status();
        break;
      }
      if (HandleResponsesFromLoop(*list)) return true;
    }
  }
  if (s.ok()) s = read;
  if (s.ok() && coordinator_) {
    ResponseList list = coordinator_->Compute(Clock::now());
    if (!list.Empty()) {
      DADT_LOG(TRACE) << "releasing " << list.responses.size() << " responses, "
                      << list.resend.size() << " resends, pending " << coordinator_->pending();
      if (options_.size > 1) s = channel_->Broadcast(SerializeResponseList(list));
      if (HandleResponsesFromLoop(list)) return true;
    }
  }
  if (!s.ok()) {
    AbortFromLoop(s, channel_->closed_rank());
    return true;
  }
  return false;
}

}  // namespace core
}  // namespace dadt
