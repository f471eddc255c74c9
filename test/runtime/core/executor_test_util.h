// Test helpers of the Executor tests (executor_test.cc, executor_timeline_test.cc): one rank's
// side of the runtime that the executor talks to, entries and responses as the loop builds them,
// and a backend whose collectives all fail with one status.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/executor.h"
#include "test/runtime/backends/rank_threads.h"
#include "timeline/event.h"

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    const ::dadt::Status _s = (expr);                        \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

namespace dadt {
namespace core {
namespace testing_executor {

// One rank's side of the runtime that the executor talks to.
struct RankState {
  RankState(backends::Backend* backend, int rank, int size,
            const timeline::EventStream* events = nullptr)
      : executor(backend, rank, size, &handles, &queue, events) {}

  // Enqueues `e` as the runtime does (its name in flight, a handle) and hands it to the loop.
  int64_t Add(TensorEntry e) {
    e.handle = handles.Create();
    const std::string name = e.request.name;
    EXPECT_OK(queue.Push(e));
    queue.Drain();
    entries.emplace(name, e);
    return e.handle;
  }
  // Whether `name` may be enqueued again (the executor called Finish on it).
  bool NameFree(const std::string& name) {
    TensorEntry e;
    e.request.name = name;
    Status s = queue.Push(e);
    if (s.ok()) {
      queue.Drain();
      queue.Finish(name);
    }
    return s.ok();
  }

  HandleTable handles;
  TensorQueue queue;
  EntryMap entries;
  Executor executor;
};

inline TensorEntry Entry(OpType op, const std::string& name, DataType dtype, Shape shape,
                         const void* in, void* out) {
  TensorEntry e;
  e.request.op = op;
  e.request.name = name;
  e.request.dtype = dtype;
  e.request.shape = std::move(shape);
  e.input = in;
  e.output = out;
  return e;
}

inline Response Make(Response::Type type, std::vector<std::string> names, std::vector<int64_t> sizes,
                     DataType dtype = DataType::kFloat32, ReduceOp op = ReduceOp::kSum) {
  Response r;
  r.type = type;
  r.names = std::move(names);
  r.sizes = std::move(sizes);
  r.dtype = dtype;
  r.reduce_op = op;
  return r;
}

// A backend whose collectives all fail with `status` (or succeed on one rank, as identities).
class FakeBackend : public backends::Backend {
 public:
  explicit FakeBackend(Status status = Status::OK()) : status_(std::move(status)) {}
  const char* Name() const override { return "FAKE"; }
  Status Allreduce(void*, int64_t, DataType, ReduceOp) override { return status_; }
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) override {
    if (status_.ok() && bytes[0]) std::memcpy(out, in, bytes[0]);
    return status_;
  }
  Status Broadcast(void*, int64_t, int) override { return status_; }
  Status Alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                   const std::vector<int64_t>&) override {
    if (status_.ok() && send[0]) std::memcpy(out, in, send[0]);
    return status_;
  }
  Status Reducescatter(const void*, void*, const std::vector<int64_t>&, DataType,
                       ReduceOp) override {
    return status_;
  }
  Status Barrier() override { return status_; }

 private:
  Status status_;
};

}  // namespace testing_executor
}  // namespace core
}  // namespace dadt
