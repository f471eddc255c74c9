#include "runtime/core/negotiation/message.h"

#include <gtest/gtest.h>

namespace dadt {
namespace core {
namespace {

TEST(MessageTest, RequestListRoundTrips) {
  RequestList l;
  l.rank = 3;
  l.shutdown = true;
  Request r;
  r.rank = 3;
  r.op = OpType::kAlltoall;
  r.name = "x/y:z";
  r.dtype = DataType::kBfloat16;
  r.shape = {5, 2};
  r.splits = {1, 0, 4};
  r.prescale = 0.5;
  r.group_id = 9;
  r.group_size = 2;
  l.requests.push_back(r);
  l.cached.push_back(CachedRef{7, 42, true, std::string("\x01\x00\x02", 3)});
  l.requests[0].eager = true;
  l.requests[0].data = "payload";
  auto back = ParseRequestList(SerializeRequestList(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rank, 3);
  EXPECT_TRUE(back->shutdown);
  ASSERT_EQ(back->requests.size(), 1u);
  EXPECT_TRUE(back->requests[0].SameSignature(r));
  EXPECT_EQ(back->cached[0].slot, 7);
  EXPECT_EQ(back->cached[0].generation, 42u);
  EXPECT_TRUE(back->cached[0].eager);
  EXPECT_EQ(back->cached[0].data, std::string("\x01\x00\x02", 3));
  EXPECT_EQ(back->requests[0].data, "payload");
}

TEST(MessageTest, ResponseListRoundTrips) {
  ResponseList l;
  l.outcome = Outcome::kShutdown;
  l.reason = "why";
  l.cause_rank = 2;
  l.cache = CacheToggle::kOff;
  l.resend = {{1, 2, 3}, {0, 5, 4000000000u}};
  Response r;
  r.type = Response::Type::kAllgather;
  r.names = {"a", "b"};
  r.cache_slots = {1, -1};
  r.cache_generations = {4, 0};
  r.sizes = {3, 0, 7};
  r.error = "";
  r.last_joined_rank = 2;
  r.eager = true;
  r.data = std::string(8, '\x7f');
  l.responses.push_back(r);
  auto back = ParseResponseList(SerializeResponseList(l));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->outcome, Outcome::kShutdown);
  EXPECT_EQ(back->reason, "why");
  EXPECT_EQ(back->cause_rank, 2);
  EXPECT_EQ(back->cache, CacheToggle::kOff);
  EXPECT_EQ(back->resend, l.resend);
  ASSERT_EQ(back->responses.size(), 1u);
  EXPECT_EQ(back->responses[0].names, r.names);
  EXPECT_EQ(back->responses[0].cache_slots, r.cache_slots);
  EXPECT_EQ(back->responses[0].sizes, r.sizes);
  EXPECT_EQ(back->responses[0].last_joined_rank, 2);
  EXPECT_TRUE(back->responses[0].eager);
  EXPECT_EQ(back->responses[0].data, r.data);
}

// Each outcome survives the wire's two fields (the `shutdown` flag and the `abort` string).
TEST(MessageTest, OutcomesRoundTrip) {
  for (Outcome o : {Outcome::kContinue, Outcome::kShutdown, Outcome::kAbort}) {
    for (const std::string reason : {"", "rank 1 exited"}) {
      ResponseList l;
      l.outcome = o;
      l.reason = reason;
      l.cause_rank = o == Outcome::kContinue ? -1 : 1;
      auto back = ParseResponseList(SerializeResponseList(l));
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->outcome, o) << OutcomeName(o) << " with reason '" << reason << "'";
      EXPECT_EQ(back->cause_rank, l.cause_rank);
      if (o == Outcome::kContinue) {
        EXPECT_TRUE(back->reason.empty());
      } else if (!reason.empty()) {
        EXPECT_EQ(back->reason, reason);
      }
    }
  }
}

// The byte layout predates the typed fields: a list written the old way reads the same.
TEST(MessageTest, ResponseListWireLayoutIsUnchanged) {
  ResponseList l;
  l.outcome = Outcome::kShutdown;
  l.reason = "ab";
  l.cause_rank = 3;
  l.cache = CacheToggle::kOn;
  l.resend = {{1, 2, 7}};
  const std::string bytes = SerializeResponseList(l);
  std::string expected("\x52\x50\x53\x44", 4);  // magic "RPSD", little-endian
  expected += '\x01';                                // shutdown flag
  expected += std::string("\x02\x00\x00\x00", 4) + "ab";  // abort string
  expected += std::string("\x03\x00\x00\x00", 4);         // abort rank
  expected += '\x01';                                        // cache: on
  expected += std::string("\x03\x00\x00\x00", 4);         // three resend ints
  for (int64_t v : {1, 2, 7}) expected += std::string(reinterpret_cast<const char*>(&v), 8);
  expected += std::string(4, '\0');  // no responses
  expected += std::string(4, '\0');  // empty stall warning
  EXPECT_EQ(bytes, expected);
}

// Process sets (docs/process-sets.md): the set id travels on requests, cached refs and responses,
// and the same name in two sets is two different tensors.
TEST(MessageTest, ProcessSetIdTravelsOnEveryMessage) {
  RequestList l;
  l.rank = 1;
  Request r;
  r.rank = 1;
  r.name = "grad.w";
  r.shape = {4};
  r.process_set_id = 3;
  l.requests.push_back(r);
  CachedRef ref;
  ref.slot = 2;
  ref.generation = 5;
  ref.process_set_id = 7;
  l.cached.push_back(ref);
  auto back = ParseRequestList(SerializeRequestList(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->requests.size(), 1u);
  EXPECT_EQ(back->requests[0].process_set_id, 3);
  ASSERT_EQ(back->cached.size(), 1u);
  EXPECT_EQ(back->cached[0].process_set_id, 7);
  EXPECT_EQ(back->cached[0].slot, 2);

  ResponseList rl;
  Response a;
  a.names = {"grad.w"};
  a.process_set_id = 3;
  Response b = a;
  b.process_set_id = 0;
  rl.responses = {a, b};
  auto rback = ParseResponseList(SerializeResponseList(rl));
  ASSERT_TRUE(rback.ok()) << rback.status().ToString();
  ASSERT_EQ(rback->responses.size(), 2u);
  EXPECT_EQ(rback->responses[0].process_set_id, 3);
  EXPECT_EQ(rback->responses[1].process_set_id, 0);
}

TEST(MessageTest, ProcessSetIdIsPartOfTheSignature) {
  Request a;
  a.name = "grad.w";
  a.shape = {4};
  Request b = a;
  EXPECT_TRUE(a.SameSignature(b));
  b.process_set_id = 1;
  EXPECT_FALSE(a.SameSignature(b));
  EXPECT_FALSE(b.SameSignature(a));
}

TEST(MessageTest, OpTypeAndResponseTypeConvertByName) {
  for (OpType op : {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast, OpType::kAlltoall,
                    OpType::kReducescatter, OpType::kBarrier, OpType::kJoin}) {
    ASSERT_TRUE(OpTypeFor(ResponseTypeFor(op)).has_value()) << OpTypeName(op);
    EXPECT_EQ(*OpTypeFor(ResponseTypeFor(op)), op) << OpTypeName(op);
  }
  EXPECT_FALSE(OpTypeFor(Response::Type::kError).has_value());
}

TEST(MessageTest, TruncatedOrGarbageInputIsAnErrorNotACrash) {
  RequestList l;
  Request r;
  r.name = "abc";
  r.shape = {1, 2, 3};
  l.requests.push_back(r);
  const std::string bytes = SerializeRequestList(l);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(ParseRequestList(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  }
  std::string garbage = bytes;
  garbage[12] = '\xff';  // a huge request count
  garbage[13] = '\xff';
  EXPECT_FALSE(ParseRequestList(garbage).ok());
  EXPECT_FALSE(ParseResponseList("nonsense").ok());
  ResponseList odd;
  odd.resend = {{1, 2, 3}};
  std::string resend = SerializeResponseList(odd);
  resend[14] = '\x02';  // two ints: not a whole {rank, slot, generation} entry
  resend.erase(18 + 2 * 8, 8);   // the third int
  EXPECT_FALSE(ParseResponseList(resend).ok());
}

}  // namespace
}  // namespace core
}  // namespace dadt
