#include "runtime/backends/gloo/ring.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <string>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "runtime/backends/pieces.h"
#include "runtime/common/reduce.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {
namespace {

// Gloo's own collectives use slot prefixes 0x01..0x08 and the PeerWatchdog probes on 0xff.
constexpr uint8_t kRingAllgatherSlotPrefix = 0x41;
constexpr uint8_t kRingReducescatterSlotPrefix = 0x42;

using ::gloo::transport::UnboundBuffer;

int64_t Segments(int64_t bytes, int64_t segment) { return (bytes + segment - 1) / segment; }

// The ring's block index i, taken mod n into [0, n).
int BlockAt(int i, int n) { return (i % n + n) % n; }

void Check(bool completed, const char* what) {
  if (!completed) throw ::gloo::IoException(std::string("ring ") + what + " was aborted");
}

// Posts the transfer of segment k (`bytes` long) and returns the buffer whose wait covers it.
using PostSegment = std::function<UnboundBuffer*(int64_t k, int64_t bytes)>;

// One ring step: `send_bytes` to the right neighbour and `recv_bytes` from the left one, segment
// by segment, at most `window` of each in flight. `received(k, bytes)` runs once segment k of the
// receive is in, before segment k + window of the receive is posted (so a landing slot can be
// reused) and before segment k + window of the send goes out; segment k + window of the send is
// posted only once segment k's send has completed (so a staging slot can be reused).
void Step(const RingOptions& o, int64_t segment, int64_t send_bytes, const PostSegment& post_send,
          int64_t recv_bytes, const PostSegment& post_recv,
          const std::function<void(int64_t, int64_t)>& received) {
  const int64_t window = std::max(1, o.window);
  const int64_t sends = Segments(send_bytes, segment);
  const int64_t recvs = Segments(recv_bytes, segment);
  auto length = [segment](int64_t total, int64_t k) { return std::min(segment, total - k * segment); };
  // Segments on one pair and slot complete in the order they were posted, whichever buffer each
  // went from or to; each wait is on the buffer of the oldest segment not yet waited for.
  std::deque<UnboundBuffer*> sending, receiving;
  auto send = [&](int64_t k) { sending.push_back(post_send(k, length(send_bytes, k))); };
  auto recv = [&](int64_t k) { receiving.push_back(post_recv(k, length(recv_bytes, k))); };

  for (int64_t k = 0; k < std::min(window, recvs); ++k) recv(k);
  for (int64_t k = 0; k < std::min(window, sends); ++k) send(k);
  for (int64_t k = 0; k < std::max(sends, recvs); ++k) {
    if (k < recvs) {
      Check(receiving.front()->waitRecv(o.timeout), "receive");
      receiving.pop_front();
      received(k, length(recv_bytes, k));
      if (k + window < recvs) recv(k + window);
    }
    if (k < sends) {
      Check(sending.front()->waitSend(o.timeout), "send");
      sending.pop_front();
      if (k + window < sends) send(k + window);
    }
  }
}

// The neighbours in the ring.
int Right(const RingOptions& o) { return (o.context->rank + 1) % o.context->size; }
int Left(const RingOptions& o) { return (o.context->rank + o.context->size - 1) % o.context->size; }

// Sends or receives segments at `base` + k * segment of one buffer.
PostSegment SendAt(const RingOptions& o, uint64_t slot, UnboundBuffer* buf, int64_t base, int64_t segment) {
  return [right = Right(o), slot, buf, base, segment](int64_t k, int64_t bytes) {
    buf->send(right, slot, base + k * segment, bytes);
    return buf;
  };
}
PostSegment RecvAt(const RingOptions& o, uint64_t slot, UnboundBuffer* buf,
                   std::function<int64_t(int64_t)> offset) {
  return [left = Left(o), slot, buf, offset = std::move(offset)](int64_t k, int64_t bytes) {
    buf->recv(left, slot, offset(k), bytes);
    return buf;
  };
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t j = 0; j < sizes.size(); ++j) offsets[j + 1] = offsets[j] + sizes[j];
  return offsets;
}

}  // namespace

int64_t SegmentBytesForLink(double bytes_per_second) {
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second)) return kDefaultSegmentBytes;
  const double ideal = bytes_per_second * kSegmentSeconds;
  int64_t segment = kMinLinkSegmentBytes;
  // The next power of two is nearer than this one in ratio once the ideal passes its geometric
  // midpoint, segment * sqrt(2).
  while (segment < kMaxLinkSegmentBytes && ideal > static_cast<double>(segment) * std::sqrt(2.0)) {
    segment *= 2;
  }
  return segment;
}

