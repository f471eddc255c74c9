#include "runtime/core/runtime.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/backends/device.h"
#include "runtime/backends/hierarchical_allreduce.h"
#include "runtime/common/env.h"
#include "runtime/common/logging.h"
#include "runtime/common/rendezvous/client.h"
#include "runtime/common/rendezvous/in_memory_store.h"
#include "runtime/common/rendezvous/socket.h"
#include "runtime/common/thread_priority.h"
#include "runtime/core/op_layout.h"

namespace dadt {
namespace core {
namespace {

using Clock = std::chrono::steady_clock;

// The IPv4 address the coordinator listens on: the chosen interface's, loopback when every rank
// is on this host, else the address the hostname resolves to.
StatusOr<std::string> BindAddress(const RuntimeOptions& o) {
  if (!o.iface.empty()) return rendezvous::InterfaceAddress(o.iface);
  if (o.local_size == o.size) return std::string("127.0.0.1");
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(host, nullptr, &hints, &res) != 0 || !res) {
    return InvalidArgument(std::string("cannot resolve this host's name '") + host +
                           "'; pass --network-interface");
  }
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return std::string(buf);
}

// The flat backend, or a HierarchicalAllreduce over it plus one backend for this host's ranks and
// one for the ranks with this local rank on every host. Every rank creates them in this order.
StatusOr<std::unique_ptr<backends::Backend>> WithHierarchy(std::unique_ptr<backends::Backend> flat,
                                                           const backends::BackendOptions& bo,
                                                           const RuntimeOptions& o) {
  if (o.local_size <= 1 || o.cross_size <= 1 || o.size != o.local_size * o.cross_size) {
    if (o.rank == 0) {
      DADT_LOG(INFO) << "hierarchical allreduce needs several hosts with the same number of ranks "
                     << "(local size " << o.local_size << ", cross size " << o.cross_size
                     << ", size " << o.size << "); using the flat allreduce";
    }
    return flat;
  }
  backends::BackendOptions local = bo, cross = bo;
  static_cast<JobGeometry&>(local) = JobGeometry{o.local_rank, o.local_size, o.local_rank,
                                                 o.local_size, 0, 1};
  local.store_prefix = bo.store_prefix + "local/" + std::to_string(o.cross_rank) + "/";
  local.group_color = o.cross_rank;
  static_cast<JobGeometry&>(cross) = JobGeometry{o.cross_rank, o.cross_size, 0, 1, o.cross_rank,
                                                 o.cross_size};
  cross.store_prefix = bo.store_prefix + "cross/" + std::to_string(o.local_rank) + "/";
  cross.group_color = o.local_rank;
  auto local_backend = backends::BackendRegistry::Create(o.backend, local);
  if (!local_backend.ok()) return local_backend.status();
  auto cross_backend = backends::BackendRegistry::Create(o.backend, cross);
  if (!cross_backend.ok()) return cross_backend.status();
  if (o.rank == 0) {
    DADT_LOG(INFO) << "hierarchical allreduce over " << o.cross_size << " hosts of "
                   << o.local_size << " ranks";
  }
  return std::unique_ptr<backends::Backend>(new backends::HierarchicalAllreduce(
      std::move(flat), std::move(*local_backend), std::move(*cross_backend), o.local_rank,
      o.local_size));
}

uint64_t RefKey(const CachedRef& r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(r.slot)) << 32) | r.generation;
}

}  // namespace

Runtime::Runtime(const RuntimeOptions& options)
    : options_(options), cache_(options.cache_capacity) {}

