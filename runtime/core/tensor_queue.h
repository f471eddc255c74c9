// TensorQueue: the hand-off from framework threads to the loop thread.
//
// Enqueue (any thread) checks that the name is not already in flight in its process set on this
// rank (EntryKey) — a duplicate is
// refused at once with InvalidArgument, before anything is sent — then appends the entry and wakes
// the loop thread through an eventfd that the loop polls together with its sockets (only when the
// queue was empty: the rest of a burst rides on that wake-up). The loop thread clears the signal,
// then drains all new entries in one go (so a burst of gradients becomes one message), and calls
// Finish when a name completes.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/core/negotiation/message.h"

namespace dadt {
namespace core {

struct TensorEntry {
  Request request;
  const void* input = nullptr;  // host or device memory (request.device); may be null (barrier, join)
  void* output = nullptr;       // allreduce / broadcast destination; may equal input
  // Allgather / reducescatter into caller memory (output != nullptr): its size in bytes; the
  // executor fails the collective if the negotiated result has another size.
  int64_t output_bytes = 0;
  int64_t handle = -1;
  int64_t enqueue_us = 0;  // timeline::NowMicros() at Enqueue, for the QUEUE phase
  uintptr_t stream = 0;    // GPU tensors: the framework's stream the data is ready on (0: default)
  // The caller's output tensor as the C API received it (`given` false when there was none, or
  // for entries made by hand): entry_checks.h checks it against the input and sizes output_bytes.
  struct OutputView {
    bool given = false;
    bool against_input = false;  // an input tensor described request.dtype, shape and device
    DataType dtype = DataType::kFloat32;
    Shape shape;
    int32_t device = kCpuDevice;
  } output_view;
};

// The entries a rank has in flight (drained, not finished), by EntryKey.
using EntryMap = std::unordered_map<std::string, TensorEntry>;

// What a rank is waiting for, as the liveness watch reports it (liveness_watch.h): the oldest
// tensors this rank has in flight, each in negotiation (submitted, no response yet) or in the
// data plane (released by the coordinator, its collective not finished).
struct InFlightTensor {
  std::string name;
  const char* op = "";  // "allreduce", ... (OpTypeName: static)
  bool in_data_plane = false;
  std::chrono::steady_clock::time_point since;  // enqueued, or released to the data plane
};

// What identifies a tensor in flight on a rank: its process set and its name (the same name may
// be in flight in two sets at once). The global set's key is the name itself; another set's is
// the name, a NUL (which no name holds: names cross the C API as C strings) and the set id.
std::string EntryKey(int32_t process_set_id, const std::string& name);
inline std::string EntryKey(const Request& r) { return EntryKey(r.process_set_id, r.name); }

class TensorQueue {
 public:
  TensorQueue();
  ~TensorQueue();
  TensorQueue(const TensorQueue&) = delete;
  TensorQueue& operator=(const TensorQueue&) = delete;

  // Refused with the close reason once Close was called.
  Status Push(TensorEntry entry);
  // Refuses every later Push with `reason` and returns what was still queued.
  std::vector<TensorEntry> Close(Status reason);
  std::vector<TensorEntry> Drain();
  // `key`: the finished tensor's EntryKey.
  void Finish(const std::string& key);
  // The loop thread, as a response list arrives: these tensors now wait in the data plane.
  void MarkReleased(int32_t process_set_id, const std::vector<std::string>& names,
                    std::chrono::steady_clock::time_point now);
  // Any thread: at most `limit` in-flight tensors, data-plane ones first, then oldest first.
  std::vector<InFlightTensor> InFlight(size_t limit) const;
  // Wakes the loop thread without an entry (shutdown, configuration change).
  void Wake();
  // Clears the wake-up signal; call before Drain when the fd polled readable.
  void ClearWake();
  int wake_fd() const { return wake_fd_; }

 private:
  mutable std::mutex mu_;
  std::vector<TensorEntry> pending_;
  // What InFlight() reports of a tensor, less its name (the key holds it).
  struct InFlightState {
    const char* op;  // OpTypeName: static
    bool in_data_plane;
    std::chrono::steady_clock::time_point since;
  };
  std::unordered_map<std::string, InFlightState> in_flight_;  // by EntryKey
  Status closed_;
  int wake_fd_ = -1;
};

}  // namespace core
}  // namespace dadt
