// Executor: runs the coordinator's responses on this rank's data plane.
//
// For each Response it gathers this rank's entries, stages them (a fused allreduce is copied into
// the fusion buffer; a lone tensor is reduced in place in its output, with no extra copy), calls
// the Backend, applies scale factors, copies results out and completes the handles. A rank that
// called join() has no entry for an allreduce and contributes zeros of the announced size.
// Runs on the loop thread, or on a lane's thread for the responses it was given (lanes.h).
//
// Who completes a handle: Executor::Complete, always. The host ops compute a HandleResult and
// ExecuteOne completes their entry (a fused allreduce completes each of its entries; join and the
// eager allreduce theirs); the device path completes its entries from the DeviceContext's
// completion thread through the same function; lanes and the Runtime complete what they cancel
// through Finish.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/core/device_executor.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/negotiation/message.h"
#include "runtime/core/tensor_queue.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

// The reserved name under which a rank's join() request travels.
inline constexpr const char kJoinName[] = "__dadt.join__";

class Executor {
 public:
  // `events` (may be null) receives the per-tensor phases: <OP> around the whole execution,
  // MEMCPY_IN/OUT_FUSION_BUFFER, <BACKEND>_<OP> (e.g. GLOO_ALLREDUCE) or EAGER_ALLREDUCE.
  Executor(backends::Backend* backend, int rank, int size, HandleTable* handles,
           TensorQueue* queue, const timeline::EventStream* events = nullptr);

  // Executes `response`, consuming the matching entries. A non-OK return is a backend failure that
  // breaks the job (the consumed entries are already completed with it); mismatch errors, and a
  // caller's allgather / reducescatter output of the wrong size (this rank still takes part in
  // the collective, through a scratch buffer), are delivered to the handles and return OK.
  Status Execute(const Response& response, EntryMap& entries);

  // Whether responses of type `t` move tensor data (the collectives; not join, barrier, error).
  static bool MovesData(Response::Type t);

  // Completes an entry (and forgets its name) with `result`: Complete with this Executor's queue
  // and handles.
  void Finish(TensorEntry& entry, HandleResult result);
  // The one way a tensor is completed: its name leaves the queue's in-flight set, then its handle
  // gets `result` (waking its waiter). Any thread (the queue and the handle table lock).
  // `key` is the tensor's EntryKey.
  static void Complete(TensorQueue* queue, HandleTable* handles, const std::string& key,
                       int64_t handle, HandleResult result);

  // GPU tensors go to a DeviceExecutor running `engine` ("nccl"), created over `options` (the
  // job's geometry, store and timeouts) when the first GPU response arrives. Without this call,
  // or with an empty engine, GPU responses fail with a clear error.
  void EnableDevice(const std::string& engine, const backends::BackendOptions& options);
  // Drains and destroys the DeviceExecutor (its communicator included); at shutdown, after the
  // loop thread stopped.
  void ReleaseDevice() { device_.reset(); }

 private:
  Status ExecuteOne(const Response& r, EntryMap& entries);
  Status Allreduce(const Response& r, EntryMap& entries);
  // A (fused) allreduce through the fusion buffer: copy in (a lone tensor is reduced in its own
  // output), prescale, the backend's Allreduce, postscale and Average, copy out. `mine[i]` is
  // this rank's entry for r.names[i], null for a joined rank (zeros).
  Status AllreduceThroughBuffer(const Response& r, const std::vector<TensorEntry*>& mine, int64_t total,
                                const std::string& collective, const EntryMap& entries);
  // The per-tensor ops: the result to complete `e` with (its status may fail this tensor only),
  // or a failure that breaks the job (ExecuteOne then completes `e` with it).
  StatusOr<HandleResult> RunEntry(const Response& r, TensorEntry& e);
  StatusOr<HandleResult> Allgather(const Response& r, TensorEntry& e);
  StatusOr<HandleResult> Broadcast(const Response& r, TensorEntry& e);
  StatusOr<HandleResult> Alltoall(const Response& r, TensorEntry& e);
  StatusOr<HandleResult> Reducescatter(const Response& r, TensorEntry& e);
  // Point to point (Backend::Exchange, message tags from the coordinator's sequence in r.root):
  // the pair's transfer (int_result: the partner, -1 when withdrawn), and a neighbor allgather
  // (the receives land in recv_ranks order in the caller's output).
  StatusOr<HandleResult> PeerExchange(const Response& r, TensorEntry& e);
  StatusOr<HandleResult> NeighborAllgather(const Response& r, TensorEntry& e);
  Status ExecuteOnDevice(const Response& r, EntryMap& entries);
  Status DeviceFor(int device, const std::string& name);
  uint8_t* FusionBuffer(int64_t bytes);
  // Emits `phase` of `activity` for each of `names` that this rank holds (no-op when disabled).
  void Mark(const std::vector<std::string>& names, const std::string& activity,
            timeline::Phase phase, const EntryMap& entries, bool with_args = false);

  backends::Backend* backend_;
  int rank_;
  int size_;
  HandleTable* handles_;
  TensorQueue* queue_;
  const timeline::EventStream* events_;
  std::unique_ptr<uint8_t[]> fusion_;
  int64_t fusion_bytes_ = 0;
  std::unique_ptr<uint8_t[]> adasum_scratch_;  // Adasum: what the partner of a level sent
  int64_t adasum_scratch_bytes_ = 0;
  std::string device_engine_;
  backends::BackendOptions device_options_;
  std::unique_ptr<DeviceExecutor> device_;
};

}  // namespace core
}  // namespace dadt
