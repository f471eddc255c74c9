// GlooBackend: dadt's CPU data plane over Gloo's TCP transport (registered as "gloo").
//
// Created through BackendRegistry::Create("gloo", options); nothing outside this folder includes
// this header. Each collective maps onto one of Gloo's "new style" collectives:
//
//   Allreduce      every rank on this host: through shared memory (shm/shm_allreduce.h; handles
//                  beyond its slots, or DADT_SHM_ALLREDUCE=0, use the rings below). Otherwise
//                  Gloo's ring: reduce-scatter then allgather, pipelined in segments of at most
//                  1 MiB with two in flight. Bandwidth-optimal (each rank sends 2(n-1)/n of the
//                  buffer) at the cost of 2(n-1) latency steps, which is why small tensors are
//                  fused by the core first. float32 Sum uses gloo::sum<float>, exactly what raw
//                  Gloo uses; every other dtype/op reduces with dadt::ReduceBinary.
//   AllreducePieces  a response's tensors reduced where they lie, the epilogue included: through
//                  shared memory as above, or else dadt's ring over the pieces (ring.h,
//                  RingAllreducePieces): the same reduce-scatter and all-gather in segments of
//                  DADT_GLOO_SEGMENT_BYTES, each sent from the tensor that holds it and received
//                  into its output, so a fused response needs no fusion buffer and no copy in or
//                  out (only a segment that spans tensors is gathered to be sent, and scattered
//                  once received in the all-gather; the reduce-scatter reduces it tensor by
//                  tensor).
//   Allgatherv     every rank on this host: through shared memory, as Allreduce (one copy in and
//                  one out per rank). Otherwise dadt's ring over Gloo's pairs (ring.h): n-1 steps,
//                  each rank forwards one block per step in segments (DADT_GLOO_SEGMENT_BYTES; by
//                  default, across hosts, sized to the link measured at Create (MeasureLink)),
//                  two in flight, each clocked by the segment received before it.
//   Broadcast      Gloo's binomial tree from `root` (ceil(log2 n) steps, whole buffer per step).
//   Alltoallv      Gloo's pairwise exchange: all n-1 sends and receives posted at once.
//   Reducescatter  every rank on this host: through shared memory, as Allreduce. Otherwise the
//                  same segmented ring (ring.h), reducing each received segment into this rank's
//                  partial sums (reducescatter.cc).
//   Barrier        Gloo's dissemination barrier: ceil(log2 n) rounds of zero-byte messages.
//   Exchange       every send and receive posted at once on Gloo's pairs (unbound buffers), in a
//                  slot of its own named by the coordinator's sequence number, then waited for.
//
// size == 1 needs no network: no device, no store traffic, and every collective is a local copy
// or nothing, so a single-process job starts instantly.
//
// Threading: each handle is called from one thread at a time (the core's loop thread, or one of
// its lanes). Fork() gives another handle on the same connections whose collectives may run at
// the same time: handle k tags its collectives from k << 28 on, so the two never match each
// other's messages, and within a handle every collective gets a fresh tag so a late message from
// one collective can never be matched by the next. Gloo's device runs its own I/O thread and the
// PeerWatchdog one more (asleep unless collectives are running).
//
// Failure: Gloo throws; we convert at this edge (gloo_error.h) to kAborted (a peer died or a
// connection broke), kTimeout (options.timeout passed) or kInternal. Gloo's TCP pair notices a
// dead peer at once but can leave a wait on an in-flight transfer sleeping until the timeout;
// the PeerWatchdog (peer_watchdog.h) closes that gap, so a dead peer ends the collective within
// about 100 ms. After the first failure the backend and its forks are poisoned: it closes all
// the connections (peers blocked on this rank fail fast too, and so do this rank's other forks)
// and every later call returns kAborted at once.
// One process-wide side effect: with size > 1, Create sets SIGPIPE to SIG_IGN if it is still at
// its default, because Gloo's writes to a dead peer would otherwise kill this process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backends/backend.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace dadt {
namespace backends {
namespace shm {
class ShmAllreduce;
}  // namespace shm
namespace gloo {
namespace internal {
class BufferRegistry;
class PeerWatchdog;
struct RingOptions;
struct RingScratch;
}  // namespace internal

class GlooBackend final : public Backend {
 public:
  // Connects the full mesh (blocking until every rank has joined or options.timeout passes).
  static StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  ~GlooBackend() override;

