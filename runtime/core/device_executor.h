// DeviceExecutor: runs the responses whose tensors live in GPU memory on this rank.
//
// The Executor hands it every allreduce, allgather, broadcast, alltoall and reducescatter whose
// entries are on a GPU. It owns this rank's DeviceContext (runtime/backends/device.h) and the
// device engine (NCCL) that shares its stream, and works like the host executor with three
// differences:
//   1. Ordering, not waiting: it first makes its stream wait for each entry's framework stream
//      (an event), then enqueues the fusion copies (one batched kernel), scaling, the collective
//      and the copies out, all on its stream. The loop thread never waits for the GPU.
//   2. Completion: handles are completed by the DeviceContext's completion thread once the GPU has
//      passed the work (or with the engine's asynchronous error, e.g. a dead peer, after which the
//      communicator is aborted), so the framework thread that waits sees finished memory.
//   3. Outputs of allgather, alltoall and reducescatter are device memory of the entry's GPU.
// Created by the Executor when the first GPU response arrives; every rank reaches that response
// in the same order, which makes the engine's creation (a collective bootstrap) safe.
// Runs on the loop thread only, except the completion callbacks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/device.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/negotiation/message.h"
#include "runtime/core/tensor_queue.h"

namespace dadt {
namespace core {

class DeviceExecutor {
 public:
  // Completes one entry (its name and handle) with a result; called from the completion thread.
  using Completer = std::function<void(const std::string& name, int64_t handle, HandleResult result)>;

  // Creates the context on `device` and the engine `engine` ("nccl") over it; `options` carries
  // the geometry, the store and the timeouts.
  static StatusOr<std::unique_ptr<DeviceExecutor>> Create(const std::string& engine, int device,
                                                          backends::BackendOptions options,
                                                          Completer complete);
  ~DeviceExecutor();

  int device() const { return device_->device(); }
  const char* backend_name() const { return backend_->Name(); }

  // Enqueues the response's work for `mine` (this rank's entries, parallel to r.names; null
  // where this rank has none, e.g. after join) and arranges their completion. A non-OK return is
  // an engine failure that breaks the job; the entries were completed with it.
  Status Execute(const Response& r, const std::vector<TensorEntry*>& mine);

 private:
  DeviceExecutor(int size, int rank, Completer complete)
      : size_(size), rank_(rank), complete_(std::move(complete)) {}
  Status Allreduce(const Response& r, const std::vector<TensorEntry*>& mine);
  StatusOr<std::unique_ptr<HostBuffer>> Allgather(const Response& r, const TensorEntry& e);
  Status Broadcast(const Response& r, const TensorEntry& e);
  StatusOr<std::unique_ptr<HostBuffer>> Alltoall(const Response& r, const TensorEntry& e,
                                                 std::vector<int64_t>* splits);
  StatusOr<std::unique_ptr<HostBuffer>> Reducescatter(const Response& r, const TensorEntry& e);
  StatusOr<std::unique_ptr<HostBuffer>> AllocateOutput(DataType dtype, Shape shape);
  StatusOr<void*> Fusion(int64_t bytes);
  // Postscale, then Average's division by the number of ranks, on the device.
  Status PostProcess(const Response& r, void* buf, int64_t n);

  const int size_;
  const int rank_;
  Completer complete_;
  // Declared in this order so that the context (whose completion thread polls the engine) goes
  // first: it drains the outstanding work, then the engine's communicator is torn down.
  std::unique_ptr<backends::Backend> backend_;
  std::unique_ptr<backends::DeviceContext> device_;
  std::shared_ptr<void> fusion_;
  int64_t fusion_bytes_ = 0;
};

}  // namespace core
}  // namespace dadt
