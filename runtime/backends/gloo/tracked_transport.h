// Gloo's TCP transport with a registry of live unbound buffers, so that a failure can be pushed
// into every buffer a collective is waiting on (see peer_watchdog.h for why that is needed).
//
//   auto registry = std::make_shared<internal::BufferRegistry>();
//   auto device = internal::CreateTrackedDevice(attr, registry);  // instead of tcp::CreateDevice
//   context->connectFullMesh(store, device);
//   ...
//   registry->FailAll(error);  // every Gloo wait on any of this context's buffers now throws
//
// It is the stock tcp::Device/Context/UnboundBuffer, subclassed only to learn about buffers as
// Gloo creates and destroys them (Context::createUnboundBuffer is virtual), through public Gloo
// headers; the transport's behaviour is unchanged.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/unbound_buffer.h>

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

class TrackedUnboundBuffer;

// The unbound buffers alive in one context. Thread-safe.
class BufferRegistry {
 public:
  void Add(TrackedUnboundBuffer* buffer);
  void Remove(TrackedUnboundBuffer* buffer);
  // Every wait on a live buffer, and on any buffer created later, throws `error`.
  void FailAll(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::vector<TrackedUnboundBuffer*> live_;  // a handful at a time: a vector beats a hash set
  std::exception_ptr error_;
};

class TrackedUnboundBuffer : public ::gloo::transport::tcp::UnboundBuffer {
 public:
  TrackedUnboundBuffer(const std::shared_ptr<::gloo::transport::tcp::Context>& context, void* ptr,
                       size_t size, std::shared_ptr<BufferRegistry> registry);
  ~TrackedUnboundBuffer() override;

  // Wakes any waitSend/waitRecv on this buffer, which then throws `error` (as when the pair
  // itself reports a failure).
  void Fail(std::exception_ptr error) { signalException(std::move(error)); }

 private:
  std::shared_ptr<BufferRegistry> registry_;
};

// Like ::gloo::transport::tcp::CreateDevice, but every context it creates tracks its buffers.
std::shared_ptr<::gloo::transport::Device> CreateTrackedDevice(
    const ::gloo::transport::tcp::attr& attr, std::shared_ptr<BufferRegistry> registry);

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
