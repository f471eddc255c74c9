// GlooBackend: dadt's CPU data plane over Gloo's TCP transport (registered as "gloo").
//
// Created through BackendRegistry::Create("gloo", options); nothing outside this folder includes
// this header. Each collective maps onto one of Gloo's "new style" collectives:
//
//   Allreduce      Gloo's ring: reduce-scatter then allgather, pipelined in segments of at most
//                  1 MiB with two in flight. Bandwidth-optimal (each rank sends 2(n-1)/n of the
//                  buffer) at the cost of 2(n-1) latency steps, which is why small tensors are
//                  fused by the core first. float32 Sum uses gloo::sum<float>, exactly what raw
//                  Gloo uses; every other dtype/op reduces with dadt::ReduceBinary.
//   Allgatherv     dadt's ring over Gloo's pairs (ring.h): n-1 steps, each rank forwards one block
//                  per step in segments (DADT_GLOO_SEGMENT_BYTES; default 1 MiB across hosts,
//                  whole blocks when every rank is on this host), two in flight, each clocked
//                  by the segment received before it.
//   Broadcast      Gloo's binomial tree from `root` (ceil(log2 n) steps, whole buffer per step).
//   Alltoallv      Gloo's pairwise exchange: all n-1 sends and receives posted at once.
//   Reducescatter  the same segmented ring (ring.h), reducing each received segment into this
//                  rank's partial sums (reducescatter.cc).
//   Barrier        Gloo's dissemination barrier: ceil(log2 n) rounds of zero-byte messages.
//
// size == 1 needs no network: no device, no store traffic, and every collective is a local copy
// or nothing, so a single-process job starts instantly.
//
// Threading: like every Backend, called from one thread (the core's loop thread); Gloo's device
// runs its own I/O thread and the PeerWatchdog one more (asleep unless collectives are running).
// Every collective gets a fresh tag so a late message from one collective can never be matched
// by the next.
//
// Failure: Gloo throws; we convert at this edge (gloo_error.h) to kAborted (a peer died or a
// connection broke), kTimeout (options.timeout passed) or kInternal. Gloo's TCP pair notices a
// dead peer at once but can leave a wait on an in-flight transfer sleeping until the timeout;
// the PeerWatchdog (peer_watchdog.h) closes that gap, so a dead peer ends the collective within
// about 100 ms. After the first failure the backend is poisoned: it closes all its connections
// (peers blocked on this rank fail fast too) and every later call returns kAborted at once.
// One process-wide side effect: with size > 1, Create sets SIGPIPE to SIG_IGN if it is still at
// its default, because Gloo's writes to a dead peer would otherwise kill this process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backends/backend.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
class BufferRegistry;
class PeerWatchdog;
struct RingOptions;
}  // namespace internal

class GlooBackend final : public Backend {
 public:
  // Connects the full mesh (blocking until every rank has joined or options.timeout passes).
  static StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  ~GlooBackend() override;

  const char* Name() const override { return "GLOO"; }
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status Barrier() override;

 private:
  GlooBackend(const BackendOptions& options, std::shared_ptr<::gloo::Context> context,
              std::shared_ptr<internal::BufferRegistry> registry);

  // The poison check every collective starts with.
  Status CheckUsable() const;
  // Records a failure (poisoning the backend and closing every connection, so that peers blocked
  // on this rank fail fast too) and adds this rank to the message.
  Status Finish(Status status);
  Status CheckPerRank(const char* what, const std::vector<int64_t>& v) const;
  static Status CheckReduce(int64_t count, DataType dtype, ReduceOp op);
  static char* NonNull(const void* p);
  uint32_t NextTag() { return tag_++; }
  // A ring collective's options (ring.h), with the next tag.
  internal::RingOptions NextRing();

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const int64_t segment_bytes_;  // the rings' segment size (ring.h)
  std::shared_ptr<::gloo::Context> context_;  // null when size_ == 1
  std::unique_ptr<internal::PeerWatchdog> watchdog_;  // null when size_ == 1; dies before context_
  uint32_t tag_ = 0;
  Status broken_;
  std::vector<char> scratch_;  // Reducescatter's partial sums, reused between calls
  std::vector<char> landing_;  // Reducescatter's received segments, reused between calls
};

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
