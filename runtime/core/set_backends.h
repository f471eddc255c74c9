// SetBackends: the process sets this rank knows of (docs/process-sets.md) and, for those it is a
// member of, their data planes. Owned by Runtime, next to the lanes.
//
// Adds and removes come as responses of the global set, which every rank applies at the same
// point of the one response stream (ApplyFromLoop): the table changes; a member of an added set
// creates the set's Backend (CreateDataPlane over SetBackendOptions: set rank and size, the set's
// rendezvous scope, its member ranks) and an Executor over it; a remove destroys them. A
// creation that fails (a member never came) fails the add's handle with the connect error and
// leaves the set registered but broken: its collectives fail with that error, and a remove
// still works.
//
// A collective of another set than the global one runs on the loop thread (a fence, never on a
// lane), on the set's Executor, which divides an Average by the set's size and orders allgather
// and alltoall blocks by set rank; a broadcast root, a global rank in the response, is
// translated to the set rank here. A rank outside the set skips it. Since every rank runs the
// one response list in order, two members of two overlapping sets run their collectives in the
// same relative order and cannot deadlock.
//
// Threading: ApplyFromLoop, ExecuteFromLoop and ReleaseAll on the loop thread (or after it
// ended); Find and ids from any thread (Enqueue's checks), under a mutex.
//
//   SetBackends sets("gloo", job_options, executor.get(), &handles, &queue, &events);
//   sets.ApplyFromLoop(add_response, entries);      // registers, connects, completes the add
//   sets.ExecuteFromLoop(set_allreduce, entries);   // runs it on the set's backend
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/common/status.h"
#include "runtime/core/executor.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/negotiation/message.h"
#include "runtime/core/process_sets.h"
#include "runtime/core/tensor_queue.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

class SetBackends {
 public:
  // `engine`: the job's host data plane (a BackendRegistry name); `job`: the options the job's
  // backend was created with (its store must outlive this). `global`: the job's executor, which
  // completes the handles of adds, removes and error responses.
  SetBackends(std::string engine, const backends::BackendOptions& job, Executor* global,
              HandleTable* handles, TensorQueue* queue, const timeline::EventStream* events);
  ~SetBackends();
  SetBackends(const SetBackends&) = delete;
  SetBackends& operator=(const SetBackends&) = delete;

  // Whether `t` is an add or a remove.
  static bool Changes(Response::Type t) {
    return t == Response::Type::kProcessSetAdd || t == Response::Type::kProcessSetRemove;
  }

  // Any thread: a copy of set `id`, or nullopt when it is not registered.
  std::optional<ProcessSet> Find(int32_t id) const;
  // Any thread: the registered ids, ascending (0 first).
  std::vector<int32_t> ids() const;

  // Applies an add or remove response and completes its handle (with the id; with 1 or 0 for a
  // remove; or with the set's connect error). A non-OK return means this rank's table no longer
  // matches the coordinator's: the job must abort.
  Status ApplyFromLoop(const Response& r, EntryMap& entries);
  // Runs a response of a set other than the global one, consuming this rank's entries for it. A
  // non-OK return is a backend failure that breaks the job.
  Status ExecuteFromLoop(const Response& r, EntryMap& entries);
  // Drops every set but the global one, destroying their backends (shutdown).
  void ReleaseAll();

 private:
  struct Plane {
    std::unique_ptr<backends::Backend> backend;
    std::unique_ptr<Executor> executor;
    Status broken;  // the creation failure, when there is no backend
  };

  const std::string engine_;
  const backends::BackendOptions job_;
  Executor* const global_;
  HandleTable* const handles_;
  TensorQueue* const queue_;
  const timeline::EventStream* const events_;

  mutable std::mutex mu_;  // guards table_ (written on the loop thread, read by Enqueue)
  ProcessSetTable table_;
  std::map<int32_t, Plane> planes_;  // loop thread: the sets this rank is a member of
};

}  // namespace core
}  // namespace dadt
