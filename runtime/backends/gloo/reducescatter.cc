// GlooBackend::Reducescatter: an alltoallv of the chunks, then a local reduction.
//
// Algorithm: rank r sends chunk j of its input (recv_counts[j] elements) to rank j and receives
// chunk r from every rank into a scratch area, in rank order; it then reduces those n copies into
// `out` with ReduceBinary, in rank order (so the result is deterministic).
//
// Why not a ring reduce-scatter: Gloo 0.5 has no new-style reduce-scatter, and the old-style
// ReduceScatterHalvingDoubling needs an algorithm object per buffer shape. This composition has
// the same bandwidth cost as the ring -- each rank sends (n-1)/n of its input and receives
// (n-1)/n of the total once -- with one round of latency instead of n-1. The price is scratch
// memory of n times this rank's chunk (about the input's size; kept between calls) and all peers
// sending at once (incast), which loopback and switched fabrics absorb at the sizes the core
// fuses. Every copy of the chunk arrives before any reduction starts, so there is no overlap of
// reduction with transfer; the reduction is memory-bound and fast next to TCP.
//
// `out` may alias `in` (e.g. this rank's chunk in place): the exchange reads all of `in` before
// the reduction writes anything.
#include <cstring>
#include <numeric>

#include <gloo/alltoallv.h>

#include "runtime/backends/gloo/gloo_backend.h"
#include "runtime/backends/gloo/gloo_error.h"
#include "runtime/backends/gloo/peer_watchdog.h"
#include "runtime/common/reduce.h"

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
  const int64_t chunk_bytes = mine * width;
  if (size_ == 1) {
    if (mine > 0 && in != out) std::memmove(out, in, chunk_bytes);
    return Status::OK();
  }
  if (total == 0) return Status::OK();  // same counts on every rank: a consistent skip

  std::vector<int64_t> send_bytes(size_), recv_bytes(size_, chunk_bytes);
  for (int j = 0; j < size_; ++j) send_bytes[j] = recv_counts[j] * width;
  if (scratch_.size() < static_cast<size_t>(size_ * chunk_bytes)) {
    scratch_.resize(size_ * chunk_bytes);
  }
  DADT_RETURN_IF_ERROR(Finish(DADT_GLOO_STATUS("reducescatter", {
    internal::PeerWatchdog::Scope watch(watchdog_.get());
    ::gloo::AlltoallvOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    opts.setInput(NonNull(in), send_bytes);
    opts.setOutput(NonNull(scratch_.data()), recv_bytes);
    ::gloo::alltoallv(opts);
  })));

  if (mine == 0) return Status::OK();
  const char* copies = scratch_.data();
  ReduceBinary(out, copies, copies + chunk_bytes, mine, dtype, op);
  for (int j = 2; j < size_; ++j) ReduceBinary(out, out, copies + j * chunk_bytes, mine, dtype, op);
  return Status::OK();
}

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
