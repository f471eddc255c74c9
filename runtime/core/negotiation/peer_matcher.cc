#include "runtime/core/negotiation/peer_matcher.h"

#include <algorithm>

#include "runtime/core/negotiation/validation.h"

namespace dadt {
namespace core {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The one rank an explicit request names, or -1 when it names several (or none).
int64_t OnlyPartner(const Request& r) {
  std::vector<int64_t> all = r.send_ranks;
  all.insert(all.end(), r.recv_ranks.begin(), r.recv_ranks.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all.size() == 1 ? all[0] : -1;
}

// "sends 'x' to rank 1", "receives 'x' from rank 2", "exchanges 'x' with ranks [1, 3]".
std::string Describe(const Request& r) {
  const std::string q = "'" + r.name + "'";
  auto ranks = [](const std::vector<int64_t>& v) {
    return v.size() == 1 ? "rank " + std::to_string(v[0]) : "ranks " + RankListString(v);
  };
  if (r.recv_ranks.empty()) return "sends " + q + " to " + ranks(r.send_ranks);
  if (r.send_ranks.empty()) return "receives " + q + " from " + ranks(r.recv_ranks);
  if (r.send_ranks == r.recv_ranks) return "exchanges " + q + " with " + ranks(r.send_ranks);
  return "sends " + q + " to " + ranks(r.send_ranks) + " and receives it from " +
         ranks(r.recv_ranks);
}

}  // namespace

void PeerMatcher::Release(const std::string& name, std::vector<int64_t> ranks, std::string error) {
  Response resp;
  resp.type = Response::Type::kPeerExchange;
  resp.names = {name};
  resp.sizes = std::move(ranks);
  resp.error = std::move(error);
  released_.push_back(std::move(resp));
}

void PeerMatcher::Refuse(const Request& request, const std::string& why) {
  Release(request.name, {request.rank},
          "peer_exchange of tensor '" + request.name + "' from rank " +
              std::to_string(request.rank) + " cannot be negotiated: " + why);
}

bool PeerMatcher::Matches(const Request& a, const Request& b) {
  const bool a_to_b = Contains(a.send_ranks, b.rank) && Contains(b.recv_ranks, a.rank);
  const bool b_to_a = Contains(b.send_ranks, a.rank) && Contains(a.recv_ranks, b.rank);
  return (a_to_b || b_to_a) && a_to_b == !a.send_ranks.empty() &&
         a_to_b == !b.recv_ranks.empty() && b_to_a == !b.send_ranks.empty() &&
         b_to_a == !a.recv_ranks.empty();
}

std::string PeerMatcher::Disagreement(const Request& a, const Request& b) {
  auto both = [&](const std::string& va, const std::string& vb) {
    return "rank " + std::to_string(a.rank) + ": " + va + "; rank " + std::to_string(b.rank) +
           ": " + vb;
  };
  const std::string q = "'" + a.name + "'";
  if (a.dtype != b.dtype) {
    return "Mismatched peer_exchange data types for tensor " + q + ": " +
           both(DataTypeName(a.dtype), DataTypeName(b.dtype));
  }
  if (a.shape != b.shape) {
    return "Mismatched peer_exchange tensor shapes for tensor " + q + ": " +
           both(ShapeString(a.shape), ShapeString(b.shape));
  }
  if ((a.device >= 0) != (b.device >= 0) || (a.device < 0 && a.device != b.device)) {
    return "Mismatched peer_exchange devices for tensor " + q +
           " (CPU and GPU tensors cannot be mixed)";
  }
  return "";
}

std::string PeerMatcher::Conflict(const Request& a, const Request& b) {
  if (OnlyPartner(a) != b.rank || OnlyPartner(b) < 0 || Matches(a, b)) return "";
  return "ranks disagree on peer_exchange '" + a.name + "': rank " + std::to_string(a.rank) + " " +
         Describe(a) + ", but rank " + std::to_string(b.rank) + " " + Describe(b);
}

void PeerMatcher::Add(const Request& request, Clock::time_point now) {
  const int64_t me = request.rank;
  if (request.process_set_id != 0) {
    return Refuse(request, "point-to-point runs in the global process set only");
  }
  if (request.withdraw) {
    const size_t n = request.name.size(), k = sizeof(kWithdrawSuffix) - 1;
    const std::string target = n > k ? request.name.substr(0, n - k) : "";
    auto it = waiting_.find(target);
    if (it != waiting_.end()) {
      auto& queue = it->second;
      auto mine = std::find_if(queue.begin(), queue.end(),
                               [&](const Waiting& w) { return w.request.rank == me; });
      if (mine != queue.end()) {
        queue.erase(mine);
        if (queue.empty()) waiting_.erase(it);
        Release(target, {me});  // completes alone: no partner
      }
    }
    Release(request.name, {me});
    return;
  }
  if (request.send_ranks.empty() && request.recv_ranks.empty()) {
    return Refuse(request, "it names no rank to send to or receive from");
  }
  for (const auto* list : {&request.send_ranks, &request.recv_ranks}) {
    for (int64_t r : *list) {
      if (r == me) return Refuse(request, "a rank cannot exchange with itself");
      if (r < 0 || r >= size_) {
        return Refuse(request, "rank " + std::to_string(r) + " is not a rank of this job of " +
                                   std::to_string(size_));
      }
    }
  }
  auto& queue = waiting_[request.name];
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const Request& other = it->request;
    if (other.rank == me) {  // the runtime's queue keeps names unique; a second is a bug
      queue.erase(it);
      Release(request.name, {me}, "rank " + std::to_string(me) + " submitted peer_exchange '" +
                                      request.name + "' twice");
      if (queue.empty()) waiting_.erase(request.name);
      return;
    }
    std::string error;
    if (Matches(request, other)) {
      error = Disagreement(other, request);
    } else {
      error = Conflict(request, other);
      if (error.empty()) error = Conflict(other, request);
      if (error.empty()) continue;
    }
    Release(request.name, {other.rank, me}, std::move(error));
    queue.erase(it);
    if (queue.empty()) waiting_.erase(request.name);
    return;
  }
  queue.push_back(Waiting{request, now});
}

std::vector<Response> PeerMatcher::Take(int32_t* sequence) {
  std::vector<Response> out;
  out.swap(released_);
  for (Response& r : out) r.root = (*sequence)++ & 0x3fffffff;
  return out;
}

size_t PeerMatcher::waiting() const {
  size_t n = 0;
  for (const auto& kv : waiting_) n += kv.second.size();
  return n;
}

void PeerMatcher::AppendWaiting(std::vector<PendingTensor>* out) const {
  for (const auto& kv : waiting_) {
    for (const Waiting& w : kv.second) {
      const int64_t partner = OnlyPartner(w.request);
      if (partner < 0) continue;
      out->push_back(PendingTensor{kv.first, OpTypeName(OpType::kPeerExchange), w.since,
                                   {static_cast<int>(w.request.rank)},
                                   {static_cast<int>(partner)}});
    }
  }
}

}  // namespace core
}  // namespace dadt
