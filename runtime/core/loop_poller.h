// LoopPoller: how the loop thread sleeps between events.
//
// The loop waits on the TensorQueue's eventfd and the control transport's descriptors at once.
// It wakes for a new entry or message, for the coordinator's next deadline (the cycle time that
// holds ready tensors for fusion, the stall check), for the end of the runtime's hold on new
// entries (which it then does not watch; see Runtime::RunFromLoop), or -- for a transport without
// descriptors (MPI), which can only be probed -- after the transport's poll interval. Probing sleeps for tens
// of microseconds at a time, so the poller also sets the loop thread's timer slack to 1 us (the
// kernel's default of 50 us would double the negotiation latency).
// Owned and used by the loop thread only.
//
//   LoopPoller poller(queue.wake_fd(), transport.get());           // on the loop thread
//   if (poller.Wait(deadline, /*immediate=*/false, /*awaiting=*/true, /*watch_queue=*/true)) {
//     queue.ClearWake();
//   }
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/backends/control_transport.h"

namespace dadt {
namespace core {

// The timeout for a wait until `deadline`, in microseconds: 0 when `immediate` or the deadline has
// passed, -1 (forever) for time_point::max(), else the wait rounded up to whole microseconds.
int64_t PollTimeoutMicros(bool immediate, std::chrono::steady_clock::time_point deadline,
                          std::chrono::steady_clock::time_point now);

class LoopPoller {
 public:
  // Sets the calling thread's timer slack when `transport` has no descriptors (a probed one).
  // `transport` outlives the poller.
  LoopPoller(int wake_fd, backends::ControlTransport* transport);

  // Sleeps until a descriptor is readable or `deadline` passed (at once when `immediate`); a
  // probed transport wakes the loop after its poll interval, shorter while `awaiting`
  // (collectives in flight). Unless `watch_queue`, the wake descriptor is not watched (a signal on
  // it waits for a later Wait). Returns whether the wake descriptor was readable (the caller
  // clears it).
  bool Wait(std::chrono::steady_clock::time_point deadline, bool immediate, bool awaiting,
            bool watch_queue);

 private:
  backends::ControlTransport* transport_;
  const bool probed_;
  const int wake_fd_;
  std::vector<pollfd> fds_;  // [0]: the wake descriptor, or -1 while it is not watched
};

}  // namespace core
}  // namespace dadt