StatusOr<std::unique_ptr<backends::ControlTransport>> Runtime::CreateTransport(
    RuntimeOptions* options, KeyValueStore* store) {
  if (options->controller == "gloo") {
    auto bind = BindAddress(*options);
    if (!bind.ok()) return bind.status();
    auto channel = ControlChannel::Create(options->rank, options->size, store, *bind,
                                          options->secret, options->start_timeout);
    if (!channel.ok()) return channel.status();
    return std::unique_ptr<backends::ControlTransport>(std::move(*channel));
  }
  backends::ControlTransportOptions to;
  to.native_comm = options->native_comm;
  to.timeout = options->start_timeout;
  auto transport = backends::ControlTransportRegistry::Create(options->controller, to);
  if (!transport.ok()) return transport.status();
  static_cast<JobGeometry&>(*options) = (*transport)->geometry();
  // Hosts as the environment describes them take precedence over MPI's shared-memory view (a
  // scheduler that knows the topology, or pretend hosts in tests); rank and size stay MPI's.
  const char* names[] = {env::kLocalRank, env::kLocalSize, env::kCrossRank, env::kCrossSize};
  if (std::all_of(std::begin(names), std::end(names), [](const char* n) { return env::IsSet(n); })) {
    int* fields[] = {&options->local_rank, &options->local_size, &options->cross_rank,
                     &options->cross_size};
    for (int i = 0; i < 4; ++i) DADT_ASSIGN_OR_RETURN(*fields[i], env::GetInt(names[i], 0));
    if (options->local_rank < 0 || options->local_rank >= options->local_size ||
        options->cross_rank < 0 || options->cross_rank >= options->cross_size) {
      return InvalidArgument("DADT_LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE describe no valid "
                             "place in the job");
    }
  }
  return transport;
}

StatusOr<std::unique_ptr<Runtime>> Runtime::Start(const RuntimeOptions& requested,
                                                  std::unique_ptr<KeyValueStore> store) {
  RuntimeOptions options = requested;
  const bool nccl_requested = options.backend == "nccl";
  if (nccl_requested) {
    // NCCL carries the GPU tensors; host tensors and negotiation stay on the controller.
    std::string why;
    if (backends::DeviceRegistry::VisibleDevices(&why) == 0) {
      return PreconditionFailed("the nccl executor needs a GPU: " + why);
    }
    options.device_backend = "nccl";
    options.backend = options.controller;
  }
  if (options.backend == "mpi" && options.controller == "gloo" && options.size == 1 &&
      !env::IsSet(env::kRendezvousAddr)) {
    options.controller = "mpi";  // a lone process asking for MPI: an MPI singleton
  }
  if (options.backend == "mpi" && options.controller != "mpi") {
    return PreconditionFailed("the mpi executor needs MPI as the controller: launch the job with "
                              "`dadtrun --mpi` or `mpirun` (this one was started by dadtrun --gloo)");
  }
  // An MPI controller learns the geometry from MPI first; the TCP star needs the store first.
  std::unique_ptr<backends::ControlTransport> transport;
  if (options.controller != "gloo") {
    auto created = CreateTransport(&options, nullptr);
    if (!created.ok()) return created.status();
    transport = std::move(*created);
    if (!store && !env::IsSet(env::kRendezvousAddr)) {
      if (options.backend != "mpi" && options.size > 1) {
        return PreconditionFailed("the " + options.backend + " executor needs dadtrun's "
                                  "rendezvous, which plain mpirun does not provide: launch with "
                                  "`dadtrun --" + options.backend + "`, or use the mpi executor");
      }
      store = std::make_unique<rendezvous::InMemoryStore>();
    }
  }
  if (options.device_backend == "nccl" && !nccl_requested) {
    // NCCL needs one GPU per rank; with fewer GPUs than ranks on this host (or none) GPU tensors
    // are staged through host memory and the job's executor instead (docs/backends.md).
    std::string why;
    const int gpus = backends::DeviceRegistry::VisibleDevices(&why);
    if (gpus < options.local_size) {
      if (gpus > 0) {
        DADT_LOG(INFO) << gpus << " GPU(s) for " << options.local_size
                       << " ranks on this host: GPU tensors are staged through host memory";
      }
      options.device_backend.clear();
    }
  }
  std::unique_ptr<Runtime> rt(new Runtime(options));
  SetLogRank(options.rank);
  if (!store) {
    if (env::IsSet(env::kRendezvousAddr)) {
      auto client = rendezvous::ConnectFromEnv(options.start_timeout);
      if (!client.ok()) return client.status();
      store = std::move(*client);
    } else if (options.size == 1) {
      store = std::make_unique<rendezvous::InMemoryStore>();
    } else {
      return PreconditionFailed("this process is rank " + std::to_string(options.rank) + " of " +
                                std::to_string(options.size) +
                                " but no rendezvous server is set (DADT_RENDEZVOUS_ADDR); start "
                                "the job with dadtrun");
    }
  }
  rt->store_ = std::move(store);
  backends::BackendOptions bo;
  static_cast<JobGeometry&>(bo) = options;
  bo.iface = options.iface;
  bo.timeout = options.op_timeout;
  bo.connect_timeout = options.start_timeout;
  bo.segment_bytes = options.segment_bytes;
  // MPI's collectives spin while they wait: a real-time thread spinning would starve training.
  const bool realtime = options.realtime_threads && options.controller == "gloo";
  bo.realtime_threads = realtime;
  bo.store = rt->store_.get();
  bo.store_prefix = options.backend + "/";
  bo.native_comm = options.native_comm;
  auto backend = backends::BackendRegistry::Create(options.backend, bo);
  if (!backend.ok()) return backend.status();
  if (options.hierarchical_allreduce) {
    backend = WithHierarchy(std::move(*backend), bo, options);
    if (!backend.ok()) return backend.status();
  }
  rt->backend_ = std::move(*backend);

  if (!transport) {
    auto created = CreateTransport(&options, rt->store_.get());
    if (!created.ok()) return created.status();
    transport = std::move(*created);
  }
  rt->channel_ = std::move(transport);
  Status s = rt->store_->Set("ready/" + std::to_string(options.rank), "1");
  (void)s;  // progress reporting only

  if (options.rank == 0) {
    rt->coordinator_ = std::make_unique<Coordinator>(
        options.size, options.fusion_threshold_bytes,
        std::chrono::microseconds(static_cast<int64_t>(std::llround(options.cycle_time_ms * 1000))),
        &rt->cache_);
  }
  rt->executor_ = std::make_unique<Executor>(rt->backend_.get(), options.rank, options.size,
                                             &rt->handles_, &rt->queue_, &rt->events_);
  rt->executor_->EnableDevice(options.device_backend, bo);
  if (options.size > 1) {
    rt->lanes_ = Lanes::Create(rt->backend_.get(), static_cast<int>(options.gloo_threads),
                               options.rank, options.size, &rt->handles_, &rt->queue_,
                               &rt->events_, realtime, [r = rt.get()] { r->queue_.Wake(); });
  }
  Status setup = rt->StartRankZeroTools();
  if (!setup.ok()) {
    // Every rank is connected by now and would only learn of a closed channel: tell them why.
    if (rt->coordinator_ && options.size > 1) {
      ResponseList list;
      list.outcome = Outcome::kShutdown;
      list.reason = setup.message();
      list.cause_rank = 0;
      (void)rt->channel_->Broadcast(SerializeResponseList(list));
    }
    return setup;
  }
  rt->loop_ = std::thread([r = rt.get()] { r->Loop(); });
  return rt;
}

