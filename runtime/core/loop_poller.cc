#include "runtime/core/loop_poller.h"

#include <sys/prctl.h>
#include <time.h>

namespace dadt {
namespace core {

int64_t PollTimeoutMicros(bool immediate, std::chrono::steady_clock::time_point deadline,
                          std::chrono::steady_clock::time_point now) {
  if (immediate) return 0;
  if (deadline == std::chrono::steady_clock::time_point::max()) return -1;
  const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
  return wait.count() <= 0 ? 0 : (wait.count() + 999) / 1000;
}

LoopPoller::LoopPoller(int wake_fd, backends::ControlTransport* transport)
    : transport_(transport), probed_(transport->fds().empty()), wake_fd_(wake_fd) {
  // The slack is per thread: the constructor runs on the loop thread.
  if (probed_) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  fds_.push_back(pollfd{wake_fd, POLLIN, 0});
  for (int fd : transport->fds()) fds_.push_back(pollfd{fd, POLLIN, 0});
}

bool LoopPoller::Wait(std::chrono::steady_clock::time_point deadline, bool immediate,
                      bool awaiting, bool watch_queue) {
  fds_[0].fd = watch_queue ? wake_fd_ : -1;  // poll() skips a negative descriptor
  fds_[0].revents = 0;
  int64_t timeout_us = PollTimeoutMicros(immediate, deadline, std::chrono::steady_clock::now());
  const auto probe = probed_ ? transport_->poll_interval(awaiting) : std::chrono::microseconds(0);
  if (probe.count() > 0 && (timeout_us < 0 || timeout_us > probe.count())) timeout_us = probe.count();
  if (timeout_us < 0) {
    ppoll(fds_.data(), fds_.size(), nullptr, nullptr);
  } else {
    const timespec ts{static_cast<time_t>(timeout_us / 1000000),
                      static_cast<long>(timeout_us % 1000000) * 1000};
    ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  }
  return (fds_[0].revents & POLLIN) != 0;
}

}  // namespace core
}  // namespace dadt
