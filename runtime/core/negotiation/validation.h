// Validation: whether the requests the members of a process set submitted for one tensor agree,
// and the error every member gets when they do not. Split out of the Coordinator (coordinator.h),
// which calls it once a tensor is ready; pure functions, no state.
//
//   std::string error = ValidateRequests(/*set_id=*/0, "w", by_rank, /*joined=*/{});
//   if (!error.empty()) ...   // "Mismatched allreduce data types for tensor 'w': rank 0: ..."
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/negotiation/message.h"

namespace dadt {
namespace core {

// How errors name a tensor: "'w'", or "'w' in process set 2" outside the global set.
std::string QuotedTensor(int32_t set_id, const std::string& name);

// "[0, 2, 3]".
std::string RankListString(const std::vector<int64_t>& ranks);

// Empty when the submitted requests of `by_rank` (indexed by set rank; rank -1: not submitted)
// agree on op, dtype, device kind, shape (all dimensions, or all but the first for allgather and
// alltoall), reduce op, scale factors, broadcast root, and for process-set adds and removes on the
// ranks or the id; otherwise the error naming the tensor, what differed and which ranks hold each
// value; for a neighbor allgather, that every rank's send and receive lists name members that
// name it back. `joined`: the global ranks that called join() (global set only): then only allreduce and
// barrier can run.
std::string ValidateRequests(int32_t set_id, const std::string& name,
                             const std::vector<Request>& by_rank, const std::vector<int>& joined);

}  // namespace core
}  // namespace dadt
