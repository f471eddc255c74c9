// PeerWatchdog: makes a dead peer end the collective that is waiting on it within ~`interval`.
//
// Why it exists: Gloo 0.5's TCP pair notices a closed or reset connection at once, stores the
// error and fails the operations it still has queued -- but not a send or receive whose bytes are
// already moving (its tx/rx queue entries for unbound buffers). A thread waiting on such a buffer
// sleeps until the collective's timeout (300 s by default). Killing a peer mid-allreduce left the
// survivor hanging like that in about 1 run in 20 (gloo_peer_kill_test).
//
// How: while a collective runs (between Arm and Disarm, via Scope), a thread wakes every
// `interval` and probes every pair with Pair::tryRecv on a slot no collective uses: that call
// has no side effect on a healthy pair and rethrows the stored error of a failed one. It hands
// that error to every live unbound buffer that has sent to or received from that peer
// (BufferRegistry::FailPeer), so each wait blocked on the peer throws it and the collective
// unwinds with the pair's own message ("Connection closed by peer ..."). Only those: a peer that
// exits normally right after its part of a collective (the first rank to finish a job, an elastic
// worker removed from the next round) must not fail a collective that only waits on other ranks.
// Such a collective that does depend on the dead peer through a third rank still ends: that
// rank's own collective fails, and its backend then closes every connection (GlooBackend::Finish).
//
// Cost: one uncontended mutex lock per Arm and per Disarm on the collective's thread, nothing
// else -- Arm does not wake the watchdog unless it has gone idle. While collectives keep coming,
// the thread ticks every `interval`; after about a second without any it sleeps until the next
// Arm (an idle runtime must not burn a core).
//
// Threading: Arm/Disarm from any thread (a backend and its forks each arm it around their own
// collectives; it stays armed while any of them runs); the watchdog thread only reads the
// context (pairs are thread-safe) and fails buffers through the registry.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <gloo/context.h>

#include "runtime/backends/gloo/tracked_transport.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

class PeerWatchdog {
 public:
  PeerWatchdog(std::shared_ptr<::gloo::Context> context, std::shared_ptr<BufferRegistry> registry,
               std::chrono::milliseconds interval);
  ~PeerWatchdog();  // stops and joins the thread

  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

  // Arms the watchdog for the lifetime of the scope (one collective).
  class Scope {
   public:
    explicit Scope(PeerWatchdog* watchdog) : watchdog_(watchdog) { watchdog_->Arm(); }
    ~Scope() { watchdog_->Disarm(); }

   private:
    PeerWatchdog* watchdog_;
  };

 private:
  void Arm();
  void Disarm();
  void Run();
  // (rank, stored error) of every failed pair; empty when every pair is healthy.
  std::vector<std::pair<int, std::exception_ptr>> Probe();

  const std::shared_ptr<::gloo::Context> context_;
  const std::shared_ptr<BufferRegistry> registry_;
  const std::chrono::milliseconds interval_;
  std::unique_ptr<::gloo::transport::UnboundBuffer> probe_buffer_;  // zero bytes, never used

  std::mutex mu_;
  std::condition_variable cv_;
  int armed_ = 0;  // collectives running now
  bool idle_ = false;  // the thread waits without a deadline; Arm must wake it
  bool stop_ = false;
  uint64_t arms_ = 0;  // counts Arm calls, to tell "quiet" from "busy with short collectives"
  std::thread thread_;  // last: starts after every member above is ready
};

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