Status Runtime::StartRankZeroTools() {
  if (coordinator_) {
    coordinator_->set_events(&events_);
    coordinator_->set_stall_options(options_.stall);
    auto tuner = AutotuneDriver::FromEnv(options_.fusion_threshold_bytes, options_.cycle_time_ms,
                                         options_.cross_size, coordinator_.get());
    if (!tuner.ok()) return tuner.status();
    autotune_ = std::move(*tuner);
  }
  if (env::IsSet(env::kTimeline)) {
    auto mark = env::GetBool(env::kTimelineMarkCycles, false);
    if (!mark.ok()) return mark.status();
    DADT_RETURN_IF_ERROR(StartTimeline(env::GetString(env::kTimeline), *mark));
  }
  return Status::OK();
}

Runtime::~Runtime() { Shutdown(); }

void Runtime::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  shutdown_requested_ = true;
  queue_.Wake();
  if (loop_.joinable()) loop_.join();
  if (executor_) executor_->ReleaseDevice();  // waits for GPU work, then aborts the communicator
  (void)StopTimeline();
}

Status Runtime::StartTimeline(const std::string& path, bool mark_cycles) {
  if (options_.rank != 0) return Status::OK();  // rank 0 sees every negotiation; it writes
  if (path.empty()) return InvalidArgument("timeline: empty file path");
  std::lock_guard<std::mutex> lock(timeline_mu_);
  if (timeline_writer_) return PreconditionFailed("a timeline is already being written");
  auto writer = std::make_shared<timeline::ChromeTraceWriter>();
  DADT_RETURN_IF_ERROR(writer->Start(path));
  mark_cycles_ = mark_cycles;
  timeline_writer_ = writer;
  events_.AddSink(writer);
  return Status::OK();
}