  const char* Name() const override { return "GLOO"; }
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  bool ReducesPieces() const override;
  Status AllreducePieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                         const AllreduceEpilogue& epilogue) override;
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status Barrier() override;
  Status Exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                  uint32_t sequence) override;
  std::unique_ptr<Backend> Fork() override;

  // The rings' segment size in bytes (ring.h): DADT_GLOO_SEGMENT_BYTES when set; else, across
  // hosts, the size for the link measured at Create (the same on every rank); on one host, each
  // block whole.
  int64_t segment_bytes() const { return segment_bytes_; }
  double LinkBytesPerSecond() const override { return link_bytes_per_second_; }

 private:
  struct Shared;  // what a backend and its forks share: connections, watchdog, failure

  GlooBackend(const BackendOptions& options, std::shared_ptr<::gloo::Context> context,
              std::shared_ptr<internal::BufferRegistry> registry);
  GlooBackend(const GlooBackend& parent, uint32_t tag_base);

  // When every rank is on this host: opens the shared-memory allreduce (shm/shm_allreduce.h),
  // which every rank keeps only if every rank could (agreed over the rendezvous store), and
  // otherwise logs why not. Fails only when the store does.
  Status SetUpSharedMemory(const BackendOptions& options);
  // Across hosts: times a few ring all-gathers, agrees with the other ranks on the slowest, and
  // unless a segment size was given (`keep_segment`) sizes the segments to that rate
  // (SegmentBytesForLink).
  Status MeasureLink(bool keep_segment);
  // This handle's slot in the shared-memory allreduce, or -1 (not on one host, or beyond its
  // slots): handle k (k = tag_base_ >> 28) has slot k.
  int ShmSlot() const;
  // The shared-memory engine when this handle has a slot in it (ShmSlot() >= 0), else null.
  shm::ShmAllreduce* Shm() const;
  // The poison check every collective starts with.
  Status CheckUsable() const;
  // Records a failure (poisoning the backend and closing every connection, so that peers blocked
  // on this rank fail fast too) and adds this rank to the message.
  Status Finish(Status status);
  Status CheckPerRank(const char* what, const std::vector<int64_t>& v) const;
  static Status CheckReduce(int64_t count, DataType dtype, ReduceOp op);
  static char* NonNull(const void* p);
  uint32_t NextTag() { return tag_base_ | (tag_++ & kTagMask); }
  // A ring collective's options (ring.h), with the next tag.
  internal::RingOptions NextRing();

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  int64_t segment_bytes_;  // the rings' segment size (ring.h); set before any fork is made
  double link_bytes_per_second_ = 0;  // MeasureLink's rate; 0 on one host
  static constexpr uint32_t kTagMask = (uint32_t{1} << 28) - 1;
  std::shared_ptr<::gloo::Context> context_;  // null when size_ == 1
  std::shared_ptr<Shared> shared_;
  internal::PeerWatchdog* watchdog_;  // shared_->watchdog; null when size_ == 1
  uint32_t tag_base_ = 0;  // this handle's tag space: k << 28 for the k-th fork, 0 for the first
  uint32_t tag_ = 0;
  std::vector<char> scratch_;  // Reducescatter's partial sums, reused between calls
  std::vector<char> landing_;  // Reducescatter's received segments, reused between calls
  std::unique_ptr<internal::RingScratch> ring_scratch_;  // AllreducePieces' buffers, likewise
};

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
