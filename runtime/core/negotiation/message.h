// The controller's messages: what a rank asks for (Request) and what the coordinator decides
// (Response), batched per round trip as RequestList / ResponseList.
//
// A Request describes one tensor a rank has enqueued. Ranks send a full Request the first time a
// tensor name is seen, and afterwards only a CachedRef (slot, generation) into the response cache
// (runtime/core/response_cache.h). The coordinator answers with an ordered ResponseList that every
// rank executes in the same order; a Response may fuse several allreduce tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace core {

struct Request {
  int32_t rank = 0;
  OpType op = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  int32_t root = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t device = kCpuDevice;
  int64_t group_id = -1;
  int32_t group_size = 0;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  // The process set the collective runs in (docs/process-sets.md); 0 is the global set. Part of
  // the signature: the same name in two sets is two different tensors.
  int32_t process_set_id = 0;
  // Small allreduces only: this rank's input bytes, sent with the request so that the coordinator
  // can reduce them itself (see runtime/core/eager_reduce.h). Not part of the signature.
  std::string data;
  bool eager = false;
  // kPeerExchange, kNeighborAllgather: the global ranks this rank sends its tensor to and receives
  // from. A peer exchange is matched with one of them (a rank in both lists is a candidate for a
  // swap); a neighbor allgather sends to all of send_ranks and receives from all of recv_ranks.
  std::vector<int64_t> send_ranks;
  std::vector<int64_t> recv_ranks;
  // kPeerExchange only: this request withdraws this rank's pending exchange of `name` minus
  // kWithdrawSuffix (its entry travels under the suffixed name; see PeerMatcher::Withdraw).
  bool withdraw = false;

  // True when every field except `rank` matches: the cache's notion of "the same tensor again".
  bool SameSignature(const Request& other) const;
  // Whether the response cache may hold this request (its parameters do not vary by rank).
  bool Cacheable() const;
  int64_t ByteSize() const { return NumElements(shape) * static_cast<int64_t>(DataTypeSize(dtype)); }
};

struct CachedRef {
  int32_t slot = 0;
  uint32_t generation = 0;
  bool eager = false;
  std::string data;  // as Request::data
  // The set whose response cache holds (slot, generation); see Request::process_set_id.
  int32_t process_set_id = 0;
};

struct RequestList {
  int32_t rank = 0;
  std::vector<Request> requests;
  std::vector<CachedRef> cached;
  bool shutdown = false;
};

struct Response {
  enum class Type : int32_t {
    kAllreduce = 0,
    kAllgather,
    kBroadcast,
    kAlltoall,
    kReducescatter,
    kBarrier,
    kJoin,
    kError,
    // Every rank applies these, members or not: kProcessSetAdd registers the set `root` (the
    // id the coordinator assigned) of global ranks `sizes`; kProcessSetRemove unregisters `root`,
    // with sizes = {1} when it was registered and {0} when it was not.
    kProcessSetAdd,
    kProcessSetRemove,
    // Only the ranks in `sizes` take part: the two matched ranks of a peer exchange (one rank
    // alone: its exchange was withdrawn, or it is a withdraw request answered). `root` carries the
    // coordinator's sequence number of point-to-point responses, from which the engines derive
    // their message tags. `error` non-empty: the pair failed to match (delivered to both only).
    kPeerExchange,
    // Every member: `root` as above.
    kNeighborAllgather,
  };
  Type type = Type::kAllreduce;
  std::vector<std::string> names;
  // Parallel to names: where the response cache holds (or now assigns) each name; -1 if not.
  std::vector<int32_t> cache_slots;
  std::vector<uint32_t> cache_generations;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  int32_t device = kCpuDevice;
  // allreduce: element count per name; allgather: first dimension per rank;
  // alltoall: size x size matrix of rows (row r = what rank r sends to each rank).
  std::vector<int64_t> sizes;
  std::string error;            // kError
  // Eager allreduce: the finished result, computed by the coordinator; ranks copy it out.
  bool eager = false;
  std::string data;
  int32_t last_joined_rank = -1;  // kJoin
  // The process set the response belongs to (Request::process_set_id); a fused response never
  // mixes sets.
  int32_t process_set_id = 0;
  int64_t total_bytes = 0;      // coordinator-side bookkeeping for fusion; not sent
};

// A cached ref the coordinator could not resolve (its slot was reassigned meanwhile): `rank`
// resends the full request it had sent as (slot, generation).
struct ResendEntry {
  int32_t rank = 0;
  int32_t slot = 0;
  uint32_t generation = 0;

  CachedRef ref() const { return CachedRef{slot, generation}; }
  bool operator==(const ResendEntry& o) const {
    return rank == o.rank && slot == o.slot && generation == o.generation;
  }
};

// Whether every rank switches its response cache before the list's responses (the autotuner's
// knob). On the wire: -1, 0, 1.
enum class CacheToggle : int8_t { kUnchanged = -1, kOff = 0, kOn = 1 };

// What the list means for the job once its responses have been handled.
//  kContinue: nothing more; the job goes on.
//  kShutdown: a rank asked to stop (or rank 0 failed and tells why): every rank first runs the
//             list's responses, then fails its pending work with `reason` ("dadt has been shut
//             down" when empty).
//  kAbort:    the job is broken (a stall past its shutdown time): every rank fails its pending
//             work with `reason` at once, without running the list's responses.
// On the wire (message.cc) these are the flag `shutdown` and the string `abort`: kShutdown sets
// the flag; kAbort leaves it clear with a non-empty string.
enum class Outcome : uint8_t { kContinue, kShutdown, kAbort };
const char* OutcomeName(Outcome o);

struct ResponseList {
  std::vector<Response> responses;
  std::vector<ResendEntry> resend;
  Outcome outcome = Outcome::kContinue;
  std::string reason;        // kShutdown, kAbort: the message pending work fails with
  int32_t cause_rank = -1;   // kShutdown, kAbort: the rank whose exit or failure caused it
  CacheToggle cache = CacheToggle::kUnchanged;  // applied before the responses
  std::string stall_warning;  // non-empty: every rank logs it (runtime/core/stall_inspector.h)

  // What rank 0 broadcasts when it must end the job itself: every rank fails its pending work
  // with `reason`, blaming `cause_rank`.
  static ResponseList Shutdown(std::string reason, int32_t cause_rank) {
    ResponseList list;
    list.outcome = Outcome::kShutdown;
    list.reason = std::move(reason);
    list.cause_rank = cause_rank;
    return list;
  }

  // True when the list carries nothing for the ranks (no response, resend, outcome, toggle or
  // warning): rank 0 does not broadcast it.
  bool Empty() const {
    return responses.empty() && resend.empty() && outcome == Outcome::kContinue &&
           cache == CacheToggle::kUnchanged && stall_warning.empty();
  }
};

std::string SerializeRequestList(const RequestList& list);
StatusOr<RequestList> ParseRequestList(const std::string& bytes);
std::string SerializeResponseList(const ResponseList& list);
StatusOr<ResponseList> ParseResponseList(const std::string& bytes);

// OpType <-> Response::Type, by name, never by enum order. kError has no op type (nullopt).
Response::Type ResponseTypeFor(OpType op);
std::optional<OpType> OpTypeFor(Response::Type type);

}  // namespace core
}  // namespace dadt
