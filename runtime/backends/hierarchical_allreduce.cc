#include "runtime/backends/hierarchical_allreduce.h"

namespace dadt {
namespace backends {

HierarchicalAllreduce::HierarchicalAllreduce(std::unique_ptr<Backend> flat,
                                             std::unique_ptr<Backend> local,
                                             std::unique_ptr<Backend> cross, int local_rank,
                                             int local_size)
    : flat_(std::move(flat)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      local_rank_(local_rank),
      local_size_(local_size) {}

Status HierarchicalAllreduce::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  if (count < 0) return InvalidArgument("negative element count " + std::to_string(count));
  if (count < local_size_) return flat_->Allreduce(buf, count, dtype, op);  // nothing to shard
  const int64_t width = static_cast<int64_t>(DataTypeSize(dtype));
  // Even split; the first count % n shards get one element more.
  std::vector<int64_t> counts(local_size_, count / local_size_), bytes(local_size_);
  for (int64_t i = 0; i < count % local_size_; ++i) ++counts[i];
  for (int i = 0; i < local_size_; ++i) bytes[i] = counts[i] * width;
  const int64_t mine = counts[local_rank_];
  if (shard_.size() < static_cast<size_t>(mine * width)) shard_.resize(mine * width);
  DADT_RETURN_IF_ERROR(local_->Reducescatter(buf, shard_.data(), counts, dtype, op));
  DADT_RETURN_IF_ERROR(cross_->Allreduce(shard_.data(), mine, dtype, op));
  return local_->Allgatherv(shard_.data(), buf, bytes);
}

}  // namespace backends
}  // namespace dadt
