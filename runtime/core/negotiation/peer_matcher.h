// PeerMatcher: the coordinator's half of point-to-point (OpType::kPeerExchange). Unlike every
// other operation, a peer exchange is not ready when all ranks have submitted it: it is ready when
// two ranks that name each other have, so only the pair waits for the pair, and a slow rank holds
// up no one who does not name it alone.
//
// Each request names the ranks this rank may send to (send_ranks) and receive from (recv_ranks):
//   send(t, dst)           send_ranks = {dst}            recv_ranks = {}
//   recv(t, src)           send_ranks = {}               recv_ranks = {src}
//   swap with any of P     send_ranks = P                recv_ranks = P   (gossip)
// Requests a and b of the same name match when each direction either request wants is one the
// other accepts, and nothing more: a sends to b exactly when b is in a's send_ranks and a in b's
// recv_ranks, and that must be what a wants (a non-empty send list) and what b wants (a non-empty
// receive list); the same for b to a. A new request is matched with the earliest-arrived pending
// request it matches (the one that has waited longest), else it waits.
//
// Errors go to the two ranks only (Response::Type::kPeerExchange with `error`), never a hang:
//  - matched requests whose dtype, shape or device kind differ;
//  - two explicit requests (one candidate each) of the same name that name each other's partner
//    wrongly (0 sends 'x' to 1, 1 receives 'x' from 2; or both send): neither can ever match;
//  - a request outside the global process set, naming itself, a non-rank, or no rank at all
//    (this one to its rank alone).
// A rank withdraws its pending exchange with a request named like it plus kWithdrawSuffix
// (Request::withdraw): the pending one, if still unmatched, completes alone (untouched output),
// and so does the withdraw request; if it was matched already, only the withdraw completes.
// An explicit request waiting for its partner is a stall like any other (AppendWaiting); a
// candidate list of several ranks may wait as long as its partners are busy, by design.
// Not thread-safe: owned by the Coordinator.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/negotiation/message.h"
#include "runtime/core/stall_inspector.h"

namespace dadt {
namespace core {

// DADT_WITHDRAW_SUFFIX of the C API: a withdrawal's name is the exchange's name followed by it.
inline constexpr const char kWithdrawSuffix[] = ".__withdraw__";

class PeerMatcher {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PeerMatcher(int size) : size_(size) {}

  // Takes one kPeerExchange request; what it decides is released by Take.
  void Add(const Request& request, Clock::time_point now);
  // The responses decided since the last call, in the order they were decided. Each carries the
  // next point-to-point sequence number in `root` (from `*sequence`, which it advances).
  std::vector<Response> Take(int32_t* sequence);
  bool HasReleasable() const { return !released_.empty(); }
  size_t waiting() const;
  // Explicit requests (one candidate) still waiting for their partner, for the stall inspector.
  void AppendWaiting(std::vector<PendingTensor>* out) const;

 private:
  struct Waiting {
    Request request;
    Clock::time_point since;
  };

  void Release(const std::string& name, std::vector<int64_t> ranks, std::string error = "");
  void Refuse(const Request& request, const std::string& why);
  static bool Matches(const Request& a, const Request& b);
  // The error for two matched requests whose tensors differ; empty when they agree.
  static std::string Disagreement(const Request& a, const Request& b);
  // Why explicit requests a and b can never match each other; empty when they might.
  static std::string Conflict(const Request& a, const Request& b);

  int size_;
  std::map<std::string, std::vector<Waiting>> waiting_;  // by name, in arrival order
  std::vector<Response> released_;
};

}  // namespace core
}  // namespace dadt
