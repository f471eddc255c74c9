#include "runtime/core/loop_poller.h"

#include <sys/prctl.h>
#include <time.h>

namespace dadt {
namespace core {

int PollTimeoutMs(bool immediate, std::chrono::steady_clock::time_point deadline,
                  std::chrono::steady_clock::time_point now) {
  if (immediate) return 0;
  if (deadline == std::chrono::steady_clock::time_point::max()) return -1;
  const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
  return wait.count() <= 0 ? 0 : static_cast<int>((wait.count() + 999) / 1000);
}

LoopPoller::LoopPoller(int wake_fd, backends::ControlTransport* transport)
    : transport_(transport), probed_(transport->fds().empty()) {
  // The slack is per thread: the constructor runs on the loop thread.
  if (probed_) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  fds_.push_back(pollfd{wake_fd, POLLIN, 0});
  for (int fd : transport->fds()) fds_.push_back(pollfd{fd, POLLIN, 0});
}

bool LoopPoller::Wait(std::chrono::steady_clock::time_point deadline, bool immediate,
                      bool awaiting) {
  const int timeout_ms = PollTimeoutMs(immediate, deadline, std::chrono::steady_clock::now());
  const auto probe = probed_ ? transport_->poll_interval(awaiting) : std::chrono::microseconds(0);
  if (probe.count() > 0 && (timeout_ms < 0 || timeout_ms * 1000LL > probe.count())) {
    const timespec ts{0, static_cast<long>(probe.count()) * 1000};
    ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  } else {
    poll(fds_.data(), fds_.size(), timeout_ms);
  }
  return (fds_[0].revents & POLLIN) != 0;
}

}  // namespace core
}  // namespace dadt
