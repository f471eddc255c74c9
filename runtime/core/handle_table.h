// HandleTable: the completion side of every enqueued collective.
//
// Framework threads create a handle at enqueue time and later poll or wait on it; the loop thread
// completes it with a Status and, for ops that allocate, the output. Waiting never holds any lock
// the loop thread needs for long (one mutex, condition variable per table).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace core {

// Host memory the runtime allocated for a result (allgather, alltoall, reducescatter).
// For GPU tensors (device >= 0) the result lives in device memory instead (device_data).
struct HostBuffer {
  std::unique_ptr<uint8_t[]> data;
  int64_t bytes = 0;
  DataType dtype = DataType::kUint8;
  Shape shape;
  int32_t device = kCpuDevice;
  std::shared_ptr<void> device_data;
  void* ptr() const { return device >= 0 ? device_data.get() : static_cast<void*>(data.get()); }
  static std::unique_ptr<HostBuffer> Allocate(DataType dtype, Shape shape);
};

struct HandleResult {
  Status status;
  std::unique_ptr<HostBuffer> output;
  int64_t int_result = -1;
  std::vector<int64_t> received_splits;
};

class HandleTable {
 public:
  // Handles count up from `first`: the runtime starts each incarnation's at incarnation << 40, so
  // a handle kept from an earlier init() is unknown to the next one instead of naming its work.
  explicit HandleTable(int64_t first = 0) : next_(first) {}
  int64_t Create();
  void Complete(int64_t handle, HandleResult result);
  // 1 done, 0 pending, -1 unknown.
  int Poll(int64_t handle);
  // Blocks until done; returns its status (InvalidArgument for an unknown handle).
  Status Wait(int64_t handle);
  // Like Wait, but gives up after `timeout`; returns false then (status untouched).
  bool WaitFor(int64_t handle, std::chrono::milliseconds timeout, Status* status);
  std::unique_ptr<HostBuffer> TakeOutput(int64_t handle);
  int64_t IntResult(int64_t handle);
  std::vector<int64_t> ReceivedSplits(int64_t handle);
  // Forgets the handle; a thread still waiting on it gets Aborted ("released while being waited
  // on") instead of touching freed state.
  void Release(int64_t handle);

 private:
  bool DoneOrGone(int64_t handle) const;  // with mu_ held
  struct Entry {
    bool done = false;
    HandleResult result;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<int64_t, Entry> entries_;
  int64_t next_ = 0;
};

}  // namespace core
}  // namespace dadt
