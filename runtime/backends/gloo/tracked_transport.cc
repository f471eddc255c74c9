#include "runtime/backends/gloo/tracked_transport.h"

#include <algorithm>

#include <gloo/transport/tcp/device.h>

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
namespace {

namespace tcp = ::gloo::transport::tcp;

class TrackingContext : public tcp::Context {
 public:
  TrackingContext(std::shared_ptr<tcp::Device> device, int rank, int size,
                  std::shared_ptr<BufferRegistry> registry)
      : tcp::Context(std::move(device), rank, size), registry_(std::move(registry)) {}

  std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr,
                                                                      size_t size) override {
    return std::make_unique<TrackedUnboundBuffer>(shared_from_this(), ptr, size, registry_);
  }

 private:
  std::shared_ptr<BufferRegistry> registry_;
};

class TrackingDevice : public tcp::Device {
 public:
  TrackingDevice(const tcp::attr& attr, std::shared_ptr<BufferRegistry> registry)
      : tcp::Device(attr), registry_(std::move(registry)) {}

  std::shared_ptr<::gloo::transport::Context> createContext(int rank, int size) override {
    return std::make_shared<TrackingContext>(shared_from_this(), rank, size, registry_);
  }

 private:
  std::shared_ptr<BufferRegistry> registry_;
};

}  // namespace

void BufferRegistry::Add(TrackedUnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.push_back(buffer);
  if (error_) buffer->Fail(error_);
}

void BufferRegistry::Remove(TrackedUnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(live_.begin(), live_.end(), buffer);
  if (it != live_.end()) {
    *it = live_.back();
    live_.pop_back();
  }
}

void BufferRegistry::Touch(TrackedUnboundBuffer* buffer, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(buffer->peers_.begin(), buffer->peers_.end(), rank) == buffer->peers_.end()) {
    buffer->peers_.push_back(rank);
  }
  for (const auto& failed : failed_peers_) {
    if (failed.first == rank) {
      buffer->Fail(failed.second);
      return;
    }
  }
}

void BufferRegistry::FailPeer(int rank, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& failed : failed_peers_) {
    if (failed.first == rank) return;  // reported already (the watchdog probes every tick)
  }
  failed_peers_.emplace_back(rank, error);
  for (TrackedUnboundBuffer* buffer : live_) {
    if (std::find(buffer->peers_.begin(), buffer->peers_.end(), rank) != buffer->peers_.end()) {
      buffer->Fail(error);
    }
  }
}

void BufferRegistry::FailAll(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) error_ = error;
  for (TrackedUnboundBuffer* buffer : live_) buffer->Fail(error_);
}

TrackedUnboundBuffer::TrackedUnboundBuffer(const std::shared_ptr<tcp::Context>& context,
                                           void* ptr, size_t size,
                                           std::shared_ptr<BufferRegistry> registry)
    : tcp::UnboundBuffer(context, ptr, size), registry_(std::move(registry)) {
  registry_->Add(this);
}

// Unregisters before the base destructor runs, so FailAll never touches a dying buffer.
TrackedUnboundBuffer::~TrackedUnboundBuffer() { registry_->Remove(this); }

void TrackedUnboundBuffer::send(int dstRank, uint64_t slot, size_t offset, size_t nbytes) {
  registry_->Touch(this, dstRank);
  tcp::UnboundBuffer::send(dstRank, slot, offset, nbytes);
}

void TrackedUnboundBuffer::recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes) {
  registry_->Touch(this, srcRank);
  tcp::UnboundBuffer::recv(srcRank, slot, offset, nbytes);
}

void TrackedUnboundBuffer::recv(std::vector<int> srcRanks, uint64_t slot, size_t offset,
                                size_t nbytes) {
  for (int rank : srcRanks) registry_->Touch(this, rank);
  tcp::UnboundBuffer::recv(std::move(srcRanks), slot, offset, nbytes);
}

std::shared_ptr<::gloo::transport::Device> CreateTrackedDevice(
    const tcp::attr& attr, std::shared_ptr<BufferRegistry> registry) {
  return std::make_shared<TrackingDevice>(tcp::CreateDeviceAttr(attr), std::move(registry));
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
