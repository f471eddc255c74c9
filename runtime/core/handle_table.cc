#include "runtime/core/handle_table.h"

namespace dadt {
namespace core {

std::unique_ptr<HostBuffer> HostBuffer::Allocate(DataType dtype, Shape shape) {
  auto b = std::make_unique<HostBuffer>();
  b->dtype = dtype;
  b->bytes = NumElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
  b->shape = std::move(shape);
  // Uninitialised on purpose: the collective overwrites every byte.
  b->data.reset(new uint8_t[b->bytes > 0 ? b->bytes : 1]);
  return b;
}

int64_t HandleTable::Create() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t h = next_++;
  entries_.emplace(h, Entry{});
  return h;
}

void HandleTable::Complete(int64_t handle, HandleResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return;
    it->second.done = true;
    it->second.result = std::move(result);
  }
  cv_.notify_all();
}

int HandleTable::Poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return -1;
  return it->second.done ? 1 : 0;
}

// The waits look the handle up again at every wake-up instead of keeping an iterator: an insert
// may rehash the map (invalidating iterators), and another thread may release the handle while
// this one sleeps.
namespace {
Status ReleasedWhileWaiting(int64_t handle) {
  return Aborted("handle " + std::to_string(handle) + " was released while being waited on");
}
}  // namespace

Status HandleTable::Wait(int64_t handle) {
  std::unique_lock<std::mutex> lock(mu_);
  if (entries_.find(handle) == entries_.end()) {
    return InvalidArgument("unknown handle " + std::to_string(handle));
  }
  cv_.wait(lock, [&] { return DoneOrGone(handle); });
  auto it = entries_.find(handle);
  return it == entries_.end() ? ReleasedWhileWaiting(handle) : it->second.result.status;
}

bool HandleTable::WaitFor(int64_t handle, std::chrono::milliseconds timeout, Status* status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (entries_.find(handle) == entries_.end()) {
    *status = InvalidArgument("unknown handle " + std::to_string(handle));
    return true;
  }
  if (!cv_.wait_for(lock, timeout, [&] { return DoneOrGone(handle); })) return false;
  auto it = entries_.find(handle);
  *status = it == entries_.end() ? ReleasedWhileWaiting(handle) : it->second.result.status;
  return true;
}

bool HandleTable::DoneOrGone(int64_t handle) const {
  auto it = entries_.find(handle);
  return it == entries_.end() || it->second.done;
}

std::unique_ptr<HostBuffer> HandleTable::TakeOutput(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end() || !it->second.done) return nullptr;
  return std::move(it->second.result.output);
}

int64_t HandleTable::IntResult(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  return it == entries_.end() ? -1 : it->second.result.int_result;
}

std::vector<int64_t> HandleTable::ReceivedSplits(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  return it == entries_.end() ? std::vector<int64_t>{} : it->second.result.received_splits;
}

void HandleTable::Release(int64_t handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.erase(handle) == 0) return;
  }
  cv_.notify_all();  // a thread waiting on it wakes with "released while being waited on"
}

}  // namespace core
}  // namespace dadt
