#include "runtime/common/rendezvous/protocol.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace dadt {
namespace rendezvous {
namespace {

std::string Frame(const std::string& payload) {
  std::string out;
  EXPECT_TRUE(AppendFrame(payload, &out).ok());
  return out;
}

TEST(ProtocolTest, RequestRoundTripsEveryOp) {
  for (Op op : {Op::kSet, Op::kGet, Op::kAdd}) {
    Request in{op, "ready/7", std::string("v\0al\xff", 5)};
    std::string payload;
    ASSERT_TRUE(EncodeRequest(in, &payload).ok());
    Request out;
    ASSERT_TRUE(DecodeRequest(payload, &out).ok());
    EXPECT_EQ(out.op, op);
    EXPECT_EQ(out.key, in.key);
    EXPECT_EQ(out.value, in.value);
  }
}

TEST(ProtocolTest, RequestWireLayoutIsLittleEndian) {
  std::string payload;
  ASSERT_TRUE(EncodeRequest({Op::kAdd, "k", "123"}, &payload).ok());
  const std::string expected = std::string("\x02\x03", 2) + std::string("\x01\x00", 2) + "k" +
                               std::string("\x03\x00\x00\x00", 4) + "123";
  EXPECT_EQ(payload, expected);
  std::string frame = Frame(payload);
  EXPECT_EQ(DecodeFrameLength(frame.data()), payload.size());
  EXPECT_EQ(frame.substr(0, 4), std::string("\x0c\x00\x00\x00", 4));  // 12 payload bytes
}

TEST(ProtocolTest, EmptyFieldsRoundTrip) {
  std::string payload;
  ASSERT_TRUE(EncodeRequest({Op::kGet, "", ""}, &payload).ok());
  Request out{Op::kSet, "y", "z"};
  ASSERT_TRUE(DecodeRequest(payload, &out).ok());
  EXPECT_EQ(out.op, Op::kGet);
  EXPECT_TRUE(out.key.empty() && out.value.empty());
}

TEST(ProtocolTest, ResponseRoundTrips) {
  for (ResponseStatus st : {ResponseStatus::kOk, ResponseStatus::kNotFound,
                            ResponseStatus::kUnauthorized, ResponseStatus::kBadRequest}) {
    std::string payload;
    ASSERT_TRUE(EncodeResponse({st, "value"}, &payload).ok());
    Response out;
    ASSERT_TRUE(DecodeResponse(payload, &out).ok());
    EXPECT_EQ(out.status, st);
    EXPECT_EQ(out.value, "value");
  }
}

TEST(ProtocolTest, EveryTruncationOfARequestIsRejected) {
  std::string payload;
  ASSERT_TRUE(EncodeRequest({Op::kSet, "key", "value"}, &payload).ok());
  for (size_t n = 0; n < payload.size(); ++n) {
    Request out;
    EXPECT_FALSE(DecodeRequest(payload.substr(0, n), &out).ok()) << "prefix of " << n << " bytes";
  }
  Request out;
  EXPECT_FALSE(DecodeRequest(payload + "x", &out).ok()) << "trailing byte accepted";
}

TEST(ProtocolTest, EveryTruncationOfAResponseIsRejected) {
  std::string payload;
  ASSERT_TRUE(EncodeResponse({ResponseStatus::kOk, "abc"}, &payload).ok());
  for (size_t n = 0; n < payload.size(); ++n) {
    Response out;
    EXPECT_FALSE(DecodeResponse(payload.substr(0, n), &out).ok()) << n;
  }
  Response out;
  EXPECT_FALSE(DecodeResponse(payload + "x", &out).ok());
}

TEST(ProtocolTest, BadVersionOpAndStatusAreRejected) {
  std::string payload;
  ASSERT_TRUE(EncodeRequest({Op::kSet, "k", "v"}, &payload).ok());
  Request req;
  std::string bad = payload;
  bad[0] = 1;  // the version that sent the secret itself
  EXPECT_NE(DecodeRequest(bad, &req).message().find("different releases"), std::string::npos);
  bad = payload;
  bad[1] = 0;
  EXPECT_NE(DecodeRequest(bad, &req).message().find("op"), std::string::npos);
  bad[1] = 4;
  EXPECT_FALSE(DecodeRequest(bad, &req).ok());
  Response resp;
  EXPECT_FALSE(DecodeResponse(std::string("\x04\0\0\0\0", 5), &resp).ok());
}

TEST(ProtocolTest, LengthsPastTheEndAreRejected) {
  // Key length says 0xFFFF but only 1 byte follows.
  Request req;
  EXPECT_FALSE(DecodeRequest(std::string("\x02\x01\xff\xff" "a", 5), &req).ok());
  // Value length 0xFFFFFFFF.
  std::string payload = std::string("\x02\x01\x00\x00\xff\xff\xff\xff", 8);
  EXPECT_FALSE(DecodeRequest(payload, &req).ok());
  Response resp;
  EXPECT_FALSE(DecodeResponse(std::string("\x00\xff\xff\xff\xff", 5), &resp).ok());
}

TEST(ProtocolTest, RandomGarbageNeverDecodesOutOfBounds) {
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string junk(rng() % 40, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 8);  // small bytes -> plausible lengths
    Request req;
    Response resp;
    if (DecodeRequest(junk, &req).ok()) {
      ++accepted;
      // Whatever decoded must re-encode to exactly the same bytes.
      std::string again;
      ASSERT_TRUE(EncodeRequest(req, &again).ok());
      EXPECT_EQ(again, junk);
    }
    if (DecodeResponse(junk, &resp).ok()) {
      std::string again;
      ASSERT_TRUE(EncodeResponse(resp, &again).ok());
      EXPECT_EQ(again, junk);
    }
  }
  EXPECT_LT(accepted, 20000);
}

TEST(ProtocolTest, OversizedPayloadsAreRefused) {
  std::string out;
  EXPECT_FALSE(AppendFrame(std::string(kMaxFrameBytes + 1, 'x'), &out).ok());
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(AppendFrame(std::string(kMaxFrameBytes, 'x'), &out).ok());
  std::string payload;
  EXPECT_FALSE(EncodeRequest({Op::kSet, "k", std::string(kMaxFrameBytes, 'v')}, &payload).ok());
  EXPECT_FALSE(EncodeRequest({Op::kSet, std::string(kMaxKeyBytes + 1, 'k'), ""}, &payload).ok());
  EXPECT_FALSE(EncodeResponse({ResponseStatus::kOk, std::string(kMaxFrameBytes, 'v')}, &payload).ok());
}

TEST(ProtocolTest, ExtractFrameReassemblesAStream) {
  std::string stream = Frame("first") + Frame("") + Frame("third");
  std::string buffer, payload;
  std::vector<std::string> got;
  // Feed one byte at a time, as a slow TCP stream would.
  for (char c : stream) {
    buffer.push_back(c);
    for (;;) {
      StatusOr<bool> r = ExtractFrame(&buffer, &payload);
      ASSERT_TRUE(r.ok());
      if (!*r) break;
      got.push_back(payload);
    }
  }
  EXPECT_EQ(got, (std::vector<std::string>{"first", "", "third"}));
  EXPECT_TRUE(buffer.empty());
}

TEST(ProtocolTest, ExtractFrameRejectsOversizedHeader) {
  std::string buffer;
  const uint32_t too_big = kMaxFrameBytes + 1;
  for (int i = 0; i < 4; ++i) buffer.push_back(static_cast<char>((too_big >> (8 * i)) & 0xFF));
  std::string payload;
  StatusOr<bool> r = ExtractFrame(&buffer, &payload);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ProtocolTest, HandshakePayloadsRoundTripAndRejectAnythingElse) {
  const std::string nonce(auth::kNonceBytes, 'n'), proof(auth::kProofBytes, 'p');
  std::string got_nonce, got_proof;
  ASSERT_TRUE(DecodeChallenge(EncodeChallenge(nonce), &got_nonce).ok());
  EXPECT_EQ(got_nonce, nonce);
  const std::string hello = EncodeHello(nonce, proof);
  ASSERT_TRUE(DecodeHello(hello, &got_nonce, &got_proof).ok());
  EXPECT_EQ(got_nonce, nonce);
  EXPECT_EQ(got_proof, proof);
  // A request where a hello belongs (a client of the version that sent the secret), every
  // truncation, a trailing byte: refused, never read past the end.
  std::string request;
  ASSERT_TRUE(EncodeRequest({Op::kGet, "k", ""}, &request).ok());
  EXPECT_FALSE(DecodeHello(request, &got_nonce, &got_proof).ok());
  for (size_t n = 0; n < hello.size(); ++n) {
    EXPECT_FALSE(DecodeHello(hello.substr(0, n), &got_nonce, &got_proof).ok()) << n;
  }
  EXPECT_FALSE(DecodeHello(hello + "x", &got_nonce, &got_proof).ok());
  std::string old = hello;
  old[0] = 1;
  EXPECT_NE(DecodeHello(old, &got_nonce, &got_proof).message().find("version 1"), std::string::npos);
  EXPECT_FALSE(DecodeChallenge(EncodeChallenge(nonce) + "x", &got_nonce).ok());
}

TEST(ProtocolTest, ApplyAdd) {
  std::string out;
  ASSERT_TRUE(ApplyAdd(nullptr, "5", &out).ok());
  EXPECT_EQ(out, "5");
  const std::string current = "40";
  ASSERT_TRUE(ApplyAdd(&current, "-42", &out).ok());
  EXPECT_EQ(out, "-2");
  const std::string junk = "4x";
  EXPECT_FALSE(ApplyAdd(&junk, "1", &out).ok());
  EXPECT_FALSE(ApplyAdd(nullptr, "", &out).ok());
  EXPECT_FALSE(ApplyAdd(nullptr, " 1", &out).ok());
  const std::string max = "9223372036854775807";
  EXPECT_FALSE(ApplyAdd(&max, "1", &out).ok());
  EXPECT_FALSE(ApplyAdd(nullptr, "99999999999999999999", &out).ok());
}

}  // namespace
}  // namespace rendezvous
}  // namespace dadt
