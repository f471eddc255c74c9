// Entry checks: what Runtime::Enqueue does to a collective on the calling (framework) thread
// before it is queued -- fill in what the request leaves implicit, then refuse what can never
// run, with a message naming the tensor. The one place that validates a collective's inputs and
// outputs: the C API only converts DLPack views (dtype, layout, device kind) into a TensorEntry;
// what can be known only after negotiation (an allgather's first dimension) is the executor's. Refusing here means a bad call fails at once, on this
// rank, instead of becoming a mismatch error for every rank.
//
//   TensorEntry e;  e.request.op = OpType::kAlltoall;  ...
//   Status s = PrepareEntry(&e, /*rank=*/1, /*size=*/4);   // even splits filled in, then checked
#pragma once

#include <string>

#include "runtime/common/status.h"
#include "runtime/core/process_sets.h"
#include "runtime/core/tensor_queue.h"

namespace dadt {
namespace core {

// Sets request.rank, the reserved name of join(), and even alltoall splits when none were given
// (refused when the first dimension does not divide by `size`); checks the caller's output against
// the input and sizes output_bytes (CheckOutputView); then ValidateEntry, and CheckDeviceReduction
// with the job's device data plane ("nccl", or empty when GPU tensors are staged).
Status PrepareEntry(TensorEntry* entry, int rank, int size,
                    const std::string& device_data_plane = "");

// PrepareEntry for a collective of process set `set` (not the global one) on global rank
// `global_rank`: InvalidArgument when this rank is not a member, for join() (global set only), for
// a broadcast root (a global rank) that is not a member, and for a tensor on the GPU data plane
// (process sets run on the host data plane); then PrepareEntry with the set rank and size (even
// alltoall splits and their count, reducescatter rows, are the set's). request.rank and root stay
// global.
Status PrepareEntryInSet(TensorEntry* entry, int global_rank, const ProcessSet& set);

// The output tensor the caller gave (entry->output_view): on the input's device; for allgather and
// reducescatter in host memory with the input's dtype and every dimension but the first (the first
// is negotiated: the executor checks it against output_bytes, set here); otherwise the input's
// dtype and shape.
Status CheckOutputView(TensorEntry* entry);

// A GPU reduction the device data plane cannot run (NCCL: int16/uint16) is refused at once, on
// every rank alike, naming the tensor, instead of failing the job when it runs.
Status CheckDeviceReduction(const TensorEntry& entry, const std::string& device_data_plane);

// InvalidArgument when the entry cannot run in a job of `size` ranks: name, dtype, reduce op
// (Adasum: an allreduce of floating-point tensors), buffers, root, splits, group size;
// ValidatePointToPoint for a peer exchange or neighbor allgather.
Status ValidateEntry(const TensorEntry& entry, int rank, int size);

// A peer exchange or neighbor allgather: the global set, host memory, ranks in the job other than
// this one, and buffers for what it receives (a neighbor allgather's output holds every received
// tensor; a rank that sends and receives has an output apart from its input).
Status ValidatePointToPoint(const TensorEntry& entry, int size);

}  // namespace core
}  // namespace dadt
