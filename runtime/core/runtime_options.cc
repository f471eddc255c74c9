// RuntimeOptions::FromEnv: the launcher -> worker contract and the tuning knobs (runtime/common/env.h,
// docs/running.md) read into RuntimeOptions, each junk value refused with a message naming it.
#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/backends/backend.h"
#include "runtime/common/env.h"
#include "runtime/core/runtime_options.h"

namespace dadt {
namespace core {

double RuntimeOptions::CycleTimeMsForLink(double bytes_per_second) {
  constexpr double kBytesPerSecondPerMs = 160e6;
  constexpr double kLongestMs = 5.0;
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second)) return env::kDefaultCycleTimeMs;
  return std::clamp(bytes_per_second / kBytesPerSecondPerMs, env::kDefaultCycleTimeMs, kLongestMs);
}

StatusOr<RuntimeOptions> RuntimeOptions::FromEnv() {
  RuntimeOptions o;
  // dadtrun's names first, then torchrun's (RANK, WORLD_SIZE, ...) for geometry; a multi-rank job
  // still needs dadtrun's rendezvous server.
  auto first_int = [](const char* a, const char* b, int64_t fallback) -> StatusOr<int64_t> {
    return env::IsSet(a) ? env::GetInt(a, fallback) : env::GetInt(b, fallback);
  };
  DADT_ASSIGN_OR_RETURN(o.rank, first_int(env::kRank, env::kTorchRank, 0));
  DADT_ASSIGN_OR_RETURN(o.size, first_int(env::kSize, env::kTorchWorldSize, 1));
  DADT_ASSIGN_OR_RETURN(o.local_rank, first_int(env::kLocalRank, env::kTorchLocalRank, o.rank));
  DADT_ASSIGN_OR_RETURN(o.local_size, first_int(env::kLocalSize, env::kTorchLocalWorldSize, o.size));
  DADT_ASSIGN_OR_RETURN(o.cross_rank, env::GetInt(env::kCrossRank, 0));
  DADT_ASSIGN_OR_RETURN(o.cross_size, env::GetInt(env::kCrossSize, 1));
  DADT_ASSIGN_OR_RETURN(o.fusion_threshold_bytes, env::GetFusionThreshold());
  DADT_ASSIGN_OR_RETURN(o.cycle_time_ms, env::GetDouble(env::kCycleTime, env::kDefaultCycleTimeMs));
  o.cycle_time_given = env::IsSet(env::kCycleTime);
  DADT_ASSIGN_OR_RETURN(o.cache_capacity, env::GetInt(env::kCacheCapacity, env::kDefaultCacheCapacity));
  DADT_ASSIGN_OR_RETURN(o.eager_threshold_bytes,
                  env::GetInt(env::kEagerThreshold, env::kDefaultEagerThresholdBytes));
  DADT_ASSIGN_OR_RETURN(o.hierarchical_allreduce, env::GetBool(env::kHierarchicalAllreduce, false));
  int64_t start_s, op_s;
  DADT_ASSIGN_OR_RETURN(start_s, env::GetInt(env::kStartTimeout, env::kDefaultStartTimeoutSeconds));
  DADT_ASSIGN_OR_RETURN(op_s, env::GetInt(env::kGlooTimeout, env::kDefaultGlooTimeoutSeconds));
  o.start_timeout = std::chrono::seconds(start_s);
  o.op_timeout = std::chrono::seconds(op_s);
  DADT_ASSIGN_OR_RETURN(o.segment_bytes, env::GetInt(env::kGlooSegmentBytes, 0));
  DADT_ASSIGN_OR_RETURN(o.shm_allreduce, env::GetBool(env::kShmAllreduce, true));
  if (o.segment_bytes < 0) {
    return InvalidArgument(std::string(env::kGlooSegmentBytes) + " must be >= 0 bytes (0: the " +
                           "default: sized to the link), got " + std::to_string(o.segment_bytes));
  }
  DADT_ASSIGN_OR_RETURN(o.gloo_threads, env::GetInt(env::kGlooThreads, env::kDefaultGlooThreads));
  if (o.gloo_threads < 1 || o.gloo_threads > 15) {
    return InvalidArgument(std::string(env::kGlooThreads) + " must be 1 to 15 (collectives in " +
                           "flight at once; default 2), got " + std::to_string(o.gloo_threads));
  }
  DADT_ASSIGN_OR_RETURN(o.realtime_threads, env::GetBool(env::kRealtimeThreads, false));
  DADT_ASSIGN_OR_RETURN(o.stall, StallOptions::FromEnv());
  DADT_ASSIGN_OR_RETURN(o.liveness, LivenessOptions::FromEnv());
  o.iface = env::GetString(env::kIface);
  o.secret = env::GetString(env::kSecret);
  // The engines as the environment alone chooses them, so that a junk DADT_CONTROLLER or
  // DADT_DEVICE_BACKEND is refused here; ConnectEngines settles them with init()'s request.
  backends::EngineEnvironment& e = o.engine_environment;
  e.controller = env::GetString(env::kController);
  e.device_data_plane = env::GetString(env::kDeviceBackend);
  e.under_mpirun = !env::IsSet(env::kRank) && env::DetectMpiLauncher() != env::MpiLauncher::kNone;
  e.has_rendezvous = env::IsSet(env::kRendezvousAddr);
  e.size = o.size;
  DADT_ASSIGN_OR_RETURN(o.engines, backends::ChooseEngines({}, e, backends::BackendRegistry::Names(),
                                                           backends::DeviceFacts{}));
  if (o.engines.control_plane == backends::ControlPlane::kMpi) {
    o.rank = 0;  // geometry comes from MPI at start; the environment may not have it
    o.size = 1;
  }
  DADT_ASSIGN_OR_RETURN(o.elastic, env::GetBool(env::kElastic, false));
  if (o.elastic) {
    if (o.engines.control_plane != backends::ControlPlane::kTcpStar) {
      return InvalidArgument(std::string(env::kElastic) + "=1 needs dadt's TCP controller (launch "
                             "with dadtrun --gloo): MPI cannot change the size of its world");
    }
    o.elastic_worker_id = env::GetString(env::kElasticWorkerId);
    if (o.elastic_worker_id.empty()) {
      return InvalidArgument(std::string(env::kElastic) + "=1 but " + env::kElasticWorkerId +
                             " is not set; elastic workers are started by dadtrun --min-np");
    }
    int64_t elastic_s;
    DADT_ASSIGN_OR_RETURN(elastic_s,
                          env::GetInt(env::kElasticTimeout, env::kDefaultElasticTimeoutSeconds));
    if (elastic_s <= 0) {
      return InvalidArgument(std::string(env::Source(env::kElasticTimeout)) + " must be > 0 seconds, got " +
                             std::to_string(elastic_s));
    }
    o.elastic_timeout = std::chrono::seconds(elastic_s);
  }
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return InvalidArgument("bad job geometry: rank " + std::to_string(o.rank) + " of size " +
                           std::to_string(o.size) + " (DADT_RANK/DADT_SIZE)");
  }
  if (o.cycle_time_ms < 0) return InvalidArgument(std::string(env::Source(env::kCycleTime)) + " must be >= 0");
  return o;
}

}  // namespace core
}  // namespace dadt
