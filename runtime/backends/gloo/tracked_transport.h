// Gloo's TCP transport with a registry of live unbound buffers, so that a failure can be pushed
// into every buffer a collective is waiting on (see peer_watchdog.h for why that is needed).
//
//   auto registry = std::make_shared<internal::BufferRegistry>();
//   auto device = internal::CreateTrackedDevice(attr, registry);  // instead of tcp::CreateDevice
//   context->connectFullMesh(store, device);
//   ...
//   registry->FailPeer(2, error);  // every Gloo wait on a buffer that talks to rank 2 now throws
//   registry->FailAll(error);      // every Gloo wait on any of this context's buffers now throws
//
// It is the stock tcp::Device/Context/UnboundBuffer, subclassed only to learn about buffers as
// Gloo creates and destroys them (Context::createUnboundBuffer is virtual), through public Gloo
// headers; the transport's behaviour is unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
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

// The unbound buffers alive in one context, and the ranks each has sent to or received from.
// Thread-safe.
class BufferRegistry {
 public:
  void Add(TrackedUnboundBuffer* buffer);
  void Remove(TrackedUnboundBuffer* buffer);
  // Records that `buffer` sends to or receives from `rank` (before the transfer is posted); fails
  // it at once when `rank` has failed already.
  void Touch(TrackedUnboundBuffer* buffer, int rank);
  // The connection to `rank` failed: every wait on a live buffer that has sent to or received from
  // `rank`, and on any buffer that does so later, throws `error`. Buffers that only talk to other
  // ranks go on: a peer that exits right after its last collective (a removed elastic worker, a
  // rank that finished first) must not fail a collective that no longer needs it.
  void FailPeer(int rank, std::exception_ptr error);
  // Every wait on a live buffer, and on any buffer created later, throws `error`.
  void FailAll(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::vector<TrackedUnboundBuffer*> live_;  // a handful at a time: a vector beats a hash set
  std::exception_ptr error_;                 // FailAll's
  std::vector<std::pair<int, std::exception_ptr>> failed_peers_;  // FailPeer's, in order
};

class TrackedUnboundBuffer : public ::gloo::transport::tcp::UnboundBuffer {
 public:
  TrackedUnboundBuffer(const std::shared_ptr<::gloo::transport::tcp::Context>& context, void* ptr,
                       size_t size, std::shared_ptr<BufferRegistry> registry);
  ~TrackedUnboundBuffer() override;

  // Wakes any waitSend/waitRecv on this buffer, which then throws `error` (as when the pair
  // itself reports a failure).
  void Fail(std::exception_ptr error) { signalException(std::move(error)); }

  // Gloo's, after recording the peers with the registry.
  void send(int dstRank, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(std::vector<int> srcRanks, uint64_t slot, size_t offset, size_t nbytes) override;

 private:
  friend class BufferRegistry;
  std::shared_ptr<BufferRegistry> registry_;
  std::vector<int> peers_;  // ranks sent to or received from; guarded by the registry's mutex
};

// Like ::gloo::transport::tcp::CreateDevice, but every context it creates tracks its buffers.
std::shared_ptr<::gloo::transport::Device> CreateTrackedDevice(
    const ::gloo::transport::tcp::attr& attr, std::shared_ptr<BufferRegistry> registry);

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
