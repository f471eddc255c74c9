// LoopTicker: lets a Gloo TCP context be torn down without waiting on the transport loop's
// 10 ms timer.
//
// Why: Gloo 0.5's TCP device runs an epoll loop that wakes on I/O or every 10 ms. Unregistering a
// socket from any other thread waits for the loop to turn once (so that its handler is never
// called again), and destroying the device stops the loop only when it next turns. With no
// traffic each of those waits for the timer. Closing a pair unregisters its socket: about 10 ms
// per pair plus 10 ms for the device, 28 ms of every shutdown() at 3 ranks; and connecting a pair
// from the dialling side first unregisters and closes the pair's own listening socket: 10 ms per
// pair, 20 of the 22 ms of an init() at 3 ranks (docs/performance.md, "Lifecycle").
//
// How: the ticker registers an eventfd with the device's loop as one more handler. Start() makes
// it readable and its handler leaves it so; the loop, level-triggered, then turns again after
// each short nap of the handler (50 us), so every wait above ends within about a tenth of a
// millisecond. The nap matters with more ranks than cores: a loop turning without pause took the
// core from the very thread that was tearing down (7-9 ms teardowns at 3 ranks on 2 cores,
// against about 1 ms with the nap). The backend runs it while it connects the full mesh (then
// stops it) and from just before the context is released until the device is gone, so the
// turning lasts only as long as those two moments; in between, the loop is Gloo's own.
//
//   auto ticker = LoopTicker::Attach(device);   // right after creating the device
//   ticker->Start(); context->connectFullMesh(store, device); ticker->Stop();
//   ...                                         // the context's life
//   ticker->Start(); context.reset(); ticker.reset();
//
// Not for real-time transport threads (DADT_REALTIME_THREADS): a real-time thread that never
// sleeps would keep other threads off its core; callers do not attach one then.
// Threading: Attach/Start/destruction on any one thread; handleEvents on the loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

class LoopTicker final : public ::gloo::transport::tcp::Handler {
 public:
  // Registers with `device`'s loop; null (with nothing registered) when `device` is not Gloo's
  // TCP device or no eventfd could be made, and teardown then simply waits on the timer.
  static std::unique_ptr<LoopTicker> Attach(
      const std::shared_ptr<::gloo::transport::Device>& device);
  // Starts it if needed; unregisters from the loop if the device still lives; closes the eventfd.
  ~LoopTicker() override;
  LoopTicker(const LoopTicker&) = delete;
  LoopTicker& operator=(const LoopTicker&) = delete;

  // From now on the loop turns without waiting; Stop() lets it wait on I/O and its timer again.
  void Start();
  void Stop();
  // Leaves the eventfd readable (see above) and naps briefly (kNap).
  void handleEvents(int /*events*/) override;
  // How many of the loop's calls of handleEvents have returned (for tests: 0 until the first Start).
  int64_t turns() const { return turns_.load(); }

 private:
  LoopTicker(std::weak_ptr<::gloo::transport::tcp::Device> device, int fd)
      : device_(std::move(device)), fd_(fd) {}

  const std::weak_ptr<::gloo::transport::tcp::Device> device_;
  const int fd_;
  bool started_ = false;
  std::atomic<int64_t> turns_{0};
};

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