void RingAllgather(const RingOptions& o, char* buf, const std::vector<int64_t>& block_bytes) {
  const int rank = o.context->rank;
  const int n = o.context->size;
  const std::vector<int64_t> offsets = Offsets(block_bytes);
  auto out = o.context->createUnboundBuffer(buf, offsets[n]);
  const uint64_t slot = ::gloo::Slot::build(kRingAllgatherSlotPrefix, o.tag);
  const int64_t segment = std::max<int64_t>(1, std::min(o.segment_bytes, kWholeBlocks));
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = BlockAt(rank - s, n);
    const int recv_block = BlockAt(rank - s - 1, n);
    const int64_t recv_at = offsets[recv_block];
    Step(o, segment, block_bytes[send_block], SendAt(o, slot, out.get(), offsets[send_block], segment),
         block_bytes[recv_block],
         RecvAt(o, slot, out.get(), [recv_at, segment](int64_t k) { return recv_at + k * segment; }),
         [](int64_t, int64_t) {});
  }
}

namespace {

// Whole elements per segment, so that every received segment reduces on its own.
int64_t ElementSegment(const RingOptions& o, int64_t width) {
  return std::max<int64_t>(1, std::min(o.segment_bytes, kWholeBlocks) / width) * width;
}

}  // namespace

int64_t RingLandingBytes(const RingOptions& o, const std::vector<int64_t>& counts,
                         DataType dtype) {
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  int64_t largest = 0;
  for (int64_t c : counts) largest = std::max(largest, c * width);
  return std::min(ElementSegment(o, width), largest) * std::max(1, o.window);
}

void RingReducescatter(const RingOptions& o, const char* in, char* out, char* partial,
                       char* landing, const std::vector<int64_t>& counts, DataType dtype,
                       ReduceOp op) {
  const int rank = o.context->rank;
  const int n = o.context->size;
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<int64_t> block_bytes(n);
  for (int j = 0; j < n; ++j) block_bytes[j] = counts[j] * width;
  const std::vector<int64_t> offsets = Offsets(block_bytes);
  const int64_t segment = ElementSegment(o, width);
  const int64_t window = std::max(1, o.window);
  const int64_t slot_bytes = RingLandingBytes(o, counts, dtype) / window;
  auto input = o.context->createUnboundBuffer(const_cast<char*>(in), offsets[n]);
  // With two ranks the one step sends input and sums into `out`: no partial sums are kept.
  std::unique_ptr<UnboundBuffer> partials;
  if (n > 2) partials = o.context->createUnboundBuffer(partial, offsets[n]);
  auto incoming = o.context->createUnboundBuffer(landing, slot_bytes * window);
  const uint64_t slot = ::gloo::Slot::build(kRingReducescatterSlotPrefix, o.tag);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = BlockAt(rank - s - 1, n);
    const int recv_block = BlockAt(rank - s - 2, n);
    const char* mine = in + offsets[recv_block];
    char* sum = s == n - 2 ? out : partial + offsets[recv_block];  // the last block is ours
    Step(o, segment, block_bytes[send_block],
         SendAt(o, slot, s == 0 ? input.get() : partials.get(), offsets[send_block], segment),
         block_bytes[recv_block],
         RecvAt(o, slot, incoming.get(), [slot_bytes, window](int64_t k) { return (k % window) * slot_bytes; }),
         [&](int64_t k, int64_t bytes) {
           const int64_t at = k * segment;
           ReduceBinary(sum + at, mine + at, landing + (k % window) * slot_bytes, bytes / width,
                        dtype, op);
         });
  }
}

namespace {

constexpr uint8_t kRingAllreduceScatterSlotPrefix = 0x43;
constexpr uint8_t kRingAllreduceGatherSlotPrefix = 0x44;

// The pieces of one allreduce as the buffer they stand for, in bytes: which piece a segment lies
// in, unbound buffers over the pieces' inputs and outputs (made when first used), and the
// gathers and scatters for segments that span pieces.
class PieceBuffer {
 public:
  PieceBuffer(const RingOptions& o, const std::vector<AllreducePiece>& pieces, int64_t width)
      : o_(o), pieces_(pieces), width_(width), starts_(PieceStarts(pieces)),
        inputs_(pieces.size()), outputs_(pieces.size()) {}

