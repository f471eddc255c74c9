#include "runtime/core/negotiation/message.h"

#include "runtime/core/negotiation/wire.h"

namespace dadt {
namespace core {
namespace {

constexpr uint32_t kRequestMagic = 0x44515251;   // "QRQD"
constexpr uint32_t kResponseMagic = 0x44535052;  // "RPSD"

void PutRequest(ByteWriter& w, const Request& r) {
  w.Put<int32_t>(r.rank);
  w.Put<int32_t>(static_cast<int32_t>(r.op));
  w.PutString(r.name);
  w.Put<int32_t>(static_cast<int32_t>(r.dtype));
  w.PutInts(r.shape);
  w.Put<int32_t>(r.root);
  w.Put<int32_t>(static_cast<int32_t>(r.reduce_op));
  w.Put<double>(r.prescale);
  w.Put<double>(r.postscale);
  w.Put<int32_t>(r.device);
  w.Put<int64_t>(r.group_id);
  w.Put<int32_t>(r.group_size);
  w.PutInts(r.splits);
  w.Put<int32_t>(r.process_set_id);
  w.Put<uint8_t>(r.eager ? 1 : 0);
  if (r.eager) w.PutString(r.data);
  w.PutInts(r.send_ranks);
  w.PutInts(r.recv_ranks);
  w.Put<uint8_t>(r.withdraw ? 1 : 0);
}

Request GetRequest(ByteReader& rd) {
  Request r;
  r.rank = rd.Get<int32_t>();
  r.op = static_cast<OpType>(rd.Get<int32_t>());
  r.name = rd.GetString();
  r.dtype = static_cast<DataType>(rd.Get<int32_t>());
  r.shape = rd.GetInts();
  r.root = rd.Get<int32_t>();
  r.reduce_op = static_cast<ReduceOp>(rd.Get<int32_t>());
  r.prescale = rd.Get<double>();
  r.postscale = rd.Get<double>();
  r.device = rd.Get<int32_t>();
  r.group_id = rd.Get<int64_t>();
  r.group_size = rd.Get<int32_t>();
  r.splits = rd.GetInts();
  r.process_set_id = rd.Get<int32_t>();
  r.eager = rd.Get<uint8_t>() != 0;
  if (r.eager) r.data = rd.GetString();
  r.send_ranks = rd.GetInts();
  r.recv_ranks = rd.GetInts();
  r.withdraw = rd.Get<uint8_t>() != 0;
  return r;
}

}  // namespace

bool Request::SameSignature(const Request& o) const {
  return op == o.op && name == o.name && dtype == o.dtype && shape == o.shape && root == o.root &&
         reduce_op == o.reduce_op && prescale == o.prescale && postscale == o.postscale &&
         device == o.device && group_id == o.group_id && group_size == o.group_size &&
         splits == o.splits && process_set_id == o.process_set_id && send_ranks == o.send_ranks &&
         recv_ranks == o.recv_ranks && withdraw == o.withdraw;
}

bool Request::Cacheable() const {
  // Allgather and alltoall carry per-rank sizes. Grouped members are cacheable: the group id is
  // part of the signature (the Python layer derives it from the member names).
  // Adasum's responses carry point-to-point tags that the coordinator stamps each time.
  if (op == OpType::kAllreduce) return reduce_op != ReduceOp::kAdasum;
  return op == OpType::kBroadcast || op == OpType::kReducescatter;
}

Response::Type ResponseTypeFor(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return Response::Type::kAllreduce;
    case OpType::kAllgather: return Response::Type::kAllgather;
    case OpType::kBroadcast: return Response::Type::kBroadcast;
    case OpType::kAlltoall: return Response::Type::kAlltoall;
    case OpType::kReducescatter: return Response::Type::kReducescatter;
    case OpType::kBarrier: return Response::Type::kBarrier;
    case OpType::kJoin: return Response::Type::kJoin;
    case OpType::kProcessSetAdd: return Response::Type::kProcessSetAdd;
    case OpType::kProcessSetRemove: return Response::Type::kProcessSetRemove;
    case OpType::kPeerExchange: return Response::Type::kPeerExchange;
    case OpType::kNeighborAllgather: return Response::Type::kNeighborAllgather;
  }
  return Response::Type::kError;
}

std::optional<OpType> OpTypeFor(Response::Type type) {
  switch (type) {
    case Response::Type::kAllreduce: return OpType::kAllreduce;
    case Response::Type::kAllgather: return OpType::kAllgather;
    case Response::Type::kBroadcast: return OpType::kBroadcast;
    case Response::Type::kAlltoall: return OpType::kAlltoall;
    case Response::Type::kReducescatter: return OpType::kReducescatter;
    case Response::Type::kBarrier: return OpType::kBarrier;
    case Response::Type::kJoin: return OpType::kJoin;
    case Response::Type::kProcessSetAdd: return OpType::kProcessSetAdd;
    case Response::Type::kProcessSetRemove: return OpType::kProcessSetRemove;
    case Response::Type::kPeerExchange: return OpType::kPeerExchange;
    case Response::Type::kNeighborAllgather: return OpType::kNeighborAllgather;
    case Response::Type::kError: break;
  }
  return std::nullopt;
}

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kContinue: return "continue";
    case Outcome::kShutdown: return "shutdown";
    case Outcome::kAbort: return "abort";
  }
  return "unknown";
}

