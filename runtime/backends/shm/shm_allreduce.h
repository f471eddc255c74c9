// ShmAllreduce: the host engines' allreduce (Gloo's and MPI's) when every rank of the job is on
// this host, through shared memory instead of loopback TCP or the MPI library's own transport;
// Gloo's reduce-scatter and all-gather (dear's two halves) go through it too.
//
// Why: over loopback, Gloo's ring moves each byte through the kernel twice per step (a send copy
// and a receive copy) and wakes its transport thread per segment; a 1 MiB allreduce at 2 ranks
// took ~0.9 ms that way; Open MPI 4.1's MPI_Allreduce of 47.6 MiB at 2 ranks takes 1.8x as long
// as this (docs/benchmarks/log.md, "Real models at every contender's defaults"). With shared memory every rank copies its input in once, reduces its
// own slice reading the others' copies directly, and copies the reduced slices out: about three
// passes over the buffer and two barriers.
//
// Layout: each rank owns one POSIX shared-memory segment, mapped by every rank:
//   [ Control (one cache line per word) | slot 0: buffer A, buffer B | slot 1: A, B | ... ]
// A slot belongs to one backend handle (the GlooBackend or one of its forks, which may run at the
// same time on different lanes); buffers A and B alternate between consecutive chunks, so a rank
// can copy chunk k + 1 in while a slower peer still reads chunk k.
//
// One chunk (at most kChunkBytes of the tensor), with `seq` the slot's chunk counter, which every
// rank advances identically because every rank runs the same collectives on the same handle:
//   1. copy my part of the input into my buffer (seq % 2); publish arrived[slot] = seq;
//   2. wait until every rank's arrived[slot] >= seq;
//   3. reduce my slice (elements [rank * n / size, (rank + 1) * n / size)) over every rank's
//      buffer, in rank order (so every run gives the same bits), into my buffer's slice, and
//      apply the epilogue to it (postscale, Average's division); publish reduced[slot] = seq;
//   4. wait until every rank's reduced[slot] >= seq; copy every rank's reduced slice from its
//      buffer into the caller's tensor.
// The input and the result may be pieces (the tensors of a fused response, where they lie):
// step 1 gathers from them and step 4 scatters into them, so fusion costs no extra copy.
// Why two buffers suffice: a rank writes buffer (seq % 2) again at seq + 2 only after it saw
// every rank arrive at seq + 1, and a rank arrives at seq + 1 only after step 4 of seq.
//
// Set-up (Open) is collective, over an exchange the engine provides (every rank's string, in rank
// order: Gloo's over the rendezvous store, ExchangeThroughStore; MPI's with MPI_Allgatherv): each
// rank creates its segment under a name that carries a token from rank 0 (so two jobs never meet),
// allocates it (posix_fallocate, so that a full /dev/shm is an error now and never a SIGBUS
// later), says whether it could, maps every peer's segment and checks that it can see every
// peer's process, then says whether it could. Each rank unlinks its segment name once every rank
// has opened it (or given up), so a job that dies leaves nothing in /dev/shm. Every rank returns
// the same answer: the object when every rank could, else kPrecondition naming the first rank
// that could not and why.

// Failure, never a hang: waits spin briefly, then sleep on a futex, and every few milliseconds
// check (a) the deadline (the collective timeout: kTimeout), (b) that each awaited peer process
// has not exited (a pidfd, which sees a killed peer before it is reaped; kAborted, naming the
// rank), (c) the peers' abort words (kAborted naming that rank): a rank sets its word when its
// backend fails (Abort) and when it is destroyed, so a peer that shut down mid-collective ends
// the wait at once.
//
// Reducescatter and Allgather use the same slots and counters with one wait per chunk: a rank
// reads the peers' buffers of chunk seq only before it arrives at seq + 1, and nobody writes that
// buffer again before every rank has arrived at seq + 1, so the second wait is not needed.
//
// Threading: Allreduce(slot, ...) (and the others) for a given slot from one thread at a time;
// different slots may run at once. Abort() from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {
namespace shm {

// Every rank's `mine`, in rank order (a collective: every rank calls it with the same `step`).
using ShmExchange = std::function<StatusOr<std::vector<std::string>>(const std::string& step,
                                                                    const std::string& mine)>;

// The exchange over a rendezvous store: rank r sets "<prefix>shm/<step>/<r>", then reads every
// other rank's key, waiting at most `timeout` for each.
ShmExchange ExchangeThroughStore(KeyValueStore* store, std::string prefix, int rank, int size,
                                 std::chrono::milliseconds timeout);

struct ShmAllreduceOptions {
  int rank = 0;
  int size = 1;
  bool enabled = true;     // false: take part in Open only to say "not here"
  ShmExchange exchange;    // used by Open only
  int slots = 4;                          // handles that may use it (a backend and its forks)
  int64_t chunk_bytes = 2 << 20;          // per buffer; two buffers per slot
};

class ShmAllreduce {
 public:
  // Collective. The object when every rank mapped every rank's segment, or kPrecondition saying
  // which rank could not and why (the same on every rank).
  static StatusOr<std::unique_ptr<ShmAllreduce>> Open(const ShmAllreduceOptions& options);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  int slots() const { return slots_; }

