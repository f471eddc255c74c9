#include "runtime/core/negotiation/validation.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace dadt {
namespace core {
namespace {

// "rank 0: [2, 3]; ranks 1, 2: [3]" — each distinct value once, with the ranks that hold it.
template <typename F>
std::string DescribeByRank(const std::vector<Request>& by_rank, F value_of) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const Request& r : by_rank) {
    if (r.rank < 0) continue;
    std::string v = value_of(r);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {r.rank}});
    } else {
      it->second.push_back(r.rank);
    }
  }
  std::ostringstream os;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) os << "; ";
    os << (groups[i].second.size() == 1 ? "rank " : "ranks ");
    for (size_t j = 0; j < groups[i].second.size(); ++j) os << (j ? ", " : "") << groups[i].second[j];
    os << ": " << groups[i].first;
  }
  return os.str();
}

std::string DeviceString(int32_t d) {
  if (d == kCpuDevice) return "CPU";
  if (d == kStagedGpuDevice) return "GPU (staged through host memory)";
  return "GPU " + std::to_string(d);
}

// What ranks must agree on: host, GPU on the GPU data plane, or GPU staged through the host.
int32_t DeviceKind(int32_t d) { return d >= 0 ? 0 : d; }

std::string ScaleString(const Request& r) {
  std::ostringstream os;
  os << "prescale " << r.prescale << ", postscale " << r.postscale;
  return os.str();
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A neighbor allgather's graph: every rank in a send list is a member that lists the sender among
// the ranks it receives from, and the other way round; no rank names itself or another twice.
std::string ValidateGraph(const std::string& quoted, const std::vector<Request>& by_rank) {
  auto find = [&](int64_t rank) -> const Request* {
    for (const Request& r : by_rank) {
      if (r.rank == rank) return &r;
    }
    return nullptr;
  };
  for (const Request& r : by_rank) {
    if (r.rank < 0) continue;
    for (const auto* list : {&r.send_ranks, &r.recv_ranks}) {
      const char* what = list == &r.send_ranks ? "sends to" : "receives from";
      for (size_t i = 0; i < list->size(); ++i) {
        const int64_t peer = (*list)[i];
        if (peer == r.rank || find(peer) == nullptr ||
            std::find(list->begin(), list->begin() + i, peer) != list->begin() + i) {
          return "neighbor_allgather of tensor " + quoted + ": rank " + std::to_string(r.rank) +
                 " " + what + " " + RankListString(*list) + ", and rank " + std::to_string(peer) +
                 (peer == r.rank ? " is itself"
                                 : find(peer) == nullptr ? " is not a member" : " twice");
        }
      }
    }
    for (int64_t to : r.send_ranks) {
      if (!Contains(find(to)->recv_ranks, r.rank)) {
        return "ranks disagree on the graph of neighbor_allgather " + quoted + ": rank " +
               std::to_string(r.rank) + " sends to rank " + std::to_string(to) + ", but rank " +
               std::to_string(to) + " receives from " + RankListString(find(to)->recv_ranks);
      }
    }
    for (int64_t from : r.recv_ranks) {
      if (!Contains(find(from)->send_ranks, r.rank)) {
        return "ranks disagree on the graph of neighbor_allgather " + quoted + ": rank " +
               std::to_string(r.rank) + " receives from rank " + std::to_string(from) +
               ", but rank " + std::to_string(from) + " sends to " +
               RankListString(find(from)->send_ranks);
      }
    }
  }
  return "";
}

}  // namespace

std::string QuotedTensor(int32_t set_id, const std::string& name) {
  std::string q = "'" + name + "'";
  if (set_id != 0) q += " in process set " + std::to_string(set_id);
  return q;
}

