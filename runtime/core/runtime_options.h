// RuntimeOptions: everything a Runtime is started with -- the job's geometry, the engines, the
// negotiation and fusion knobs -- and FromEnv, which reads them from the launcher's environment
// (runtime/common/env.h, docs/running.md).
//
//   auto opts = RuntimeOptions::FromEnv();   // junk values are InvalidArgument naming them
//   if (!opts.ok()) return opts.status();
//   opts->fusion_threshold_bytes = 0;        // then adjust by hand, e.g. in tests
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "runtime/backends/engine_choice.h"
#include "runtime/common/status.h"
#include "runtime/common/types.h"
#include "runtime/core/liveness.h"
#include "runtime/core/stall_inspector.h"

namespace dadt {
namespace core {

struct RuntimeOptions : JobGeometry {
  int64_t fusion_threshold_bytes = 128LL << 20;
  double cycle_time_ms = 1.0;
  // The user chose the cycle time (DADT_CYCLE_TIME, or init's cycle_duration_ms). Otherwise it
  // follows the data plane's link once that is measured (CycleTimeMsForLink).
  bool cycle_time_given = false;
  int64_t cache_capacity = 1024;
  // Allreduces up to this many bytes travel with their negotiation (eager_reduce.h); 0 disables.
  int64_t eager_threshold_bytes = 32 * 1024;
  // The engines (runtime/backends/engine_choice.h): what init() asked for (c_api.cc), what the
  // launcher's environment says (FromEnv), and the choice ChooseEngines settles from them, the
  // build and the GPUs (FromEnv from the environment alone, then ConnectEngines for the job).
  // Options made by hand (tests) ask for no device data plane.
  backends::EngineRequest engine_request;
  backends::EngineEnvironment engine_environment{"", "none"};
  backends::EngineChoice engines;
  // Allreduce inside hosts, then across them (DADT_HIERARCHICAL_ALLREDUCE).
  bool hierarchical_allreduce = false;
  // An MPI_Comm (as uintptr_t) for controller and data plane, 0 for MPI_COMM_WORLD.
  uintptr_t native_comm = 0;
  std::string iface;
  std::string secret;
  std::chrono::milliseconds start_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds op_timeout{std::chrono::seconds(300)};
  int64_t segment_bytes = 0;  // DADT_GLOO_SEGMENT_BYTES; 0: the engine's default
  bool shm_allreduce = true;  // DADT_SHM_ALLREDUCE: Gloo allreduces through shared memory on one host
  // DADT_GLOO_THREADS: collectives in flight at once on engines that can (lanes.h); 1: one.
  int64_t gloo_threads = 2;
  // DADT_REALTIME_THREADS (off by default): with the TCP control plane, the loop thread, the lanes
  // and Gloo's transport thread run at real-time priority where allowed (thread_priority.h).
  bool realtime_threads = false;
  StallOptions stall;  // rank 0's stall inspector (DADT_STALL_*)
  // Heartbeats and the unresponsive-rank check (DADT_LIVENESS_*, liveness.h); off unless FromEnv.
  LivenessOptions liveness = LivenessOptions::Off();
  // Which init() of this process this runtime is (0 for the first; the C API counts them). Every
  // rendezvous key the engines use is scoped by it (rendezvous/scoped_store.h).
  int64_t incarnation = 0;
  // The engines' store scope; "" means IncarnationScope(incarnation). Elastic rounds use
  // ElasticScope(round) (elastic_membership.h).
  std::string store_scope;
  // Elastic mode (DADT_ELASTIC=1): the geometry above comes from the launcher's round, joined
  // at init with this worker id (DADT_ELASTIC_WORKER_ID) within elastic_timeout.
  bool elastic = false;
  std::string elastic_worker_id;
  std::chrono::milliseconds elastic_timeout{std::chrono::seconds(600)};

  // Real-time loop, lanes and transport threads: asked for, and the control plane is the TCP star
  // (MPI's collectives spin while they wait; a real-time thread spinning would starve training).
  bool UsesRealtimeThreads() const {
    return realtime_threads && engines.control_plane == backends::ControlPlane::kTcpStar;
  }

  std::chrono::microseconds cycle_time() const { return CycleTimeFromMs(cycle_time_ms); }
  // The default cycle time over links that move `bytes_per_second` one way: the default 1 ms up
  // to 160 MB/s, then 1 ms per 160 MB/s, up to 5 ms. Over a link ten times faster the same bytes
  // go ten times as fast, and the fixed cost of each collective (wake-ups, messages, completions,
  // on cores the training threads need) then weighs more than waiting a little longer to fuse
  // more: on the ResNet-50 and 162-tensor benchmarks at 10 Gbit/s a 3-10 ms cycle stepped 8-15%
  // faster than 1 ms, and at 1 Gbit/s 1 ms was the faster (docs/benchmarks/log.md, "Cycle time
  // and the link").
  static double CycleTimeMsForLink(double bytes_per_second);
  static std::chrono::microseconds CycleTimeFromMs(double ms) {
    return std::chrono::microseconds(static_cast<int64_t>(std::llround(ms * 1000)));
  }

  // The launcher's environment (docs/running.md); junk values are InvalidArgument naming them.
  static StatusOr<RuntimeOptions> FromEnv();
};

}  // namespace core
}  // namespace dadt