  int64_t count() const { return starts_.back(); }
  // The piece holding all of elements [lo, lo + n) (n > 0), or -1 when they span pieces.
  int64_t Within(int64_t lo, int64_t n) const {
    const size_t i = PieceAt(starts_, lo);
    return lo + n <= starts_[i + 1] ? static_cast<int64_t>(i) : -1;
  }
  // Byte offset of element `at` in piece i.
  int64_t Offset(int64_t i, int64_t at) const { return (at - starts_[i]) * width_; }
  UnboundBuffer* InBuffer(int64_t i) { return Buffer(&inputs_[i], const_cast<void*>(pieces_[i].in), i); }
  UnboundBuffer* OutBuffer(int64_t i) { return Buffer(&outputs_[i], pieces_[i].out, i); }

  // Calls fn(piece, element offset in the piece, element offset from `lo`, elements) for each
  // piece's share of elements [lo, lo + n).
  template <typename Fn>
  void ForEachShareOf(int64_t lo, int64_t n, Fn fn) const {
    ForEachShare(pieces_, starts_, lo, lo + n, fn);
  }
  // Copies the inputs (or outputs) of elements [lo, lo + n) to `to`.
  void Gather(bool outputs, int64_t lo, int64_t n, char* to) const {
    ForEachShareOf(lo, n, [&](const AllreducePiece& p, int64_t from, int64_t at, int64_t k) {
      const void* src = outputs ? p.out : p.in;
      std::memcpy(to + at * width_, static_cast<const char*>(src) + from * width_, k * width_);
    });
  }
  // Copies `from` to the outputs of elements [lo, lo + n).
  void Scatter(const char* from, int64_t lo, int64_t n) const {
    ForEachShareOf(lo, n, [&](const AllreducePiece& p, int64_t to, int64_t at, int64_t k) {
      std::memcpy(static_cast<char*>(p.out) + to * width_, from + at * width_, k * width_);
    });
  }

 private:
  UnboundBuffer* Buffer(std::unique_ptr<UnboundBuffer>* slot, void* data, int64_t i) {
    if (!*slot) *slot = o_.context->createUnboundBuffer(data, pieces_[i].count * width_);
    return slot->get();
  }

  const RingOptions& o_;
  const std::vector<AllreducePiece>& pieces_;
  const int64_t width_;
  const std::vector<int64_t> starts_;
  std::vector<std::unique_ptr<UnboundBuffer>> inputs_, outputs_;
};

void ApplyEpilogue(char* buf, int64_t n, DataType dtype, const AllreduceEpilogue& epilogue) {
  // Checked by the caller before any transfer: these cannot fail here.
  if (epilogue.scale != 1.0) (void)ScaleBuffer(buf, n, dtype, epilogue.scale);
  if (epilogue.divisor != 1) (void)DivideBuffer(buf, n, dtype, epilogue.divisor);
}

char* Reserve(std::vector<char>* v, int64_t bytes) {
  if (static_cast<int64_t>(v->size()) < bytes) v->resize(bytes);
  return v->data();
}

}  // namespace

