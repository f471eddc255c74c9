// The C API's collectives (runtime/c_api.h): describing one in dadt_enqueue from DLPack views, and
// its handle's life: poll, wait, the output the runtime allocated, release.
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/c_api.h"
#include "runtime/c_api_internal.h"
#include "runtime/core/runtime.h"
#include "runtime/dlpack_types.h"

namespace {

using dadt::DataType;
using dadt::Status;
using dadt::StatusOr;
using dadt::capi::CheckLayout;
using dadt::capi::Fail;
using dadt::capi::Get;
using dadt::capi::GetRunning;
using dadt::capi::NotInitialized;
using dadt::capi::ToDataType;
using dadt::capi::ToDLDataType;

struct OwnedOutput {
  DLManagedTensor managed;
  std::unique_ptr<dadt::core::HostBuffer> buffer;
  std::vector<int64_t> shape;
};

void DeleteOwnedOutput(DLManagedTensor* m) { delete static_cast<OwnedOutput*>(m->manager_ctx); }

}  // namespace

extern "C" {

void dadt_op_desc_default(dadt_op_desc* d) {
  std::memset(d, 0, sizeof(*d));
  d->struct_size = sizeof(*d);
  d->reduce_op = DADT_REDUCE_AVERAGE;
  d->prescale_factor = 1.0;
  d->postscale_factor = 1.0;
  d->group_id = -1;
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