std::string RankListString(const std::vector<int64_t>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

std::string ValidateRequests(int32_t set_id, const std::string& name,
                             const std::vector<Request>& by_rank, const std::vector<int>& joined) {
  const Request* first = nullptr;
  for (const Request& r : by_rank) {
    if (r.rank >= 0) {
      first = &r;
      break;
    }
  }
  if (first == nullptr) return "";
  auto differs = [&](auto field) {
    for (const Request& r : by_rank) {
      if (r.rank >= 0 && !(field(r) == field(*first))) return true;
    }
    return false;
  };
  const std::string quoted = QuotedTensor(set_id, name);
  if (differs([](const Request& r) { return r.op; })) {
    return "Mismatched collective operations for tensor " + quoted + ": " +
           DescribeByRank(by_rank, [](const Request& r) { return std::string(OpTypeName(r.op)); });
  }
  const std::string op = OpTypeName(first->op);
  // Checked first: with a rank joined, such a tensor is released before every rank submitted it.
  if (set_id == 0 && first->op != OpType::kAllreduce && first->op != OpType::kBarrier &&
      !joined.empty()) {
    std::string who;
    for (int r : joined) who += (who.empty() ? "" : ", ") + std::to_string(r);
    return op + " of tensor " + quoted + " cannot run while rank(s) " + who +
           " have called join(); only allreduce and barrier can";
  }
  if (first->op == OpType::kProcessSetAdd) {
    if (differs([](const Request& r) { return r.splits; })) {
      return "ranks disagree on add_process_set (call " + quoted + "): " +
             DescribeByRank(by_rank, [](const Request& r) { return RankListString(r.splits); });
    }
    return "";
  }
  if (first->op == OpType::kProcessSetRemove) {
    if (differs([](const Request& r) { return r.root; })) {
      return "ranks disagree on remove_process_set (call " + quoted + "): " +
             DescribeByRank(by_rank, [](const Request& r) {
               return "process set " + std::to_string(r.root);
             });
    }
    return "";
  }
  if (differs([](const Request& r) { return r.dtype; })) {
    return "Mismatched " + op + " data types for tensor " + quoted + ": " +
           DescribeByRank(by_rank,
                          [](const Request& r) { return std::string(DataTypeName(r.dtype)); });
  }
  // Device kinds must agree; ordinals may differ (each rank drives its own GPU).
  if (differs([](const Request& r) { return DeviceKind(r.device); })) {
    return "Mismatched " + op + " devices for tensor " + quoted +
           " (CPU and GPU tensors cannot be mixed): " +
           DescribeByRank(by_rank, [](const Request& r) { return DeviceString(r.device); });
  }
  const bool same_shape = first->op == OpType::kAllreduce || first->op == OpType::kBroadcast ||
                          first->op == OpType::kReducescatter ||
                          first->op == OpType::kNeighborAllgather;
  if (same_shape && differs([](const Request& r) { return r.shape; })) {
    return "Mismatched " + op + " tensor shapes for tensor " + quoted + ": " +
           DescribeByRank(by_rank, [](const Request& r) { return ShapeString(r.shape); });
  }
  if (!same_shape && differs([](const Request& r) {
        return r.shape.empty() ? Shape{} : Shape(r.shape.begin() + 1, r.shape.end());
      })) {
    return "Mismatched " + op + " tensor shapes for tensor " + quoted +
           " (all dimensions but the first must agree): " +
           DescribeByRank(by_rank, [](const Request& r) { return ShapeString(r.shape); });
  }
  if ((first->op == OpType::kAllreduce || first->op == OpType::kReducescatter) &&
      differs([](const Request& r) { return r.reduce_op; })) {
    return "Mismatched " + op + " reduce operations for tensor " + quoted + ": " +
           DescribeByRank(by_rank,
                          [](const Request& r) { return std::string(ReduceOpName(r.reduce_op)); });
  }
  if (differs([](const Request& r) { return std::make_pair(r.prescale, r.postscale); })) {
    return "Mismatched " + op + " scale factors for tensor " + quoted + ": " +
           DescribeByRank(by_rank, ScaleString);
  }
  if (first->op == OpType::kNeighborAllgather) return ValidateGraph(quoted, by_rank);
  if (first->op == OpType::kBroadcast && differs([](const Request& r) { return r.root; })) {
    return "Mismatched broadcast root ranks for tensor " + quoted + ": " +
           DescribeByRank(by_rank, [](const Request& r) { return "root " + std::to_string(r.root); });
  }
  return "";
}

}  // namespace core
}  // namespace dadt