void RingAllreducePieces(const RingOptions& o, const std::vector<AllreducePiece>& given, DataType dtype,
                         ReduceOp op, const AllreduceEpilogue& epilogue, RingScratch* scratch) {
  const int rank = o.context->rank;
  const int n = o.context->size;
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  // A joined rank's pieces: zeros in, results dropped (buffers of their own, for this call).
  std::vector<AllreducePiece> pieces = given;
  std::vector<std::vector<char>> stand_ins;
  for (AllreducePiece& p : pieces) {
    if (p.count > 0 && p.in == nullptr) p.in = stand_ins.emplace_back(p.count * width, 0).data();
    if (p.count > 0 && p.out == nullptr) p.out = stand_ins.emplace_back(p.count * width).data();
  }
  PieceBuffer buf(o, pieces, width);
  const int64_t total = buf.count();
  if (total == 0) return;
  std::vector<int64_t> first(n + 1, 0);  // block j is elements [first[j], first[j + 1])
  for (int j = 0; j < n; ++j) first[j + 1] = first[j] + total / n + (j < total % n ? 1 : 0);
  // Whole blocks where segments are unbounded (one host): no larger than block 0, the largest.
  const int64_t segment = std::min(ElementSegment(o, width), std::max<int64_t>(1, first[1]) * width);
  const int64_t per = segment / width;  // elements per segment
  const int64_t window = std::max(1, o.window);
  char* const landing = Reserve(&scratch->landing, segment * window);
  char* const staging = Reserve(&scratch->staging, segment * window);
  auto landing_buf = o.context->createUnboundBuffer(landing, segment * window);
  auto staging_buf = o.context->createUnboundBuffer(staging, segment * window);
  std::unique_ptr<UnboundBuffer> partial_buf;  // partial sums: only with more than two ranks
  char* partial = nullptr;
  if (n > 2) {
    partial = Reserve(&scratch->partial, total * width);
    partial_buf = o.context->createUnboundBuffer(partial, total * width);
  }
  auto slot_of = [segment, window](int64_t k) { return (k % window) * segment; };
  auto block_bytes = [&first, width](int j) { return (first[j + 1] - first[j]) * width; };
  // Sends the inputs (or outputs) of elements [lo, lo + bytes / width): from the piece that holds
  // them, or gathered into staging slot k.
  auto send_pieces = [&](bool outputs, uint64_t slot, int64_t lo, int64_t k, int64_t bytes) {
    const int64_t i = buf.Within(lo, bytes / width);
    if (i >= 0) {
      UnboundBuffer* from = outputs ? buf.OutBuffer(i) : buf.InBuffer(i);
      from->send(Right(o), slot, buf.Offset(i, lo), bytes);
      return from;
    }
    buf.Gather(outputs, lo, bytes / width, staging + slot_of(k));
    staging_buf->send(Right(o), slot, slot_of(k), bytes);
    return staging_buf.get();
  };

  // Reduce-scatter: step s sends block (rank - s - 1), at step 0 from the inputs, then the partial
  // sums, and adds the left neighbour's partial of block (rank - s - 2) to this rank's input; at
  // the last step that block is this rank's own and the sum goes to the outputs.
  const uint64_t scatter_slot = ::gloo::Slot::build(kRingAllreduceScatterSlotPrefix, o.tag);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = BlockAt(rank - s - 1, n);
    const int recv_block = BlockAt(rank - s - 2, n);
    const bool last = s == n - 2;
    PostSegment post_send = [&, s, send_block](int64_t k, int64_t bytes) -> UnboundBuffer* {
      const int64_t lo = first[send_block] + k * per;
      if (s == 0) return send_pieces(false, scatter_slot, lo, k, bytes);
      partial_buf->send(Right(o), scatter_slot, lo * width, bytes);
      return partial_buf.get();
    };
    Step(o, segment, block_bytes(send_block), post_send,
         block_bytes(recv_block),
         RecvAt(o, scatter_slot, landing_buf.get(), slot_of),
         [&, last, recv_block](int64_t k, int64_t bytes) {
           // Share by share, from the inputs where they lie into the partial sums or the
           // outputs: a segment that spans pieces costs no copy here.
           const int64_t lo = first[recv_block] + k * per;
           const char* theirs = landing + slot_of(k);
           buf.ForEachShareOf(lo, bytes / width, [&](const AllreducePiece& p, int64_t from, int64_t at, int64_t count) {
             const char* mine = static_cast<const char*>(p.in) + from * width;
             if (!last) {
               ReduceBinary(partial + (lo + at) * width, mine, theirs + at * width, count, dtype, op);
               return;
             }
             char* sum = static_cast<char*>(p.out) + from * width;
             ReduceBinary(sum, mine, theirs + at * width, count, dtype, op);
             ApplyEpilogue(sum, count, dtype, epilogue);
           });
         });
  }

  // All-gather of the finished blocks: step s sends block (rank - s) from the outputs and receives
  // block (rank - s - 1) into them (through a landing slot when the segment spans pieces).
  const uint64_t gather_slot = ::gloo::Slot::build(kRingAllreduceGatherSlotPrefix, o.tag);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = BlockAt(rank - s, n);
    const int recv_block = BlockAt(rank - s - 1, n);
    Step(o, segment, block_bytes(send_block),
         [&, send_block](int64_t k, int64_t bytes) {
           return send_pieces(true, gather_slot, first[send_block] + k * per, k, bytes);
         },
         block_bytes(recv_block),
         [&, recv_block](int64_t k, int64_t bytes) -> UnboundBuffer* {
           const int64_t lo = first[recv_block] + k * per;
           const int64_t i = buf.Within(lo, bytes / width);
           if (i >= 0) {
             UnboundBuffer* to = buf.OutBuffer(i);
             to->recv(Left(o), gather_slot, buf.Offset(i, lo), bytes);
             return to;
           }
           landing_buf->recv(Left(o), gather_slot, slot_of(k), bytes);
           return landing_buf.get();
         },
         [&, recv_block](int64_t k, int64_t bytes) {
           const int64_t lo = first[recv_block] + k * per;
           if (buf.Within(lo, bytes / width) < 0) buf.Scatter(landing + slot_of(k), lo, bytes / width);
         });
  }
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
