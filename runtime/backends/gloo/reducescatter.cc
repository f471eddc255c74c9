// GlooBackend::Reducescatter: the segmented ring of ring.h over a copy of the input.
//
// The input is copied into scratch_ (kept between calls), which the ring overwrites with partial
// sums; block `rank` of it is then the result. The copy costs one memcpy of the input, which is
// fast next to TCP, and lets `out` alias `in` (e.g. this rank's chunk in place).
//
// Before the ring, this was an alltoallv of the chunks plus a local reduction: one round of
// latency instead of n - 1, but every chunk went to its peer as one message, which on a
// rate-limited link ran at about half the link rate (ring.h says why).
#include <cstring>
#include <numeric>

#include "runtime/backends/gloo/gloo_backend.h"
#include "runtime/backends/gloo/gloo_error.h"
#include "runtime/backends/gloo/peer_watchdog.h"
#include "runtime/backends/gloo/ring.h"

namespace dadt {
namespace backends {
namespace gloo {

Status GlooBackend::Reducescatter(const void* in, void* out,
                                  const std::vector<int64_t>& recv_counts, DataType dtype,
                                  ReduceOp op) {
  DADT_RETURN_IF_ERROR(CheckUsable());
  DADT_RETURN_IF_ERROR(CheckPerRank("reducescatter", recv_counts));
  const int64_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  DADT_RETURN_IF_ERROR(CheckReduce(total, dtype, op));
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t mine = recv_counts[rank_];
  if (size_ == 1) {
    if (mine > 0 && in != out) std::memmove(out, in, mine * width);
    return Status::OK();
  }
  if (total == 0) return Status::OK();  // same counts on every rank: a consistent skip

  if (scratch_.size() < static_cast<size_t>(total * width)) scratch_.resize(total * width);
  std::memcpy(scratch_.data(), in, total * width);
  DADT_RETURN_IF_ERROR(Finish(DADT_GLOO_STATUS("reducescatter", {
    internal::PeerWatchdog::Scope watch(watchdog_.get());
    internal::RingReducescatter(NextRing(), scratch_.data(), recv_counts, dtype, op);
  })));
  const int64_t offset = std::accumulate(recv_counts.begin(), recv_counts.begin() + rank_,
                                         int64_t{0});
  if (mine > 0) std::memcpy(out, scratch_.data() + offset * width, mine * width);
  return Status::OK();
}

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
