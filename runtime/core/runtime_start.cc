// Runtime::Start and the constructor: how a Runtime's parts are wired together once
// ConnectEngines (engine_setup.h) has settled and connected the engines. Runs on the thread that
// calls Start; the loop thread starts last, when everything it touches exists.
#include <cstdio>
#include <string>
#include <utility>

#include "runtime/common/env.h"
#include "runtime/core/runtime.h"

namespace dadt {
namespace core {

StatusOr<std::unique_ptr<Runtime>> Runtime::Start(const RuntimeOptions& requested,
                                                  std::unique_ptr<KeyValueStore> store) {
  auto engines = ConnectEngines(requested, std::move(store));
  if (!engines.ok()) return engines.status();
  std::unique_ptr<Runtime> rt(new Runtime(std::move(*engines)));
  // Before rank 0's tools: their failure is told to the others through the control plane, which
  // a rank waiting in the liveness exchange would not read.
  DADT_RETURN_IF_ERROR(rt->StartLiveness());
  Status setup = rt->StartRankZeroTools();
  if (!setup.ok()) {
    // Every rank is connected by now and would only learn of a closed channel: tell them why.
    if (rt->coordinator_ && rt->options_.size > 1) {
      const ResponseList why = ResponseList::Shutdown(setup.message(), /*cause_rank=*/0);
      (void)rt->channel_->Broadcast(SerializeResponseList(why));
    }
    return setup;
  }
  rt->loop_ = std::thread([r = rt.get()] { r->LoopMain(); });
  return rt;
}

Runtime::Runtime(Engines engines)
    : options_(engines.options),
      store_(std::move(engines.store)),
      scoped_store_(std::move(engines.scoped_store)),
      backend_(std::move(engines.backend)),
      channel_(std::move(engines.transport)),
      backend_name_(backend_->Name()),
      controller_multi_threaded_(channel_->multi_threaded()),
      handles_(options_.incarnation << 40),
      cache_(options_.cache_capacity) {
  Status s = store_->Set("ready/" + std::to_string(options_.rank), "1");
  // A cause an earlier incarnation recorded (its shutdown came from another rank) must not be
  // blamed for a failure of this one; "" reads as none.
  if (s.ok() && options_.incarnation > 0) s = store_->Set("cause/" + std::to_string(options_.rank), "");
  (void)s;  // progress reporting only
  if (options_.rank == 0) {
    coordinator_ = std::make_unique<Coordinator>(options_.size, options_.fusion_threshold_bytes,
                                                 options_.cycle_time(), &cache_);
  } else {
    negotiator_ = std::make_unique<WorkerNegotiator>(options_.rank, &cache_);
  }
  executor_ = std::make_unique<Executor>(backend_.get(), options_.rank, options_.size, &handles_,
                                         &queue_, &events_);
  executor_->EnableDevice(options_.engines.device_data_plane, engines.backend_options);
  sets_ = std::make_unique<SetBackends>(options_.engines.host_data_plane, engines.backend_options,
                                        executor_.get(), &handles_, &queue_, &events_);
  if (options_.size > 1) {
    lanes_ = Lanes::Create(backend_.get(), static_cast<int>(options_.gloo_threads), options_.rank,
                           options_.size, &handles_, &queue_, &events_,
                           options_.UsesRealtimeThreads(), [this] { queue_.Wake(); });
  }
  runner_ = std::make_unique<LanesAndExecutor>(lanes_.get(), executor_.get(), sets_.get());
  // Rank 0's replica is the coordinator's own cache, which it fills as it assigns.
  dispatcher_ = std::make_unique<ResponseDispatcher>(
      runner_.get(), &events_, coordinator_ ? nullptr : &cache_, [this](const Response& r) {
        if (autotune_) autotune_->OnExecuted(r);
      });
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
  if (coordinator_) {
    // Once per job, as the autotuner's lines: every rank normally has the same environment.
    for (const std::string& line : env::HorovodAliasNotices()) {
      std::fprintf(stderr, "dadt: %s\n", line.c_str());
    }
  }
  const std::string timeline = env::GetString(env::kTimeline);
  if (!timeline.empty() && timeline != env::kTimelineDynamic) {
    auto mark = env::GetBool(env::kTimelineMarkCycles, false);
    if (!mark.ok()) return mark.status();
    DADT_RETURN_IF_ERROR(StartTimeline(timeline, *mark));
  }
  return Status::OK();
}

}  // namespace core
}  // namespace dadt