std::string SerializeRequestList(const RequestList& list) {
  ByteWriter w;
  w.Put<uint32_t>(kRequestMagic);
  w.Put<int32_t>(list.rank);
  w.Put<uint8_t>(list.shutdown ? 1 : 0);
  w.Put<uint32_t>(static_cast<uint32_t>(list.requests.size()));
  for (const auto& r : list.requests) PutRequest(w, r);
  w.Put<uint32_t>(static_cast<uint32_t>(list.cached.size()));
  for (const auto& c : list.cached) {
    w.Put<int32_t>(c.slot);
    w.Put<uint32_t>(c.generation);
    w.Put<int32_t>(c.process_set_id);
    w.Put<uint8_t>(c.eager ? 1 : 0);
    if (c.eager) w.PutString(c.data);
  }
  return w.Take();
}

StatusOr<RequestList> ParseRequestList(const std::string& bytes) {
  ByteReader rd(bytes.data(), bytes.size());
  if (rd.Get<uint32_t>() != kRequestMagic) return InternalError("bad request list header");
  RequestList list;
  list.rank = rd.Get<int32_t>();
  list.shutdown = rd.Get<uint8_t>() != 0;
  uint32_t n = rd.Get<uint32_t>();
  for (uint32_t i = 0; i < n && rd.ok(); ++i) list.requests.push_back(GetRequest(rd));
  uint32_t m = rd.Get<uint32_t>();
  for (uint32_t i = 0; i < m && rd.ok(); ++i) {
    CachedRef c;
    c.slot = rd.Get<int32_t>();
    c.generation = rd.Get<uint32_t>();
    c.process_set_id = rd.Get<int32_t>();
    c.eager = rd.Get<uint8_t>() != 0;
    if (c.eager) c.data = rd.GetString();
    list.cached.push_back(std::move(c));
  }
  if (!rd.ok() || !rd.done()) return InternalError("truncated or malformed request list");
  return list;
}

