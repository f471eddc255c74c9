#include "runtime/backends/gloo/ring.h"

#include <algorithm>
#include <functional>
#include <string>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

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

void Check(bool completed, const char* what) {
  if (!completed) throw ::gloo::IoException(std::string("ring ") + what + " was aborted");
}

// One ring step: `send_bytes` from `from` (at from_offset) to the right neighbour and `recv_bytes`
// from the left one, segment by segment. Segment k of the receive lands in `to` at
// to_offset(k); `received(k, bytes)` runs once it is there, before segment k + window of the
// send goes out and before the receive buffer slot is posted again.
void Step(const RingOptions& o, uint64_t slot, int64_t segment, UnboundBuffer* from,
          int64_t from_offset, int64_t send_bytes, UnboundBuffer* to,
          const std::function<int64_t(int64_t)>& to_offset, int64_t recv_bytes,
          const std::function<void(int64_t, int64_t)>& received) {
  const int rank = o.context->rank;
  const int size = o.context->size;
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const int64_t window = std::max(1, o.window);
  const int64_t sends = Segments(send_bytes, segment);
  const int64_t recvs = Segments(recv_bytes, segment);
  auto length = [segment](int64_t total, int64_t k) { return std::min(segment, total - k * segment); };
  auto post_send = [&](int64_t k) {
    from->send(right, slot, from_offset + k * segment, length(send_bytes, k));
  };
  auto post_recv = [&](int64_t k) { to->recv(left, slot, to_offset(k), length(recv_bytes, k)); };

  for (int64_t k = 0; k < std::min(window, recvs); ++k) post_recv(k);
  for (int64_t k = 0; k < std::min(window, sends); ++k) post_send(k);
  // Segments on one pair and slot complete in the order they were posted.
  for (int64_t k = 0; k < std::max(sends, recvs); ++k) {
    if (k < recvs) {
      Check(to->waitRecv(o.timeout), "receive");
      received(k, length(recv_bytes, k));
      if (k + window < recvs) post_recv(k + window);
    }
    if (k < sends) {
      Check(from->waitSend(o.timeout), "send");
      if (k + window < sends) post_send(k + window);
    }
  }
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t j = 0; j < sizes.size(); ++j) offsets[j + 1] = offsets[j] + sizes[j];
  return offsets;
}

}  // namespace

void RingAllgather(const RingOptions& o, char* buf, const std::vector<int64_t>& block_bytes) {
  const int rank = o.context->rank;
  const int n = o.context->size;
  const std::vector<int64_t> offsets = Offsets(block_bytes);
  auto out = o.context->createUnboundBuffer(buf, offsets[n]);
  const uint64_t slot = ::gloo::Slot::build(kRingAllgatherSlotPrefix, o.tag);
  const int64_t segment = std::max<int64_t>(1, std::min(o.segment_bytes, kWholeBlocks));
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = ((rank - s) % n + n) % n;
    const int recv_block = ((rank - s - 1) % n + n) % n;
    const int64_t recv_at = offsets[recv_block];
    Step(o, slot, segment, out.get(), offsets[send_block], block_bytes[send_block], out.get(),
         [recv_at, segment](int64_t k) { return recv_at + k * segment; }, block_bytes[recv_block],
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
    const int send_block = ((rank - s - 1) % n + n) % n;
    const int recv_block = ((rank - s - 2) % n + n) % n;
    const char* mine = in + offsets[recv_block];
    char* sum = s == n - 2 ? out : partial + offsets[recv_block];  // the last block is ours
    Step(o, slot, segment, s == 0 ? input.get() : partials.get(), offsets[send_block],
         block_bytes[send_block], incoming.get(),
         [slot_bytes, window](int64_t k) { return (k % window) * slot_bytes; },
         block_bytes[recv_block],
         [&](int64_t k, int64_t bytes) {
           const int64_t at = k * segment;
           ReduceBinary(sum + at, mine + at, landing + (k % window) * slot_bytes, bytes / width,
                        dtype, op);
         });
  }
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
