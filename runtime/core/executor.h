// Executor: runs the coordinator's responses on this rank's data plane.
//
// For each Response it gathers this rank's entries, stages them (a fused allreduce is copied into
// the fusion buffer; a lone tensor is reduced in place in its output, with no extra copy), calls
// the Backend, applies scale factors, copies results out and completes the handles. A rank that
// called join() has no entry for an allreduce and contributes zeros of the announced size.
// Runs only on the loop thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/message.h"
#include "runtime/core/tensor_queue.h"

namespace dadt {
namespace core {

using EntryMap = std::unordered_map<std::string, TensorEntry>;

// The reserved name under which a rank's join() request travels.
inline constexpr const char kJoinName[] = "__dadt.join__";

class Executor {
 public:
  Executor(backends::Backend* backend, int rank, int size, HandleTable* handles,
           TensorQueue* queue);

  // Executes `response`, consuming the matching entries. A non-OK return is a backend failure that
  // breaks the job (the consumed entries are already completed with it); mismatch errors are
  // delivered to the handles and return OK.
  Status Execute(const Response& response, EntryMap& entries);

  // Completes an entry (and forgets its name) with `result`.
  void Finish(TensorEntry& entry, HandleResult result);

 private:
  Status Allreduce(const Response& r, EntryMap& entries);
  Status Allgather(const Response& r, TensorEntry& e);
  Status Broadcast(const Response& r, TensorEntry& e);
  Status Alltoall(const Response& r, TensorEntry& e);
  Status Reducescatter(const Response& r, TensorEntry& e);
  uint8_t* FusionBuffer(int64_t bytes);

  backends::Backend* backend_;
  int rank_;
  int size_;
  HandleTable* handles_;
  TensorQueue* queue_;
  std::unique_ptr<uint8_t[]> fusion_;
  int64_t fusion_bytes_ = 0;
};

}  // namespace core
}  // namespace dadt
