#include "runtime/core/entry_checks.h"

#include <string>

#include "runtime/core/executor.h"
#include "runtime/core/op_layout.h"

namespace dadt {
namespace core {

Status PrepareEntry(TensorEntry* entry, int rank, int size) {
  entry->request.rank = rank;
  if (entry->request.op == OpType::kJoin) entry->request.name = kJoinName;
  if (entry->request.op == OpType::kAlltoall && entry->request.splits.empty() &&
      !entry->request.shape.empty()) {
    const int64_t d0 = entry->request.shape[0];
    if (d0 % size != 0) {
      return InvalidArgument("alltoall of tensor '" + entry->request.name + "': first dimension " +
                             std::to_string(d0) + " is not divisible by " +
                             std::to_string(size) + " ranks; pass splits");
    }
    entry->request.splits.assign(size, d0 / size);
  }
  return ValidateEntry(*entry, rank, size);
}

Status ValidateEntry(const TensorEntry& e, int rank, int size) {
  const Request& r = e.request;
  const std::string quoted = "'" + r.name + "'";
  if (r.name.empty()) return InvalidArgument("a collective needs a non-empty name");
  if (!IsValidDataType(static_cast<int32_t>(r.dtype))) {
    return InvalidArgument("tensor " + quoted + " has an unsupported data type");
  }
  const bool reduces = r.op == OpType::kAllreduce || r.op == OpType::kReducescatter;
  if (reduces) {
    if (!IsValidReduceOp(static_cast<int32_t>(r.reduce_op))) {
      return InvalidArgument("tensor " + quoted + ": unknown reduce op");
    }
    if (r.reduce_op == ReduceOp::kAdasum) {
      return Unimplemented("tensor " + quoted + ": the Adasum reduction is not implemented");
    }
    if (r.dtype == DataType::kBool &&
        (r.reduce_op == ReduceOp::kAverage || r.prescale != 1.0 || r.postscale != 1.0)) {
      return InvalidArgument("tensor " + quoted +
                             " is bool: Average and scale factors are not defined for bool; use "
                             "Sum or Max (logical or) or Min or Product (logical and)");
    }
  }
  if ((r.op == OpType::kAllreduce || r.op == OpType::kBroadcast) && e.output == nullptr &&
      NumElements(r.shape) > 0) {
    return InvalidArgument("tensor " + quoted + ": an output buffer is required");
  }
  if (r.op == OpType::kReducescatter && e.output != nullptr) {
    // This rank's share of the first dimension (lower ranks get the remainder), known already.
    const int64_t rows = ScatterRows(r.shape.empty() ? 1 : r.shape[0], size, rank);
    const int64_t bytes = RowElements(r.shape) * rows * static_cast<int64_t>(DataTypeSize(r.dtype));
    if (e.output_bytes != bytes) {
      return InvalidArgument("tensor " + quoted + ": the reducescatter output holds " +
                             std::to_string(e.output_bytes) + " bytes; rank " +
                             std::to_string(rank) + "'s share needs " + std::to_string(rows) +
                             " rows (" + std::to_string(bytes) + " bytes)");
    }
  }
  if (r.op != OpType::kBarrier && r.op != OpType::kJoin && e.input == nullptr &&
      NumElements(r.shape) > 0) {
    return InvalidArgument("tensor " + quoted + ": an input buffer is required");
  }
  if (r.op == OpType::kBroadcast && (r.root < 0 || r.root >= size)) {
    return InvalidArgument("broadcast of tensor " + quoted + ": root rank " +
                           std::to_string(r.root) + " is not in [0, " +
                           std::to_string(size) + ")");
  }
  if ((r.op == OpType::kAlltoall || r.op == OpType::kReducescatter) && r.shape.empty()) {
    return InvalidArgument(std::string(OpTypeName(r.op)) + " of tensor " + quoted +
                           " needs at least one dimension");
  }
  if (r.op == OpType::kAlltoall) {
    int64_t sum = 0;
    for (int64_t s : r.splits) {
      if (s < 0) return InvalidArgument("alltoall of tensor " + quoted + ": negative split");
      sum += s;
    }
    if (static_cast<int>(r.splits.size()) != size || sum != r.shape[0]) {
      return InvalidArgument("alltoall of tensor " + quoted + ": splits must have " +
                             std::to_string(size) + " entries summing to the first "
                             "dimension " + std::to_string(r.shape[0]));
    }
  }
  if (r.group_id >= 0 && r.group_size < 1) {
    return InvalidArgument("tensor " + quoted + ": grouped collective with group size < 1");
  }
  return Status::OK();
}

}  // namespace core
}  // namespace dadt
