// The C API over dadt::core::Runtime (runtime/c_api.h), by what it serves: here the process's one
// runtime handle (the only process-wide state of the library) and each thread's last error, the
// lifecycle (init, shutdown), the job's geometry and engines, elastic rounds, the timeline and the
// fusion settings; collectives and their handles in c_api_collectives.cc, process sets in
// c_api_process_sets.cc, the CUDA helpers in c_api_cuda.cc (what they share: c_api_internal.h).
#include "runtime/c_api.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/backends/backend.h"
#include "runtime/backends/engine_choice.h"
#include "runtime/c_api_internal.h"
#include "runtime/common/env.h"
#include "runtime/core/elastic_membership.h"
#include "runtime/core/engine_setup.h"
#include "runtime/core/op_layout.h"
#include "runtime/core/runtime.h"

namespace {

using dadt::Status;
using dadt::StatusOr;
using dadt::capi::Fail;
using dadt::capi::GetRunning;
using dadt::capi::NotInitialized;
using dadt::core::Runtime;

// The process's runtime (c_api_internal.h, Get). Calls take a shared reference under the mutex.
std::mutex g_mu;
std::shared_ptr<Runtime> g_runtime;
bool g_running = false;
// How many times this process has started a runtime (failed starts included): the incarnation
// number that scopes every rendezvous key of the next one (rendezvous/scoped_store.h).
int64_t g_incarnations = 0;
// Elastic workers (DADT_ELASTIC=1): the launcher's rounds this process has joined. Lives as long
// as the process, so the next init() waits for a round later than the last one it ran in.
dadt::core::ElasticMembership g_elastic;
thread_local std::string t_last_error;
thread_local int t_last_code = DADT_OK;

// One field of the running job's geometry, or -1 when not initialized.
template <typename F>
int GeometryOr(F field) {
  auto rt = GetRunning();
  return rt ? field(rt->options()) : -1;
}

}  // namespace

namespace dadt {
namespace capi {

int Fail(const Status& s) {
  t_last_error = s.message();
  t_last_code = static_cast<int>(s.code());
  return t_last_code;
}

Status NotInitialized() { return PreconditionFailed("dadt has not been initialized; use dadt.init()."); }

std::shared_ptr<Runtime> Get() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime;
}

std::shared_ptr<Runtime> GetRunning() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_running ? g_runtime : nullptr;
}

}  // namespace capi
}  // namespace dadt

extern "C" {

void dadt_init_options_default(dadt_init_options* o) {
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->fusion_threshold_bytes = -1;
  o->cycle_time_ms = -1.0;
  o->cache_capacity = -1;
  o->backend = nullptr;
}

int dadt_init(const dadt_init_options* options) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_running) return DADT_OK;
  auto opts = dadt::core::RuntimeOptions::FromEnv();
  if (!opts.ok()) return Fail(opts.status());
  if (options) {
    if (options->fusion_threshold_bytes >= 0) opts->fusion_threshold_bytes = options->fusion_threshold_bytes;
    if (options->cycle_time_ms >= 0) {
      opts->cycle_time_ms = options->cycle_time_ms;
      opts->cycle_time_given = true;
    }
    if (options->cache_capacity >= 0) opts->cache_capacity = options->cache_capacity;
    if (options->backend) opts->engine_request.executor = options->backend;
    const bool has_comm = options->struct_size >= offsetof(dadt_init_options, mpi_comm) +
                                                       sizeof(options->mpi_comm);
    if (has_comm && options->mpi_comm != 0) {
      opts->engine_request.mpi_comm = true;
      opts->native_comm = options->mpi_comm;
    }
  }
  opts->incarnation = g_incarnations++;
  if (opts->elastic) {
    auto joined = g_elastic.Join(*opts);  // blocks until a round includes this worker
    if (!joined.ok()) return Fail(joined.status());
    opts = std::move(joined);
  }
  auto rt = Runtime::Start(*opts, nullptr);
  if (!rt.ok()) return Fail(rt.status());
  g_runtime = std::shared_ptr<Runtime>(std::move(*rt));
  g_running = true;
  return DADT_OK;
}

int dadt_shutdown(void) {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_running) return DADT_OK;
    g_running = false;
    rt = g_runtime;
  }
  rt->Shutdown();  // pending handles complete with ABORTED
  return DADT_OK;
}

int dadt_is_initialized(void) { return GetRunning() != nullptr; }

int64_t dadt_elastic_round(void) { return g_elastic.round(); }
int64_t dadt_elastic_notice_at_init(void) { return g_elastic.notice_at_join(); }

int dadt_elastic_updates(int64_t* latest_round, int64_t* notice) {
  StatusOr<int64_t> round = g_elastic.LatestRound();
  if (!round.ok()) return Fail(round.status());
  StatusOr<int64_t> seq = g_elastic.CurrentNotice();
  if (!seq.ok()) return Fail(seq.status());
  *latest_round = *round;
  *notice = *seq;
  return DADT_OK;
}