std::string SerializeResponseList(const ResponseList& list) {
  ByteWriter w;
  w.Put<uint32_t>(kResponseMagic);
  // The outcome travels as the flag `shutdown` and the string `abort` (see Outcome).
  w.Put<uint8_t>(list.outcome == Outcome::kShutdown ? 1 : 0);
  if (list.outcome == Outcome::kAbort && list.reason.empty()) {
    w.PutString("dadt job aborted");  // an abort needs a non-empty string to read back as one
  } else {
    w.PutString(list.outcome == Outcome::kContinue ? std::string() : list.reason);
  }
  w.Put<int32_t>(list.cause_rank);
  w.Put<int8_t>(static_cast<int8_t>(list.cache));
  // Resends travel as flat {rank, slot, generation} triples.
  std::vector<int64_t> resend;
  resend.reserve(list.resend.size() * 3);
  for (const ResendEntry& e : list.resend) {
    resend.insert(resend.end(), {e.rank, e.slot, static_cast<int64_t>(e.generation)});
  }
  w.PutInts(resend);
  w.Put<uint32_t>(static_cast<uint32_t>(list.responses.size()));
  for (const auto& r : list.responses) {
    w.Put<int32_t>(static_cast<int32_t>(r.type));
    w.Put<uint32_t>(static_cast<uint32_t>(r.names.size()));
    for (size_t i = 0; i < r.names.size(); ++i) {
      w.PutString(r.names[i]);
      w.Put<int32_t>(r.cache_slots.empty() ? -1 : r.cache_slots[i]);
      w.Put<uint32_t>(r.cache_generations.empty() ? 0 : r.cache_generations[i]);
    }
    w.Put<int32_t>(static_cast<int32_t>(r.dtype));
    w.Put<int32_t>(static_cast<int32_t>(r.reduce_op));
    w.Put<double>(r.prescale);
    w.Put<double>(r.postscale);
    w.Put<int32_t>(r.root);
    w.Put<int32_t>(r.device);
    w.PutInts(r.sizes);
    w.PutString(r.error);
    w.Put<int32_t>(r.last_joined_rank);
    w.Put<int32_t>(r.process_set_id);
    w.Put<uint8_t>(r.eager ? 1 : 0);
    if (r.eager) w.PutString(r.data);
  }
  w.PutString(list.stall_warning);
  return w.Take();
}

StatusOr<ResponseList> ParseResponseList(const std::string& bytes) {
  ByteReader rd(bytes.data(), bytes.size());
  if (rd.Get<uint32_t>() != kResponseMagic) return InternalError("bad response list header");
  ResponseList list;
  const bool shutdown = rd.Get<uint8_t>() != 0;
  list.reason = rd.GetString();
  list.outcome = shutdown              ? Outcome::kShutdown
                 : list.reason.empty() ? Outcome::kContinue
                                       : Outcome::kAbort;
  list.cause_rank = rd.Get<int32_t>();
  const int8_t cache = rd.Get<int8_t>();
  if (cache < -1 || cache > 1) return InternalError("malformed response list: cache toggle");
  list.cache = static_cast<CacheToggle>(cache);
  const std::vector<int64_t> resend = rd.GetInts();
  if (resend.size() % 3 != 0) return InternalError("malformed response list: resend entries");
  for (size_t i = 0; i < resend.size(); i += 3) {
    list.resend.push_back(ResendEntry{static_cast<int32_t>(resend[i]),
                                      static_cast<int32_t>(resend[i + 1]),
                                      static_cast<uint32_t>(resend[i + 2])});
  }
  uint32_t n = rd.Get<uint32_t>();
  for (uint32_t i = 0; i < n && rd.ok(); ++i) {
    Response r;
    r.type = static_cast<Response::Type>(rd.Get<int32_t>());
    uint32_t k = rd.Get<uint32_t>();
    for (uint32_t j = 0; j < k && rd.ok(); ++j) {
      r.names.push_back(rd.GetString());
      r.cache_slots.push_back(rd.Get<int32_t>());
      r.cache_generations.push_back(rd.Get<uint32_t>());
    }
    r.dtype = static_cast<DataType>(rd.Get<int32_t>());
    r.reduce_op = static_cast<ReduceOp>(rd.Get<int32_t>());
    r.prescale = rd.Get<double>();
    r.postscale = rd.Get<double>();
    r.root = rd.Get<int32_t>();
    r.device = rd.Get<int32_t>();
    r.sizes = rd.GetInts();
    r.error = rd.GetString();
    r.last_joined_rank = rd.Get<int32_t>();
    r.process_set_id = rd.Get<int32_t>();
    r.eager = rd.Get<uint8_t>() != 0;
    if (r.eager) r.data = rd.GetString();
    list.responses.push_back(std::move(r));
  }
  list.stall_warning = rd.GetString();
  if (!rd.ok() || !rd.done()) return InternalError("truncated or malformed response list");
  return list;
}

}  // namespace core
}  // namespace dadt
