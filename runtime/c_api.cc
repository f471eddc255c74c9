// The C API over dadt::core::Runtime. This file holds the process's one runtime handle (the only
// process-wide state of the library) and converts DLPack views to the core's requests.
#include "runtime/c_api.h"

#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/device.h"
#include "runtime/backends/engine_choice.h"
#include "runtime/common/env.h"
#include "runtime/core/elastic_membership.h"
#include "runtime/core/engine_setup.h"
#include "runtime/core/op_layout.h"
#include "runtime/core/runtime.h"
#include "runtime/dlpack_types.h"

namespace {

using dadt::DataType;
using dadt::Status;
using dadt::StatusOr;
using dadt::core::Runtime;
using dadt::capi::CheckLayout;
using dadt::capi::ToDataType;
using dadt::capi::ToDLDataType;

// The process's runtime. Calls take a shared reference under the mutex, so a concurrent shutdown
// never frees it under them. After shutdown the object stays (stopped) so that waits on its
// handles still answer ABORTED; the next init replaces it.
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

int Fail(const Status& s) {
  t_last_error = s.message();
  t_last_code = static_cast<int>(s.code());
  return t_last_code;
}

Status NotInitialized() {
  return dadt::PreconditionFailed("dadt has not been initialized; use dadt.init().");
}

std::shared_ptr<Runtime> Get() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime;
}

std::shared_ptr<Runtime> GetRunning() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_running ? g_runtime : nullptr;
}

// One field of the running job's geometry, or -1 when not initialized.
template <typename F>
int GeometryOr(F field) {
  auto rt = GetRunning();
  return rt ? field(rt->options()) : -1;
}

struct OwnedOutput {
  DLManagedTensor managed;
  std::unique_ptr<dadt::core::HostBuffer> buffer;
  std::vector<int64_t> shape;
};

void DeleteOwnedOutput(DLManagedTensor* m) { delete static_cast<OwnedOutput*>(m->manager_ctx); }

}  // namespace

