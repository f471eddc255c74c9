#include "runtime/backends/gloo/loop_ticker.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <thread>

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

namespace tcp = ::gloo::transport::tcp;

// How long the handler naps per loop turn once started (see the header).
constexpr std::chrono::microseconds kNap(50);

std::unique_ptr<LoopTicker> LoopTicker::Attach(
    const std::shared_ptr<::gloo::transport::Device>& device) {
  auto tcp_device = std::dynamic_pointer_cast<tcp::Device>(device);
  if (!tcp_device) return nullptr;
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  std::unique_ptr<LoopTicker> ticker(new LoopTicker(tcp_device, fd));
  try {
    tcp_device->registerDescriptor(fd, EPOLLIN, ticker.get());
  } catch (const std::exception&) {  // epoll_ctl refused: teardown waits on the timer instead
    close(fd);
    return nullptr;
  }
  return ticker;
}

void LoopTicker::Start() {
  if (started_) return;
  started_ = true;
  const uint64_t one = 1;
  (void)!write(fd_, &one, sizeof(one));  // cannot fail: a fresh eventfd's counter is 0
}

void LoopTicker::handleEvents(int /*events*/) {
  turns_.fetch_add(1);
  std::this_thread::sleep_for(kNap);
}

void LoopTicker::Stop() {
  if (!started_) return;
  started_ = false;
  uint64_t count = 0;
  (void)!read(fd_, &count, sizeof(count));  // resets the counter: no longer readable
}

LoopTicker::~LoopTicker() {
  Start();  // so that unregistering below does not wait on the timer either
  if (auto device = device_.lock()) {
    try {
      device->unregisterDescriptor(fd_, this);
    } catch (const std::exception&) {  // the descriptor is closed below either way
    }
  }
  close(fd_);
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