Status Runtime::SetFusionParams(int64_t fusion_threshold_bytes, double cycle_time_ms) {
  if (!std::isfinite(cycle_time_ms)) {
    return InvalidArgument("cycle time must be a finite number of ms, got " +
                           std::to_string(cycle_time_ms));
  }
  if (options_.rank != 0) return Status::OK();
  {
    std::lock_guard<std::mutex> lock(params_mu_);
    PendingParams& p = pending_params_ ? *pending_params_ : pending_params_.emplace();
    if (fusion_threshold_bytes >= 0) p.fusion_threshold_bytes = fusion_threshold_bytes;
    if (cycle_time_ms >= 0) p.cycle_time_ms = cycle_time_ms;
  }
  queue_.Wake();
  return Status::OK();
}

void Runtime::ApplyPendingParams() {
  PendingParams p;
  {
    std::lock_guard<std::mutex> lock(params_mu_);
    if (!pending_params_) return;
    p = *pending_params_;
    pending_params_.reset();
  }
  if (autotune_) autotune_->StopTuning();
  if (p.fusion_threshold_bytes >= 0) coordinator_->set_fusion_threshold(p.fusion_threshold_bytes);
  if (p.cycle_time_ms >= 0) {
    coordinator_->set_cycle_time(
        std::chrono::microseconds(static_cast<int64_t>(std::llround(p.cycle_time_ms * 1000))));
  }
}

Status Runtime::StopTimeline() {
  std::shared_ptr<timeline::ChromeTraceWriter> writer;
  {
    std::lock_guard<std::mutex> lock(timeline_mu_);
    writer.swap(timeline_writer_);
  }
  if (!writer) return Status::OK();
  events_.RemoveSink(writer.get());  // waits for an Emit in progress
  return writer->Stop();
}

Status Runtime::Validate(const TensorEntry& e) const {
  const Request& r = e.request;
  const std::string quoted = "'" + r.name + "'";
  if (r.name.empty()) return InvalidArgument("a collective needs a non-empty name");
  if (!IsValidDataType(static_cast<int32_t>(r.dtype))) {
    return InvalidArgument("tensor " + quoted + " has an unsupported data type");
  }
  const bool reduces = r.op == OpType::kAllreduce || r.op == OpType::kReducescatter;
  if (reduces) {
    if (!IsValidReduceOp(static_cast<int32_t>(r.reduce_op))) {
      return InvalidArgument("tensor " + quoted + ": unknown reduce op");
    }
    if (r.reduce_op == ReduceOp::kAdasum) {
      return Unimplemented("tensor " + quoted + ": the Adasum reduction is not implemented");
    }
    if (r.dtype == DataType::kBool &&
        (r.reduce_op == ReduceOp::kAverage || r.prescale != 1.0 || r.postscale != 1.0)) {
      return InvalidArgument("tensor " + quoted +
                             " is bool: Average and scale factors are not defined for bool; use "
                             "Sum or Max (logical or) or Min or Product (logical and)");
    }
  }
  if ((r.op == OpType::kAllreduce || r.op == OpType::kBroadcast) && e.output == nullptr &&
      NumElements(r.shape) > 0) {
    return InvalidArgument("tensor " + quoted + ": an output buffer is required");
  }
  if (r.op == OpType::kReducescatter && e.output != nullptr) {
    // This rank's share of the first dimension (lower ranks get the remainder), known already.
    const int64_t rows = ScatterRows(r.shape.empty() ? 1 : r.shape[0], options_.size, options_.rank);
    const int64_t bytes = RowElements(r.shape) * rows * static_cast<int64_t>(DataTypeSize(r.dtype));
    if (e.output_bytes != bytes) {
      return InvalidArgument("tensor " + quoted + ": the reducescatter output holds " +
                             std::to_string(e.output_bytes) + " bytes; rank " +
                             std::to_string(options_.rank) + "'s share needs " + std::to_string(rows) +
                             " rows (" + std::to_string(bytes) + " bytes)");
    }
  }
  if (r.op != OpType::kBarrier && r.op != OpType::kJoin && e.input == nullptr &&
      NumElements(r.shape) > 0) {
    return InvalidArgument("tensor " + quoted + ": an input buffer is required");
  }
  if (r.op == OpType::kBroadcast && (r.root < 0 || r.root >= options_.size)) {
    return InvalidArgument("broadcast of tensor " + quoted + ": root rank " +
                           std::to_string(r.root) + " is not in [0, " +
                           std::to_string(options_.size) + ")");
  }
  if ((r.op == OpType::kAlltoall || r.op == OpType::kReducescatter) && r.shape.empty()) {
    return InvalidArgument(std::string(OpTypeName(r.op)) + " of tensor " + quoted +
                           " needs at least one dimension");
  }
  if (r.op == OpType::kAlltoall) {
    int64_t sum = 0;
    for (int64_t s : r.splits) {
      if (s < 0) return InvalidArgument("alltoall of tensor " + quoted + ": negative split");
      sum += s;
    }
    if (static_cast<int>(r.splits.size()) != options_.size || sum != r.shape[0]) {
      return InvalidArgument("alltoall of tensor " + quoted + ": splits must have " +
                             std::to_string(options_.size) + " entries summing to the first "
                             "dimension " + std::to_string(r.shape[0]));
    }
  }
  if (r.group_id >= 0 && r.group_size < 1) {
    return InvalidArgument("tensor " + quoted + ": grouped collective with group size < 1");
  }
  return Status::OK();
}

