#include "runtime/backends/gloo/peer_watchdog.h"

#include <gloo/transport/tcp/pair.h>

#include "runtime/common/logging.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
namespace {

// Gloo slots carry the collective kind in their top byte (0x01..0x08); 0xff is never used, so
// nothing is ever pending there and tryRecv on it only checks the pair's health.
constexpr uint64_t kProbeSlot = uint64_t{0xff} << 56;

// Ticks without any collective after which the thread stops ticking.
constexpr int kQuietTicksBeforeIdle = 10;

}  // namespace

PeerWatchdog::PeerWatchdog(std::shared_ptr<::gloo::Context> context,
                           std::shared_ptr<BufferRegistry> registry,
                           std::chrono::milliseconds interval)
    : context_(std::move(context)),
      registry_(std::move(registry)),
      interval_(interval),
      probe_buffer_(context_->createUnboundBuffer(nullptr, 0)),
      thread_([this] { Run(); }) {}

PeerWatchdog::~PeerWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PeerWatchdog::Arm() {
  std::lock_guard<std::mutex> lock(mu_);
  ++armed_;
  ++arms_;
  if (idle_) cv_.notify_one();
}

void PeerWatchdog::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  --armed_;
}

void PeerWatchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  int quiet_ticks = 0;
  uint64_t arms_seen = arms_;
  while (!stop_) {
    if (quiet_ticks >= kQuietTicksBeforeIdle) {
      idle_ = true;
      cv_.wait(lock, [this] { return stop_ || armed_ > 0; });
      idle_ = false;
      quiet_ticks = 0;
    }
    cv_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_) break;
    if (armed_ > 0) {
      quiet_ticks = 0;
      lock.unlock();  // probing takes the pairs' locks; never hold ours meanwhile
      for (auto& [peer, failure] : Probe()) {
        DADT_LOG(DEBUG) << "gloo peer watchdog: the connection to rank " << peer
                        << " failed during a collective; failing the waits that involve it";
        registry_->FailPeer(peer, failure);
      }
      lock.lock();
    } else {
      quiet_ticks = arms_ == arms_seen ? quiet_ticks + 1 : 0;
    }
    arms_seen = arms_;
  }
}

std::vector<std::pair<int, std::exception_ptr>> PeerWatchdog::Probe() {
  std::vector<std::pair<int, std::exception_ptr>> failed;
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    auto* pair = dynamic_cast<::gloo::transport::tcp::Pair*>(context_->getPair(peer).get());
    if (pair == nullptr) continue;
    try {
      pair->tryRecv(probe_buffer_.get(), kProbeSlot, 0, 0);
    } catch (...) {
      failed.emplace_back(peer, std::current_exception());
    }
  }
  return failed;
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
