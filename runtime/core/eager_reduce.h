// Eager allreduce: small tensors ride the negotiation round trip instead of a second collective.
//
// Algorithm: when a tensor is at most DADT_EAGER_THRESHOLD bytes, each rank sends its input bytes
// with its request. Once every rank has submitted, the coordinator checks the usual agreement
// (dtype, shape, op, ...), reduces the contributions itself in rank order (prescale each,
// combine, then postscale and Average's division, exactly as the data plane would), and puts the
// result in the response. Every rank copies it into its output.
// Trade-offs: latency drops from "negotiate, then run a collective" to one message each way,
// which is what a lone small allreduce is dominated by. The coordinator receives (N-1) payloads
// and sends N-1 results, so the path only pays for small tensors; above the threshold the ring
// collective's bandwidth wins. Results are deterministic (fixed rank order) and identical on
// every rank, as with the collective. Not used while some rank has joined (join() contributes
// zeros through the data plane).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/negotiation/message.h"

namespace dadt {
namespace core {

// Fills resp->data with the finished result and returns true when every submitted request in
// `by_rank` (entries with rank < 0 did not submit) carries a payload of the right size; false
// otherwise (the caller then uses the data plane).
bool TryEagerReduce(const std::vector<Request>& by_rank, int size, Response* resp);

// The sending side, on every rank: makes `request` eager, carrying a copy of its `input` bytes,
// when it is an allreduce of host memory with 1 to `threshold_bytes` bytes (GPU tensors always
// take the data plane). Returns whether it did.
bool AttachEagerInput(Request* request, const void* input, int64_t threshold_bytes);

}  // namespace core
}  // namespace dadt
