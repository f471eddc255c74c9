// HierarchicalAllreduce: a Backend whose Allreduce runs in three steps over the job's hosts, and
// whose other collectives are the flat backend's.
//
// Algorithm (n ranks per host, h hosts, `count` elements):
//   1. reduce-scatter inside the host: local rank i gets shard i (an even split of `count`),
//      reduced over the host's n ranks;
//   2. allreduce of each shard across hosts, among the ranks with the same local rank (h ranks);
//   3. all-gather inside the host puts the n reduced shards back together on every rank.
// Trade-off: the slow inter-host links carry 2(h-1)/h of one shard (1/n of the buffer) per rank
// instead of 2(hn-1)/(hn) of the whole buffer through the ring, at the cost of two more latency
// phases; worth it when the network between hosts is much slower than memory inside one.
// Integer results equal the flat allreduce exactly; floating-point sums may differ in the last
// bits because the additions happen in another order.
//
// Requires every host to have the same number of ranks (size == local_size * cross_size); the
// runtime uses the flat backend otherwise. Threading and lifetime as for any Backend.
//
//   auto b = std::make_unique<HierarchicalAllreduce>(std::move(flat), std::move(local),
//                                                    std::move(cross), local_rank);
#pragma once

#include <memory>
#include <vector>

#include "runtime/backends/backend.h"

namespace dadt {
namespace backends {

class HierarchicalAllreduce final : public Backend {
 public:
  // `local`: this host's ranks (rank = local rank); `cross`: the ranks with this local rank on
  // every host (rank = cross rank).
  HierarchicalAllreduce(std::unique_ptr<Backend> flat, std::unique_ptr<Backend> local,
                        std::unique_ptr<Backend> cross, int local_rank, int local_size);

  const char* Name() const override { return flat_->Name(); }
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override {
    return flat_->Allgatherv(in, out, bytes_per_rank);
  }
  Status Broadcast(void* buf, int64_t bytes, int root) override {
    return flat_->Broadcast(buf, bytes, root);
  }
  Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override {
    return flat_->Alltoallv(in, send_bytes, out, recv_bytes);
  }
  Status Reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override {
    return flat_->Reducescatter(in, out, recv_counts, dtype, op);
  }
  Status Barrier() override { return flat_->Barrier(); }
  Status Exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                  uint32_t sequence) override {
    return flat_->Exchange(sends, recvs, sequence);
  }

 private:
  std::unique_ptr<Backend> flat_;
  std::unique_ptr<Backend> local_;
  std::unique_ptr<Backend> cross_;
  const int local_rank_;
  const int local_size_;
  std::vector<char> shard_;  // this rank's shard between the steps, reused between calls
};

}  // namespace backends
}  // namespace dadt
