#include "runtime/core/tensor_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace dadt {
namespace core {

TensorQueue::TensorQueue() { wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

TensorQueue::~TensorQueue() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status TensorQueue::Push(TensorEntry entry) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.ok()) return closed_;
    const InFlightState state{OpTypeName(entry.request.op), false, std::chrono::steady_clock::now()};
    if (!in_flight_.emplace(EntryKey(entry.request), state).second) {
      const int32_t set = entry.request.process_set_id;
      const std::string where =
          set == 0 ? std::string() : "in process set " + std::to_string(set) + " ";
      return InvalidArgument("a collective named '" + entry.request.name +
                             "' is already in flight " + where +
                             "on this rank; names must be unique among "
                             "pending collectives (synchronize the first one, or pick another name)");
    }
    // Only the entry that finds the queue empty wakes the loop: the loop clears the signal
    // before it drains, so every later entry is drained with it (or, pushed after the drain,
    // finds the queue empty and wakes it again). A burst of gradients costs one write and one
    // wake-up, not one per tensor.
    wake = pending_.empty();
    pending_.push_back(std::move(entry));
  }
  if (wake) Wake();
  return Status::OK();
}

std::vector<TensorEntry> TensorQueue::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TensorEntry> out;
  out.swap(pending_);
  return out;
}

std::vector<TensorEntry> TensorQueue::Close(Status reason) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = std::move(reason);
  std::vector<TensorEntry> out;
  out.swap(pending_);
  return out;
}

void TensorQueue::Finish(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(key);
}

void TensorQueue::MarkReleased(int32_t process_set_id, const std::vector<std::string>& names,
                               std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names) {
    auto it = in_flight_.find(EntryKey(process_set_id, name));
    if (it == in_flight_.end() || it->second.in_data_plane) continue;
    it->second.in_data_plane = true;
    it->second.since = now;
  }
}

std::vector<InFlightTensor> TensorQueue::InFlight(size_t limit) const {
  std::vector<InFlightTensor> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(in_flight_.size());
    for (const auto& [key, state] : in_flight_) {
      // The name is the key up to the NUL that precedes a process set's id (EntryKey).
      out.push_back({key.substr(0, key.find('\0')), state.op, state.in_data_plane, state.since});
    }
  }
  std::sort(out.begin(), out.end(), [](const InFlightTensor& a, const InFlightTensor& b) {
    if (a.in_data_plane != b.in_data_plane) return a.in_data_plane;
    return a.since != b.since ? a.since < b.since : a.name < b.name;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

std::string EntryKey(int32_t process_set_id, const std::string& name) {
  if (process_set_id == 0) return name;
  std::string key = name;
  key.push_back('\0');
  key += std::to_string(process_set_id);
  return key;
}

void TensorQueue::Wake() {
  uint64_t one = 1;
  ssize_t rc = write(wake_fd_, &one, sizeof(one));
  (void)rc;
}

void TensorQueue::ClearWake() {
  uint64_t value;
  ssize_t rc = read(wake_fd_, &value, sizeof(value));
  (void)rc;
}

}  // namespace core
}  // namespace dadt