const char* dadt_elastic_notice_kind(int64_t seq) {
  thread_local std::string t_kind;
  StatusOr<std::string> kind = g_elastic.NoticeKind(seq);
  if (!kind.ok()) return (Fail(kind.status()), nullptr);
  t_kind = *kind;
  return t_kind.c_str();
}

const char* dadt_last_error(void) { return t_last_error.c_str(); }
int dadt_last_error_code(void) { return t_last_code; }

int dadt_rank(void) { return GeometryOr([](const auto& o) { return o.rank; }); }
int dadt_size(void) { return GeometryOr([](const auto& o) { return o.size; }); }
int dadt_local_rank(void) { return GeometryOr([](const auto& o) { return o.local_rank; }); }
int dadt_local_size(void) { return GeometryOr([](const auto& o) { return o.local_size; }); }
int dadt_cross_rank(void) { return GeometryOr([](const auto& o) { return o.cross_rank; }); }
int dadt_cross_size(void) { return GeometryOr([](const auto& o) { return o.cross_size; }); }
const char* dadt_backend_name(void) {
  auto rt = GetRunning();
  return rt ? rt->options().engines.host_data_plane.c_str() : nullptr;
}

int dadt_mpi_threads_supported(void) {
  auto rt = GetRunning();
  return rt ? (rt->controller_multi_threaded() ? 1 : 0) : -1;
}

const char* dadt_built_backends(void) {
  static const std::string names = [] {
    std::string s;
    for (const auto& n : dadt::backends::BackendRegistry::Names()) s += (s.empty() ? "" : ",") + n;
    return s;
  }();
  return names.c_str();
}

const char* dadt_device_backend(void) {
  auto rt = GetRunning();
  if (!rt || rt->options().engines.device_data_plane.empty()) return nullptr;
  return rt->options().engines.device_data_plane.c_str();
}

int dadt_choose_engines(const char* executor, int with_mpi_comm, const char** control_plane,
                        const char** host_data_plane, const char** device_data_plane) {
  auto opts = dadt::core::RuntimeOptions::FromEnv();
  if (!opts.ok()) return Fail(opts.status());
  opts->engine_request.executor = executor ? executor : "";
  opts->engine_request.mpi_comm = with_mpi_comm != 0;
  auto choice = dadt::core::ChooseJobEngines(*opts, /*local_ranks=*/0);
  if (!choice.ok()) return Fail(choice.status());
  thread_local dadt::backends::EngineChoice t_choice;
  t_choice = *choice;
  *control_plane = dadt::backends::ControlPlaneName(t_choice.control_plane);
  *host_data_plane = t_choice.host_data_plane.c_str();
  *device_data_plane = t_choice.device_data_plane.c_str();
  return DADT_OK;
}

int dadt_start_timeline(const char* path, int mark_cycles) {
  auto rt = GetRunning();
  if (!rt) return Fail(NotInitialized());
  Status s = rt->StartTimeline(path ? path : "", mark_cycles != 0);
  return s.ok() ? DADT_OK : Fail(s);
}

int dadt_stop_timeline(void) {
  auto rt = GetRunning();
  if (!rt) return DADT_OK;
  Status s = rt->StopTimeline();
  return s.ok() ? DADT_OK : Fail(s);
}

int dadt_scatter_rows(int64_t rows, int size, int rank, int64_t* first_row, int64_t* count) {
  if (rows < 0 || size < 1 || rank < 0 || rank >= size) {
    return Fail(dadt::InvalidArgument("dadt_scatter_rows: bad arguments: rows " +
                                      std::to_string(rows) + ", rank " + std::to_string(rank) +
                                      " of size " + std::to_string(size)));
  }
  *first_row = dadt::core::ScatterFirstRow(rows, size, rank);
  *count = dadt::core::ScatterRows(rows, size, rank);
  return DADT_OK;
}

int dadt_env_fusion_threshold(int64_t* bytes, int* is_set) {
  StatusOr<int64_t> value = dadt::env::GetFusionThreshold();
  if (!value.ok()) return Fail(value.status());
  *bytes = *value;
  *is_set = dadt::env::IsSet(dadt::env::kFusionThreshold) ? 1 : 0;
  return DADT_OK;
}

const char* dadt_env_source(const char* name) { return dadt::env::Source(name); }

int dadt_set_fusion_params(int64_t fusion_threshold_bytes, double cycle_time_ms) {
  auto rt = GetRunning();
  if (!rt) return Fail(NotInitialized());
  Status s = rt->SetFusionParams(fusion_threshold_bytes, cycle_time_ms);
  return s.ok() ? DADT_OK : Fail(s);
}

}  // extern "C"