extern "C" {

void dadt_init_options_default(dadt_init_options* o) {
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->fusion_threshold_bytes = -1;
  o->cycle_time_ms = -1.0;
  o->cache_capacity = -1;
  o->backend = nullptr;
}

void dadt_op_desc_default(dadt_op_desc* d) {
  std::memset(d, 0, sizeof(*d));
  d->struct_size = sizeof(*d);
  d->reduce_op = DADT_REDUCE_AVERAGE;
  d->prescale_factor = 1.0;
  d->postscale_factor = 1.0;
  d->group_id = -1;
}

int dadt_init(const dadt_init_options* options) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_running) return DADT_OK;
  auto opts = dadt::core::RuntimeOptions::FromEnv();
  if (!opts.ok()) return Fail(opts.status());
  if (options) {
    if (options->fusion_threshold_bytes >= 0) opts->fusion_threshold_bytes = options->fusion_threshold_bytes;
    if (options->cycle_time_ms >= 0) opts->cycle_time_ms = options->cycle_time_ms;
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

int dadt_cuda_available(void) {
  std::string why;
  if (dadt::backends::DeviceRegistry::VisibleDevices(&why) > 0) return 1;
  Fail(dadt::PreconditionFailed(why));
  return 0;
}

int dadt_cuda_cast(const DLTensor* in, const DLTensor* out, uintptr_t stream) {
  auto in_type = ToDataType(in->dtype, "cast input");
  if (!in_type.ok()) return Fail(in_type.status());
  auto out_type = ToDataType(out->dtype, "cast output");
  if (!out_type.ok()) return Fail(out_type.status());
  const dadt::Shape shape(in->shape, in->shape + in->ndim);
  if (in->device.device_type != kDLCUDA || out->device.device_type != kDLCUDA ||
      in->device.device_id != out->device.device_id ||
      shape != dadt::Shape(out->shape, out->shape + out->ndim)) {
    return Fail(dadt::InvalidArgument("cuda_cast: input and output must be CUDA tensors of one "
                                      "shape on one GPU"));
  }
  Status s = CheckLayout(*in, "cast input");
  if (s.ok()) s = CheckLayout(*out, "cast output");
  if (s.ok()) {
    s = dadt::backends::DeviceRegistry::CastOnStream(
        static_cast<const char*>(in->data) + in->byte_offset, *in_type,
        static_cast<char*>(out->data) + out->byte_offset, *out_type, dadt::NumElements(shape), stream);
  }
  return s.ok() ? DADT_OK : Fail(s);
}

int dadt_nccl_version(void) { return dadt::backends::DeviceRegistry::NcclVersion(); }

int dadt_cuda_copy_batch(const uintptr_t* src, const uintptr_t* dst, const int64_t* bytes, int count,
                         uintptr_t stream) {
  if (count < 0 || (count > 0 && (!src || !dst || !bytes))) {
    return Fail(dadt::InvalidArgument("cuda_copy_batch: null span arrays"));
  }
  std::vector<dadt::backends::CopySpan> spans;
  spans.reserve(count);
  for (int i = 0; i < count; ++i) {
    if (bytes[i] < 0 || (bytes[i] > 0 && dst[i] == 0)) {
      return Fail(dadt::InvalidArgument("cuda_copy_batch: span " + std::to_string(i) +
                                        " has a negative size or no destination"));
    }
    spans.push_back({reinterpret_cast<const void*>(src[i]), reinterpret_cast<void*>(dst[i]), bytes[i]});
  }
  dadt::Status s = dadt::backends::DeviceRegistry::CopyOnStream(spans, stream);
  return s.ok() ? DADT_OK : Fail(s);
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

int dadt_add_process_set(const int32_t* ranks, int n, int32_t* id) {
  auto rt = GetRunning();
  if (!rt) return Fail(NotInitialized());
  if (n < 0 || (n > 0 && !ranks)) return Fail(dadt::InvalidArgument("add_process_set: no ranks"));
  auto added = rt->AddProcessSet(std::vector<int>(ranks, ranks + n));
  if (!added.ok()) return Fail(added.status());
  if (id) *id = *added;
  return DADT_OK;
}

int dadt_remove_process_set(int32_t id, int* removed) {
  auto rt = GetRunning();
  if (!rt) return Fail(NotInitialized());
  auto done = rt->RemoveProcessSet(id);
  if (!done.ok()) return Fail(done.status());
  if (removed) *removed = *done ? 1 : 0;
  return DADT_OK;
}

int dadt_process_set_ids(int32_t* out, int n) {
  auto rt = GetRunning();
  if (!rt) return (Fail(NotInitialized()), -1);
  const std::vector<int32_t> ids = rt->process_sets().ids();
  for (int i = 0; out != nullptr && i < n && i < static_cast<int>(ids.size()); ++i) out[i] = ids[i];
  return static_cast<int>(ids.size());
}

int dadt_process_set_ranks(int32_t id, int32_t* out, int n) {
  auto rt = GetRunning();
  if (!rt) return (Fail(NotInitialized()), -1);
  auto set = rt->process_sets().Find(id);
  const std::string id_text = std::to_string(id);
  if (!set) return (Fail(dadt::InvalidArgument("process set " + id_text + " is not registered")), -1);
  for (int i = 0; out != nullptr && i < n && i < set->size(); ++i) out[i] = set->ranks[i];
  return set->size();
}

int64_t dadt_enqueue(const dadt_op_desc* desc, const DLTensor* input, const DLTensor* output) {
  auto rt = GetRunning();
  if (!rt) return (Fail(NotInitialized()), -1);
  dadt::core::TensorEntry e;
  dadt::core::Request& r = e.request;
  const bool point_to_point =
      desc->op_type == DADT_OP_PEER_EXCHANGE || desc->op_type == DADT_OP_NEIGHBOR_ALLGATHER;
  if ((desc->op_type < DADT_OP_ALLREDUCE || desc->op_type > DADT_OP_JOIN) && !point_to_point) {
    Fail(dadt::InvalidArgument("unknown op_type " + std::to_string(desc->op_type) +
                               " (process sets: dadt_add_process_set, dadt_remove_process_set)"));
    return -1;
  }
  r.op = static_cast<dadt::OpType>(desc->op_type);
  r.name = desc->name ? desc->name : "";
  r.reduce_op = static_cast<dadt::ReduceOp>(desc->reduce_op);
  r.prescale = desc->prescale_factor;
  r.postscale = desc->postscale_factor;
  r.root = desc->root_rank;
  r.group_id = desc->group_id;
  r.group_size = desc->group_size;
  if (desc->splits && desc->num_splits > 0) r.splits.assign(desc->splits, desc->splits + desc->num_splits);
  const bool has_stream = desc->struct_size >= offsetof(dadt_op_desc, staged_device) + sizeof(int32_t);
  if (desc->struct_size >= offsetof(dadt_op_desc, process_set_id) + sizeof(int32_t)) {
    r.process_set_id = desc->process_set_id;
  }
  if (point_to_point && desc->struct_size >= offsetof(dadt_op_desc, withdraw) + sizeof(int32_t)) {
    if (desc->send_ranks && desc->num_send_ranks > 0) {
      r.send_ranks.assign(desc->send_ranks, desc->send_ranks + desc->num_send_ranks);
    }
    if (desc->recv_ranks && desc->num_recv_ranks > 0) {
      r.recv_ranks.assign(desc->recv_ranks, desc->recv_ranks + desc->num_recv_ranks);
    }
    if (desc->op_type == DADT_OP_PEER_EXCHANGE && desc->withdraw) r.withdraw = true;
  }
  if (has_stream) {
    e.stream = desc->stream;
    if (desc->staged_device >= 0) r.device = dadt::kStagedGpuDevice;
  }
  if (input) {
    auto dtype = ToDataType(input->dtype, r.name);
    if (!dtype.ok()) return (Fail(dtype.status()), -1);
    Status s = CheckLayout(*input, r.name);
    if (!s.ok()) return (Fail(s), -1);
    r.dtype = *dtype;
    r.shape.assign(input->shape, input->shape + input->ndim);
    e.input = static_cast<const char*>(input->data) + input->byte_offset;
    if (input->device.device_type == kDLCUDA) r.device = input->device.device_id;
  }
  if (output) {
    Status s = CheckLayout(*output, r.name);
    if (!s.ok()) return (Fail(s), -1);
    auto dtype = ToDataType(output->dtype, r.name);
    if (!dtype.ok()) return (Fail(dtype.status()), -1);
    // Checked against the input by the runtime (runtime/core/entry_checks.h).
    e.output_view.given = true;
    e.output_view.against_input = input != nullptr;
    e.output_view.dtype = *dtype;
    e.output_view.shape.assign(output->shape, output->shape + output->ndim);
    e.output_view.device = output->device.device_type == kDLCUDA ? output->device.device_id : dadt::kCpuDevice;
    e.output = static_cast<char*>(output->data) + output->byte_offset;
  }
  auto h = rt->Enqueue(std::move(e));
  if (!h.ok()) return (Fail(h.status()), -1);
  return *h;
}

int dadt_poll(int64_t handle) {
  auto rt = Get();
  return rt ? rt->handles().Poll(handle) : -1;
}

int dadt_wait(int64_t handle, char* msg, size_t msg_len) {
  return dadt_wait_for(handle, -1, msg, msg_len);
}

int dadt_wait_for(int64_t handle, int64_t timeout_ms, char* msg, size_t msg_len) {
  auto rt = Get();
  if (!rt) return Fail(NotInitialized());
  Status s;
  if (timeout_ms < 0) {
    s = rt->handles().Wait(handle);
  } else if (!rt->handles().WaitFor(handle, std::chrono::milliseconds(timeout_ms), &s)) {
    return DADT_PENDING;
  }
  if (!s.ok() && msg && msg_len) {
    std::strncpy(msg, s.message().c_str(), msg_len - 1);
    msg[msg_len - 1] = '\0';
  }
  if (!s.ok()) Fail(s);
  return static_cast<int>(s.code());
}

DLManagedTensor* dadt_take_output(int64_t handle) {
  auto rt = Get();
  if (!rt) return nullptr;
  auto buf = rt->handles().TakeOutput(handle);
  if (!buf) return nullptr;
  auto* o = new OwnedOutput();
  o->shape = buf->shape;
  DLTensor& t = o->managed.dl_tensor;
  t.data = buf->ptr();
  t.device = buf->device >= 0 ? DLDevice{kDLCUDA, buf->device} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(o->shape.size());
  t.dtype = ToDLDataType(buf->dtype);
  t.shape = o->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  o->buffer = std::move(buf);
  o->managed.manager_ctx = o;
  o->managed.deleter = DeleteOwnedOutput;
  return &o->managed;
}

int64_t dadt_handle_int_result(int64_t handle) {
  auto rt = Get();
  return rt ? rt->handles().IntResult(handle) : -1;
}

int dadt_handle_received_splits(int64_t handle, int64_t* out, int n) {
  auto rt = Get();
  if (!rt) return -1;
  auto splits = rt->handles().ReceivedSplits(handle);
  for (int i = 0; i < n && i < static_cast<int>(splits.size()); ++i) out[i] = splits[i];
  return static_cast<int>(splits.size());
}

void dadt_release(int64_t handle) {
  auto rt = Get();
  if (rt) rt->handles().Release(handle);
}

}  // extern "C"
