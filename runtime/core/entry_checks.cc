#include "runtime/core/entry_checks.h"

#include <algorithm>
#include <string>

#include "runtime/backends/adasum.h"
#include "runtime/backends/device.h"

#include "runtime/core/executor.h"
#include "runtime/core/negotiation/peer_matcher.h"
#include "runtime/core/op_layout.h"

namespace dadt {
namespace core {

Status PrepareEntry(TensorEntry* entry, int rank, int size, const std::string& device_data_plane) {
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
  DADT_RETURN_IF_ERROR(CheckOutputView(entry));
  DADT_RETURN_IF_ERROR(ValidateEntry(*entry, rank, size));
  return CheckDeviceReduction(*entry, device_data_plane);
}

Status PrepareEntryInSet(TensorEntry* entry, int global_rank, const ProcessSet& set) {
  Request& r = entry->request;
  const std::string of = std::string(OpTypeName(r.op)) + " of tensor '" + r.name + "'";
  if (!set.included()) {
    return InvalidArgument(of + ": rank " + std::to_string(global_rank) +
                           " is not a member of " + set.Describe());
  }
  if (r.op == OpType::kJoin) {
    return InvalidArgument("join() runs on the global process set only, not on " + set.Describe());
  }
  if (r.device >= 0) {
    return Unimplemented(of + ": GPU tensors on the GPU data plane cannot run in " +
                         set.Describe() + " yet (process sets run on the host data plane)");
  }
  if (r.op == OpType::kAllreduce && r.reduce_op == ReduceOp::kAdasum) {
    return Unimplemented(of + ": Adasum runs on the global process set only, not on " +
                         set.Describe());
  }
  const int32_t root = r.root;
  if (r.op == OpType::kBroadcast) {
    const int set_root = set.SetRankOf(root);
    if (set_root < 0) {
      return InvalidArgument(of + ": root rank " + std::to_string(root) + " is not a member of " +
                             set.Describe());
    }
    r.root = set_root;
  }
  Status s = PrepareEntry(entry, set.set_rank, set.size());
  r.rank = global_rank;
  r.root = root;
  return s;
}

Status CheckOutputView(TensorEntry* entry) {
  const TensorEntry::OutputView& out = entry->output_view;
  if (!out.given) return Status::OK();
  const Request& r = entry->request;
  const std::string of = "output of '" + r.name + "'";
  if (out.against_input && out.device != (r.device >= 0 ? r.device : kCpuDevice)) {
    return InvalidArgument(of + " must be on the input's device");
  }
  if (r.op == OpType::kAllgather || r.op == OpType::kReducescatter ||
      r.op == OpType::kNeighborAllgather) {
    if (out.device != kCpuDevice) {
      return InvalidArgument(of + ": a preallocated " + OpTypeName(r.op) +
                             " output must be in host memory");
    }
    if (out.against_input &&
        (out.dtype != r.dtype || out.shape.size() != std::max<size_t>(r.shape.size(), 1) ||
         !std::equal(out.shape.begin() + 1, out.shape.end(),
                     r.shape.begin() + std::min<size_t>(r.shape.size(), 1)))) {
      return InvalidArgument(of + " must have the input's dtype and all dimensions but the first");
    }
    entry->output_bytes = NumElements(out.shape) * static_cast<int64_t>(DataTypeSize(out.dtype));
  } else if (out.against_input && (out.dtype != r.dtype || out.shape != r.shape)) {
    return InvalidArgument(of + " must match the input's dtype and shape");
  }
  return Status::OK();
}

Status CheckDeviceReduction(const TensorEntry& entry, const std::string& device_data_plane) {
  const Request& r = entry.request;
  if (r.device < 0 || device_data_plane != "nccl" ||
      (r.op != OpType::kAllreduce && r.op != OpType::kReducescatter)) {
    return Status::OK();
  }
  if (r.reduce_op == ReduceOp::kAdasum) {
    return InvalidArgument("tensor '" + r.name + "': Adasum runs on the host data plane; NCCL has "
                           "no Adasum (use all_reduce_executor='gloo' or 'mpi', which stage GPU "
                           "tensors through host memory)");
  }
  Status s = backends::DeviceRegistry::NcclReduces(r.dtype, r.reduce_op);
  if (!s.ok()) return InvalidArgument("tensor '" + r.name + "': " + s.message());
  return Status::OK();
}

Status ValidatePointToPoint(const TensorEntry& e, int size) {
  const Request& r = e.request;
  const std::string of = std::string(OpTypeName(r.op)) + " of tensor '" + r.name + "'";
  if (r.process_set_id != 0) {
    return InvalidArgument(of + ": point-to-point runs in the global process set only, not in "
                           "process set " + std::to_string(r.process_set_id));
  }
  if (r.device >= 0) {
    return Unimplemented(of + ": point-to-point moves host memory only (GPU tensors: stage them "
                         "through host memory)");
  }
  for (const auto* list : {&r.send_ranks, &r.recv_ranks}) {
    for (int64_t peer : *list) {
      if (peer < 0 || peer >= size || peer == r.rank) {
        return InvalidArgument(of + ": rank " + std::to_string(peer) +
                               (peer == r.rank ? " is this rank itself"
                                               : " is not in [0, " + std::to_string(size) + ")"));
      }
    }
  }
  const int64_t bytes = r.ByteSize();
  if (r.op == OpType::kNeighborAllgather) {
    const int64_t want = bytes * static_cast<int64_t>(r.recv_ranks.size());
    if ((want > 0 && e.output == nullptr) || e.output_bytes != want) {
      return InvalidArgument(of + ": the output must hold the " +
                             std::to_string(r.recv_ranks.size()) + " received tensors (" +
                             std::to_string(want) + " bytes), concatenated on the first dimension");
    }
    return Status::OK();
  }
  if (r.withdraw) return Status::OK();
  if (r.send_ranks.empty() && r.recv_ranks.empty()) {
    return InvalidArgument(of + ": name at least one rank to send to or receive from");
  }
  if (!r.recv_ranks.empty() && e.output == nullptr && bytes > 0) {
    return InvalidArgument(of + ": receiving needs an output buffer");
  }
  if (!r.recv_ranks.empty() && !r.send_ranks.empty() && e.output == e.input && bytes > 0) {
    return InvalidArgument(of + ": a rank that both sends and receives needs an output buffer "
                           "apart from its input");
  }
  return Status::OK();
}

Status ValidateEntry(const TensorEntry& e, int rank, int size) {
  const Request& r = e.request;
  const std::string quoted = "'" + r.name + "'";
  if (r.name.empty()) return InvalidArgument("a collective needs a non-empty name");
  if (r.op == OpType::kPeerExchange && r.withdraw) {
    const std::string suffix = kWithdrawSuffix;
    if (r.name.size() <= suffix.size() ||
        r.name.compare(r.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return InvalidArgument("withdrawal " + quoted + ": its name must be the exchange's name "
                             "followed by '" + suffix + "'");
    }
    return Status::OK();
  }
  if (!IsValidDataType(static_cast<int32_t>(r.dtype))) {
    return InvalidArgument("tensor " + quoted + " has an unsupported data type");
  }
  const bool reduces = r.op == OpType::kAllreduce || r.op == OpType::kReducescatter;
  if (reduces) {
    if (!IsValidReduceOp(static_cast<int32_t>(r.reduce_op))) {
      return InvalidArgument("tensor " + quoted + ": unknown reduce op");
    }
    if (r.reduce_op == ReduceOp::kAdasum && r.op != OpType::kAllreduce) {
      // Not implemented (NotImplementedError, a RuntimeError, as Horovod raises) rather than bad
      // input: the op is valid, reducescatter just has no Adasum.
      return Unimplemented("tensor " + quoted + ": Adasum is an allreduce; reducescatter takes "
                           "Sum, Average, Min, Max or Product");
    }
    if (r.reduce_op == ReduceOp::kAdasum && !backends::AdasumSupports(r.dtype)) {
      return InvalidArgument("tensor " + quoted + " is " + DataTypeName(r.dtype) +
                             ": Adasum needs float16, bfloat16, float32 or float64 tensors");
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
  const bool set_op = r.op == OpType::kProcessSetAdd || r.op == OpType::kProcessSetRemove;
  if (set_op && r.process_set_id != 0) {
    // What the set's ranks or id are worth is the coordinator's to say, on every rank alike.
    return InvalidArgument(std::string(OpTypeName(r.op)) + " '" + r.name +
                           "' runs on the global process set (id 0), not on process set " +
                           std::to_string(r.process_set_id));
  }
  if (r.op != OpType::kBarrier && r.op != OpType::kJoin && !set_op && e.input == nullptr &&
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
  if (r.op == OpType::kPeerExchange || r.op == OpType::kNeighborAllgather) {
    DADT_RETURN_IF_ERROR(ValidatePointToPoint(e, size));
  }
  if (r.group_id >= 0 && r.group_size < 1) {
    return InvalidArgument("tensor " + quoted + ": grouped collective with group size < 1");
  }
  return Status::OK();
}

}  // namespace core
}  // namespace dadt
