// Lanes: runs the CPU collectives that move data on several threads, so that two of them are in
// flight at once. While one lane packs a fusion buffer, reduces a received segment, copies results
// out or waits for the CPU, the other keeps the link busy -- what torch's ProcessGroupGloo does
// with its two worker threads, and why DDP keeps two buckets in flight.
//
// Order: the loop thread hands the n-th response that a lane can run (Runs) to lane n mod L.
// Every rank executes the same response stream, so each lane runs the same collectives in the
// same order on every rank, each on its own backend fork (Backend::Fork), whose tags never meet
// another lane's. Any other response (join, barrier, mismatch error or GPU) is a fence: the loop
// thread drains the lanes, then runs it itself. An eager allreduce (its result came with the
// response) is not a fence: the loop thread completes it at once, while the lanes run.
//
// Failure: a lane's first failure is kept for the loop thread (TakeFailure) and wakes it (the
// `wake` callback); the backend is poisoned by then (its forks share the failure), so what is
// queued behind it fails at once, and Cancel fails what has not started yet. Every entry a lane
// takes is completed, with its result or its failure.
//
// Threading: Submit, Drain, TakeFailure and Cancel from the loop thread; each lane is a thread,
// real-time where asked and allowed (runtime/common/thread_priority.h).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/core/executor.h"
#include "runtime/core/handle_table.h"
#include "runtime/core/negotiation/message.h"
#include "runtime/core/tensor_queue.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

class Lanes {
 public:
  // `count` lanes over forks of `backend`; null when count < 2 or the backend cannot fork (then
  // the loop thread runs every response itself).
  static std::unique_ptr<Lanes> Create(backends::Backend* backend, int count, int rank, int size,
                                       HandleTable* handles, TensorQueue* queue,
                                       const timeline::EventStream* events, bool realtime,
                                       std::function<void()> wake);
  ~Lanes();  // drains, then stops the threads

  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // Whether a lane may run `r`: a collective of CPU tensors of the global set that moves data,
  // not eager. Other process sets' collectives run on the loop thread (set_backends.h).
  static bool Runs(const Response& r);
  // Queues `r` with the entries it consumes (this rank's, taken out of the loop's map).
  void Submit(const Response& r, EntryMap entries);
  // Blocks until every lane is idle.
  void Drain();
  // The first failure of any lane (then OK until the next one).
  Status TakeFailure();
  // Completes every queued, not yet started response's entries with `status`.
  void Cancel(const Status& status);

 private:
  struct Job {
    Response response;
    EntryMap entries;
  };
  struct Lane {
    std::unique_ptr<backends::Backend> backend;  // a fork
    std::unique_ptr<Executor> executor;          // over `backend`, with its own fusion buffer
    std::deque<Job> jobs;                        // guarded by Lanes::mu_
    bool busy = false;                           // guarded by Lanes::mu_
    std::thread thread;
  };

  Lanes(bool realtime, std::function<void()> wake)
      : realtime_(realtime), wake_(std::move(wake)) {}
  void Run(Lane* lane);

  const bool realtime_;
  const std::function<void()> wake_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  uint64_t submitted_ = 0;  // loop thread only

  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stop_
  std::condition_variable idle_cv_;  // a lane finished a job
  bool stop_ = false;
  Status failure_;
};

}  // namespace core
}  // namespace dadt
