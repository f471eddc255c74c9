// Entry checks: what Runtime::Enqueue does to a collective on the calling (framework) thread
// before it is queued -- fill in what the request leaves implicit, then refuse what can never
// run, with a message naming the tensor. Refusing here means a bad call fails at once, on this
// rank, instead of becoming a mismatch error for every rank.
//
//   TensorEntry e;  e.request.op = OpType::kAlltoall;  ...
//   Status s = PrepareEntry(&e, /*rank=*/1, /*size=*/4);   // even splits filled in, then checked
#pragma once

#include "runtime/common/status.h"
#include "runtime/core/tensor_queue.h"

namespace dadt {
namespace core {

// Sets request.rank, the reserved name of join(), and even alltoall splits when none were given
// (refused when the first dimension does not divide by `size`); then ValidateEntry.
Status PrepareEntry(TensorEntry* entry, int rank, int size);

// InvalidArgument (or Unimplemented for Adasum) when the entry cannot run in a job of `size`
// ranks: name, dtype, reduce op, buffers, root, splits, group size.
Status ValidateEntry(const TensorEntry& entry, int rank, int size);

}  // namespace core
}  // namespace dadt