StatusOr<int64_t> Runtime::Enqueue(TensorEntry entry) {
  entry.request.rank = options_.rank;
  if (entry.request.op == OpType::kJoin) entry.request.name = kJoinName;
  if (entry.request.op == OpType::kAlltoall && entry.request.splits.empty() &&
      !entry.request.shape.empty()) {
    const int64_t d0 = entry.request.shape[0];
    if (d0 % options_.size != 0) {
      return InvalidArgument("alltoall of tensor '" + entry.request.name + "': first dimension " +
                             std::to_string(d0) + " is not divisible by " +
                             std::to_string(options_.size) + " ranks; pass splits");
    }
    entry.request.splits.assign(options_.size, d0 / options_.size);
  }
  DADT_RETURN_IF_ERROR(Validate(entry));
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

void Runtime::FailAll(const Status& status) {
  for (TensorEntry& e : queue_.Close(status)) entries_.emplace(e.request.name, std::move(e));
  for (auto& kv : entries_) {
    HandleResult r;
    r.status = status;
    executor_->Finish(kv.second, std::move(r));
  }
  entries_.clear();
}

void Runtime::Abort(const Status& status, int cause_rank) {
  Status s = Aborted("dadt job aborted: " + status.message());
  DADT_LOG(ERROR) << s.message();
  if (lanes_) lanes_->Cancel(s);  // what a lane is running now ends on its own
  RecordCause(cause_rank);
  if (options_.rank == 0 && channel_ && options_.size > 1) {
    ResponseList list;
    list.outcome = Outcome::kShutdown;
    list.reason = status.message();
    list.cause_rank = cause_rank;
    (void)channel_->Broadcast(SerializeResponseList(list));
  }
  FailAll(s);
}

void Runtime::RecordCause(int cause_rank) {
  // Before any handle fails: the launcher must know the cause before this rank can exit.
  if (cause_rank >= 0 && cause_rank != options_.rank && store_) {
    (void)store_->Set("cause/" + std::to_string(options_.rank), std::to_string(cause_rank));
  }
}

EntryMap Runtime::TakeEntries(const Response& r) {
  EntryMap taken;
  for (const std::string& name : r.names) {
    auto it = entries_.find(name);
    if (it == entries_.end()) continue;  // a joined rank has none
    taken.emplace(name, std::move(it->second));
    entries_.erase(it);
  }
  return taken;
}

Status Runtime::DrainLanes() {
  if (!lanes_) return Status::OK();
  lanes_->Drain();
  return lanes_->TakeFailure();
}

bool Runtime::HandleResponses(const ResponseList& list) {
  if (!list.stall_warning.empty()) {
    DADT_LOG(WARNING) << list.stall_warning;
  }
  if (list.outcome == Outcome::kAbort) {
    Abort(Aborted(list.reason), list.cause_rank);
    return true;
  }
  if (list.cache != CacheToggle::kUnchanged && !coordinator_) {
    cache_.SetActive(list.cache == CacheToggle::kOn);
  }
  for (const ResendEntry& resend : list.resend) {
    if (resend.rank != options_.rank) continue;
    auto it = sent_refs_.find(RefKey(resend.ref()));
    if (it == sent_refs_.end()) continue;
    auto e = entries_.find(it->second);
    sent_refs_.erase(it);
    if (e == entries_.end()) continue;
    RequestList again;
    again.rank = options_.rank;
    again.requests.push_back(e->second.request);
    Status s = channel_->SendToCoordinator(SerializeRequestList(again));
    if (!s.ok()) {
      Abort(s);
      return true;
    }
  }
  if (events_.enabled() && mark_cycles_ && !list.responses.empty()) {
    events_.Emit({timeline::NowMicros(), timeline::Phase::kInstant, "", timeline::kCycleStart, ""});
  }
  for (const Response& resp : list.responses) {
    if (events_.enabled()) {
      const int64_t t = timeline::NowMicros();
      for (const std::string& name : resp.names) {
        auto e = entries_.find(name);
        if (e == entries_.end()) continue;
        events_.Emit({t, timeline::Phase::kEnd, name,
                      timeline::NegotiateActivity(OpTypeName(e->second.request.op)),
                      resp.type == Response::Type::kError ? "{\"error\":true}" : ""});
      }
    }
    if (options_.rank != 0) {
      for (size_t i = 0; i < resp.names.size() && i < resp.cache_slots.size(); ++i) {
        if (resp.cache_slots[i] < 0) continue;
        auto e = entries_.find(resp.names[i]);
        if (e != entries_.end()) {
          cache_.Put(CachedRef{resp.cache_slots[i], resp.cache_generations[i]}, e->second.request);
        }
      }
    }
    if (lanes_ && Lanes::Runs(resp)) {
      lanes_->Submit(resp, TakeEntries(resp));
      // Counted when handed over: in steady state lanes finish responses as fast as they get them.
      if (autotune_) autotune_->OnExecuted(resp);
      continue;
    }
    // Anything else runs after what the lanes hold, except an eager allreduce of CPU tensors:
    // the response carries its result, and copying it out touches no connection, so waiting for
    // the lanes would only stall the negotiation of what comes next (in sync mode, every small
    // bias gradient drained both lanes).
    const bool fence = !(resp.eager && resp.device < 0);
    Status s = fence ? DrainLanes() : Status::OK();
    if (s.ok()) s = executor_->Execute(resp, entries_);
    if (autotune_ && s.ok()) autotune_->OnExecuted(resp);
    if (!s.ok()) {
      Abort(s);
      return true;
    }
  }
  if (list.outcome == Outcome::kShutdown) {
    Status s = DrainLanes();
    if (!s.ok()) {
      Abort(s);
      return true;
    }
    if (!entries_.empty() || list.cause_rank != options_.rank) RecordCause(list.cause_rank);
    FailAll(Aborted(list.reason.empty() ? "dadt has been shut down" : list.reason));
    return true;
  }
  return false;
}

void Runtime::Loop() {
  if (options_.realtime_threads && options_.controller == "gloo") {
    Status s = MakeThisThreadRealtime();
    if (!s.ok()) {
      DADT_LOG(INFO) << s.message();
    }
  }
  RunLoop();
  // However the loop ended, what the lanes still hold runs (or fails) before the runtime stops.
  if (lanes_) lanes_->Drain();
}

void Runtime::RunLoop() {
  // A transport probed on a timer (MPI) sleeps for tens of microseconds at a time: without this
  // the kernel may let each sleep run 50 us long (the default timer slack), doubling the
  // negotiation latency. The slack is per thread; this one is the loop thread.
  if (channel_->fds().empty()) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  std::vector<pollfd> fds;
  fds.push_back(pollfd{queue_.wake_fd(), POLLIN, 0});
  for (int fd : channel_->fds()) fds.push_back(pollfd{fd, POLLIN, 0});
  std::vector<std::pair<int, std::string>> inbox;
  // The first pass does not block: frames that arrived behind the hellos are already buffered.
  bool first_pass = true;
  while (true) {
    int timeout_ms = first_pass ? 0 : -1;
    first_pass = false;
    if (coordinator_) {
      const auto deadline = coordinator_->NextDeadline();
      if (deadline != Clock::time_point::max()) {
        const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
        timeout_ms = wait.count() <= 0 ? 0 : static_cast<int>((wait.count() + 999) / 1000);
      }
    }
    if (shutdown_requested_ && !shutdown_sent_) timeout_ms = 0;
    // A transport without descriptors (MPI) is probed every poll_interval().
    const auto probe = channel_->fds().empty() ? channel_->poll_interval(!entries_.empty())
                                               : std::chrono::microseconds(0);
    if (probe.count() > 0 && (timeout_ms < 0 || timeout_ms * 1000 > probe.count())) {
      const timespec ts{0, static_cast<long>(probe.count()) * 1000};
      ppoll(fds.data(), fds.size(), &ts, nullptr);
    } else {
      poll(fds.data(), fds.size(), timeout_ms);
    }
    if (fds[0].revents & POLLIN) queue_.ClearWake();
    if (lanes_) {  // a lane that failed woke us
      Status failed = lanes_->TakeFailure();
      if (!failed.ok()) {
        Abort(failed);
        return;
      }
    }
    if (coordinator_) ApplyPendingParams();
    const auto now = Clock::now();

    RequestList out;
    out.rank = options_.rank;
    const bool traced = events_.enabled();
    for (TensorEntry& e : queue_.Drain()) {
      Request& req = e.request;
      if (traced) {
        const int64_t t = timeline::NowMicros();
        events_.Emit({e.enqueue_us, timeline::Phase::kBegin, req.name, timeline::kQueue, ""});
        events_.Emit({t, timeline::Phase::kEnd, req.name, timeline::kQueue, ""});
        events_.Emit({t, timeline::Phase::kBegin, req.name,
                      timeline::NegotiateActivity(OpTypeName(req.op)), ""});
      }
      const int64_t bytes = req.ByteSize();
      // Eager data travels from host memory; GPU tensors always take the data plane.
      if (req.op == OpType::kAllreduce && req.device == kCpuDevice && bytes > 0 &&
          bytes <= options_.eager_threshold_bytes) {
        req.eager = true;
        req.data.assign(static_cast<const char*>(e.input), static_cast<size_t>(bytes));
      }
      if (coordinator_) {
        coordinator_->Add(e.request, now);
      } else if (auto ref = cache_.Lookup(e.request)) {
        ref->eager = req.eager;
        ref->data = req.data;
        sent_refs_[RefKey(*ref)] = e.request.name;
        out.cached.push_back(std::move(*ref));
      } else {
        out.requests.push_back(e.request);
      }
      std::string name = e.request.name;
      entries_.emplace(std::move(name), std::move(e));
    }
    if (shutdown_requested_ && !shutdown_sent_) {
      shutdown_sent_ = true;
      if (coordinator_) {
        coordinator_->RequestShutdown(options_.rank);
      } else {
        out.shutdown = true;
      }
    }
    Status s;
    if (!coordinator_ && (!out.requests.empty() || !out.cached.empty() || out.shutdown)) {
      s = channel_->SendToCoordinator(SerializeRequestList(out));
      DADT_LOG(TRACE) << "sent " << out.requests.size() << " requests, " << out.cached.size()
                      << " cached refs" << (out.shutdown ? ", shutdown" : "");
    }
    inbox.clear();
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
        if (HandleResponses(*list)) return;
      }
    }
    if (s.ok()) s = read;
    if (s.ok() && coordinator_) {
      ResponseList list = coordinator_->Compute(Clock::now());
      if (!list.Empty()) {
        DADT_LOG(TRACE) << "releasing " << list.responses.size() << " responses, "
                        << list.resend.size() << " resends, pending " << coordinator_->pending();
        if (options_.size > 1) s = channel_->Broadcast(SerializeResponseList(list));
        if (HandleResponses(list)) return;
      }
    }
    if (!s.ok()) {
      Abort(s, channel_->closed_rank());
      return;
    }
  }
}

}  // namespace core
}  // namespace dadt