  // In place over `count` elements of `dtype` at buf, reduced with `op` (kSum, kMin, kMax,
  // kProduct) over every rank. `slot` < slots(), used by one thread at a time.
  Status Allreduce(int slot, void* buf, int64_t count, DataType dtype, ReduceOp op,
                   std::chrono::milliseconds timeout);
  // The same over pieces taken as one buffer (Backend::AllreducePieces): step 1 gathers each
  // chunk from the pieces' inputs, step 3 applies the epilogue to my reduced slice while it is
  // in cache, step 4 scatters every slice into the pieces' outputs. No fusion buffer, and no
  // pass over the result for the postscale or Average.
  Status AllreducePieces(int slot, const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                         const AllreduceEpilogue& epilogue, std::chrono::milliseconds timeout);

  // Reduce-scatter: rank r ends with the reduction, over every rank's `in`, of `in`'s block r
  // (recv_counts[r] elements after the blocks before it), written to `out` (which may be this
  // rank's own block of `in`). Each chunk takes an equal share of every rank's block, so every
  // rank reduces its own share of each chunk at once; one wait per chunk (see the .cc).
  Status Reducescatter(int slot, const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op, std::chrono::milliseconds timeout);
  // All-gather: every rank's `in` (bytes_per_rank[r] bytes) lands in `out` in rank order, on every
  // rank; `in` may be this rank's own place in `out`. One copy in, one wait and one copy out per
  // chunk.
  Status Allgather(int slot, const void* in, void* out, const std::vector<int64_t>& bytes_per_rank,
                   std::chrono::milliseconds timeout);

  // Tells the peers that this rank's backend failed: their waits end with kAborted.
  void Abort();

 private:
  struct Control;
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
  };

  ShmAllreduce(int rank, int size, int slots, int64_t chunk_bytes);
  Control* control(int rank) const;
  void SetAbort(uint32_t why);
  uint8_t* buffer(int rank, int slot, uint64_t seq) const;
  // kInvalidArgument unless `slot` is one of ours and `per_rank` has one entry per rank.
  Status CheckBlocks(int slot, const std::vector<int64_t>& per_rank, const char* what) const;
  // Sets this rank's arrived (or reduced) word of `slot` to seq and wakes its waiters.
  void Publish(int slot, bool reduced, uint64_t seq);
  // Publishes arrived[slot] = seq and waits until every rank has arrived there.
  Status Arrive(int slot, uint64_t seq, std::chrono::steady_clock::time_point deadline, const char* what);
  // Waits until every other rank's word (arrived or reduced of `slot`) is >= seq; an error names
  // `what` (the collective).
  Status WaitAll(int slot, bool reduced, uint64_t seq, std::chrono::steady_clock::time_point deadline,
                 const char* what);

  const int rank_;
  const int size_;
  const int slots_;
  const int64_t chunk_bytes_;
  std::vector<Mapping> maps_;     // one per rank
  std::vector<int32_t> pids_;     // each rank's process id
  std::vector<int> pidfds_;       // readable once that process exited; -1: none (or this rank)
  std::vector<uint64_t> seq_;     // per slot: chunks run so far
  // Per slot, ranks >= 2 only: where a slice is reduced before it goes into this rank's buffer.
  std::vector<std::vector<uint8_t>> scratch_;
};

}  // namespace shm
}  // namespace backends
}  // namespace dadt
