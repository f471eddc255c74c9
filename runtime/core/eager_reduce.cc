#include "runtime/core/eager_reduce.h"

#include <string>

#include "runtime/common/reduce.h"

namespace dadt {
namespace core {

bool TryEagerReduce(const std::vector<Request>& by_rank, int size, Response* resp) {
  const Request* first = nullptr;
  for (const Request& r : by_rank) {
    if (r.rank < 0) return false;  // someone joined: zeros come through the data plane
    if (!r.eager) return false;
    if (!first) first = &r;
  }
  if (!first) return false;
  const int64_t count = NumElements(first->shape);
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(first->dtype);
  for (const Request& r : by_rank) {
    if (r.data.size() != bytes) return false;
  }
  const ReduceOp op = first->reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : first->reduce_op;
  std::string result = first->data;
  std::string scaled;
  if (first->prescale != 1.0 && !ScaleBuffer(result.data(), count, first->dtype, first->prescale).ok()) {
    return false;
  }
  for (size_t i = 1; i < by_rank.size(); ++i) {
    const std::string* in = &by_rank[i].data;
    if (first->prescale != 1.0) {
      scaled = *in;
      if (!ScaleBuffer(scaled.data(), count, first->dtype, first->prescale).ok()) return false;
      in = &scaled;
    }
    ReduceBinary(result.data(), result.data(), in->data(), count, first->dtype, op);
  }
  if (first->postscale != 1.0 &&
      !ScaleBuffer(result.data(), count, first->dtype, first->postscale).ok()) {
    return false;
  }
  if (first->reduce_op == ReduceOp::kAverage && size > 1 &&
      !DivideBuffer(result.data(), count, first->dtype, size).ok()) {
    return false;
  }
  resp->eager = true;
  resp->data = std::move(result);
  return true;
}

bool AttachEagerInput(Request* request, const void* input, int64_t threshold_bytes) {
  const int64_t bytes = request->ByteSize();
  if (request->op != OpType::kAllreduce || request->reduce_op == ReduceOp::kAdasum ||
      request->device != kCpuDevice || bytes <= 0 || bytes > threshold_bytes) {
    return false;
  }
  request->eager = true;
  request->data.assign(static_cast<const char*>(input), static_cast<size_t>(bytes));
  return true;
}

}  // namespace core
}  // namespace dadt
