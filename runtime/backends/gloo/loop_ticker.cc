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
  std::this_thread::sleep_for(kNap);
  turns_.fetch_add(1, std::memory_order_release);  // last: the destructor's edge (see there)
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
    // Gloo's unregister waits for the loop to turn, so the handler has returned and will not be
    // called again; but the loop tells ThreadSanitizer so only through annotations that a libgloo
    // built without it (the distribution's) leaves out. Reading what the handler's last turn wrote
    // (release, above) is an edge every build sees. With the device gone, its loop thread was
    // joined, an edge too.
    (void)turns_.load(std::memory_order_acquire);
  }
  close(fd_);
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
