// Segmented, receive-clocked ring all-gather, reduce-scatter, and allreduce of a fused response's
// tensors where they lie, over Gloo's unbound buffers.
//
// Why not Gloo's own allgatherv (and the alltoallv that the reduce-scatter used before): those
// hand each peer one message of the whole block. Gloo's TCP pair sizes the socket's send buffer
// to the message (up to 32 MiB) and writes it all at once, so on a rate-limited link a large
// all-gather pushes megabytes into the queues in both directions, each side's ACKs wait behind
// the other side's data, and the transfer ran at about half the link rate: on a 1 Gbit/s tbf
// link, a 44 MB all-gather took 428 ms where 44 of 1 MB took 220 ms (ideal 186 ms). Gloo's
// allreduce does not suffer from it because its ring moves 1 MiB segments, at most two in
// flight, each clocked by the segment received before it. These rings do the same:
//
//   * each ring step's block is cut into segments of `segment_bytes` (a whole number of
//     elements); at most `window` segments are in flight per direction;
//   * segment k + window is sent only once segment k has been received (and, for the
//     reduce-scatter, reduced), so neither side runs ahead of the other's data;
//   * receives are posted `window` segments ahead, so the sender never waits for a
//     notification round trip.
//
// On one host (loopback) there is no link to keep from queueing, and every segment costs thread
// wake-ups, so GlooBackend then sends each block as one segment unless DADT_GLOO_SEGMENT_BYTES
// says otherwise. Across hosts it sizes the segments to the link (SegmentBytesForLink).
//
// Ring order (n ranks, right = rank + 1, left = rank - 1, indices mod n), n - 1 steps:
//   all-gather     step s sends block (rank - s) and receives block (rank - s - 1) in place;
//   reduce-scatter step s sends the partial sum of block (rank - s - 1) (at step 0: its own
//                  input block) and receives the left neighbour's partial of block
//                  (rank - s - 2), to which it adds its own input; at the last step that block is
//                  `rank`'s and the sum, now over every rank, goes straight to the output
//                  (reduced in ring order, the same order on every run). The input is only read.
// Each rank sends (n - 1)/n of the buffer either way: bandwidth-optimal, like the allreduce ring.
//
// Failure: Gloo's waits throw (a closed pair, a timeout, or the PeerWatchdog failing the buffers);
// the caller converts at its DADT_GLOO_STATUS edge. A wait that Gloo reports as aborted throws
// ::gloo::IoException too.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/common/types.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

// Two segments in flight; 512 KiB segments when the link's rate is unknown. On a 1 Gbit/s link (tbf, 256 KB burst), 2 MiB segments left
// all-gathers and reduce-scatters of 4-44 MB at 108-116 MB/s and 512 KiB (or 256 KiB) moved them
// at 117-120 MB/s; mode="dear" on a 9.4 MB-per-layer MLP then took 266 ms a step against 286 ms
// (1 MiB: 278 ms), and on the 10 Gbit/s link and smaller layers it was level or faster
// (docs/benchmarks/log.md, "Segment size of the rings"). The allreduce of the pieces is faster
// with 4 MiB segments at 10 Gbit/s and slower at 1 Gbit/s, where such a segment is more than the
// link's queue holds (the log, "Fused tensors reduced where they lie across hosts").
constexpr int64_t kDefaultSegmentBytes = int64_t{512} << 10;
// Across hosts the backend measures the link when it connects (unless DADT_GLOO_SEGMENT_BYTES is
// set) and sizes the segments to it: one segment should be on the wire about kSegmentSeconds,
// long enough that the per-segment wake-ups vanish beside it, short enough that the pipeline's
// fill and drain (one segment each way) stay small and the segment fits the link's queues. That
// picks 512 KiB at 1 Gbit/s and 4 MiB at 10 Gbit/s, the sizes the log found best there.
constexpr double kSegmentSeconds = 3.5e-3;
constexpr int64_t kMinLinkSegmentBytes = int64_t{256} << 10;
constexpr int64_t kMaxLinkSegmentBytes = int64_t{4} << 20;
// The segment for a link that moves `bytes_per_second` one way: kSegmentSeconds' worth, rounded to
// the nearest power of two (in ratio) and held within [kMinLinkSegmentBytes,
// kMaxLinkSegmentBytes]; kDefaultSegmentBytes when the rate is not a positive number.
int64_t SegmentBytesForLink(double bytes_per_second);
// Each block as one segment.
constexpr int64_t kWholeBlocks = int64_t{1} << 62;
constexpr int kDefaultWindow = 2;

struct RingOptions {
  std::shared_ptr<::gloo::Context> context;
  uint32_t tag = 0;  // a fresh tag per collective (GlooBackend::NextTag)
  std::chrono::milliseconds timeout{0};
  int64_t segment_bytes = kDefaultSegmentBytes;  // rounded down to whole elements, at least one
  int window = kDefaultWindow;                   // >= 1
};

// buf holds every rank's block back to back (block_bytes[j] bytes for rank j); this rank's block
// must already be in place. On return every block is.
void RingAllgather(const RingOptions& options, char* buf, const std::vector<int64_t>& block_bytes);

// in: this rank's full input (counts[j] elements of dtype for block j), only read. out: this
// rank's block of the result (counts[rank] elements); it may be `in`'s block `rank` itself.
// partial: scratch of the input's size, where the blocks in transit are summed (unused, and may
// be null, with two ranks). landing: scratch
// of at least RingLandingBytes() bytes, where received segments land.
void RingReducescatter(const RingOptions& options, const char* in, char* out, char* partial,
                       char* landing, const std::vector<int64_t>& counts, DataType dtype,
                       ReduceOp op);
int64_t RingLandingBytes(const RingOptions& options, const std::vector<int64_t>& counts,
                         DataType dtype);

// Buffers a ring keeps between calls (the backend handle owns one): where received segments land,
// where segments that span pieces are gathered to be sent, and the partial sums of the blocks in
// transit.
struct RingScratch {
  std::vector<char> landing;
  std::vector<char> staging;
  std::vector<char> partial;
};

// The allreduce of a fused response's tensors where they lie (Backend::AllreducePieces): the
// reduce-scatter above, then the all-gather, over the pieces taken as one buffer of their summed
// counts, cut into n blocks of whole elements (the first total % n blocks one element longer).
// A segment inside one piece is sent from it, and in the all-gather received straight into its
// output; every received segment of the reduce-scatter is reduced share by share from the inputs
// into the partial sums or the outputs: no fusion buffer and no copy in or out. Only a segment
// that spans pieces is gathered into a segment-sized buffer to be sent (and, in the all-gather,
// received into one and scattered), which happens while the segments before it are on the wire. Each rank applies the epilogue to its own
// block as it finishes it, before sending it on. A piece with no input contributes zeros; one with
// no output has its result dropped. The epilogue must have been checked for the dtype (ScaleBuffer
// and DivideBuffer with n = 0) before: a refusal here would leave the peers waiting.
void RingAllreducePieces(const RingOptions& options, const std::vector<AllreducePiece>& pieces,
                         DataType dtype, ReduceOp op, const AllreduceEpilogue& epilogue,
                         RingScratch* scratch);

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
