#include "runtime/core/message.h"

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
  l.abort = "why";
  l.resend = {1, 2, 3};
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
  EXPECT_EQ(back->abort, "why");
  EXPECT_EQ(back->resend, l.resend);
  ASSERT_EQ(back->responses.size(), 1u);
  EXPECT_EQ(back->responses[0].names, r.names);
  EXPECT_EQ(back->responses[0].cache_slots, r.cache_slots);
  EXPECT_EQ(back->responses[0].sizes, r.sizes);
  EXPECT_EQ(back->responses[0].last_joined_rank, 2);
  EXPECT_TRUE(back->responses[0].eager);
  EXPECT_EQ(back->responses[0].data, r.data);
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
}

}  // namespace
}  // namespace core
}  // namespace dadt
