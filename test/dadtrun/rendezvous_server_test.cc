// dadtrun's RendezvousServer against the real RendezvousClient and against raw sockets sending junk.
#include "dadtrun/rendezvous_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/rendezvous/client.h"
#include "runtime/common/rendezvous/protocol.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {
namespace {

using rendezvous::RendezvousClient;
using std::chrono::milliseconds;

constexpr char kSecret[] = "0123456789abcdef";

class RendezvousServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(RendezvousServerOptions()); }

  void Restart(const RendezvousServerOptions& options) {
    server_.reset();
    auto server = RendezvousServer::Start("127.0.0.1", kSecret, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
  }

  std::unique_ptr<RendezvousClient> Client(const std::string& secret = kSecret) {
    auto c = RendezvousClient::Connect("127.0.0.1", server_->port(), secret, milliseconds(5000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // A raw connection for sending bytes no client would. The server's challenge is read first
  // (its nonce left in `nonce` when asked for).
  int RawConnect(std::string* nonce = nullptr) {
    StatusOr<int> fd = net::ConnectTcp("127.0.0.1", server_->port());
    EXPECT_TRUE(fd.ok());
    if (!fd.ok()) return -1;
    std::string challenge, server_nonce;
    EXPECT_TRUE(ReadFrame(*fd, &challenge));
    EXPECT_TRUE(rendezvous::DecodeChallenge(challenge, &server_nonce).ok());
    if (nonce != nullptr) *nonce = server_nonce;
    return *fd;
  }

  // The hello a client of `secret` sends, answering the challenge `server_nonce`.
  static std::string HelloFrame(const std::string& secret, const std::string& server_nonce) {
    const std::string client_nonce(auth::kNonceBytes, 'c');
    return Framed(rendezvous::EncodeHello(
        client_nonce, auth::Proof(secret, rendezvous::kClientLabel, server_nonce, client_nonce)));
  }

  // A raw connection through the handshake, done by hand as a client does it.
  int RawAuthenticated() {
    std::string nonce;
    const int fd = RawConnect(&nonce);
    SendRaw(fd, HelloFrame(kSecret, nonce));
    rendezvous::Response welcome;
    EXPECT_TRUE(ReadResponse(fd, &welcome));
    EXPECT_EQ(welcome.status, rendezvous::ResponseStatus::kOk);
    EXPECT_TRUE(auth::ProofMatches(welcome.value, auth::Proof(kSecret, rendezvous::kServerLabel,
                                                              std::string(auth::kNonceBytes, 'c'), nonce)))
        << "the server's proof";
    return fd;
  }

  static bool ReadFrame(int fd, std::string* body) {
    const auto deadline = net::Clock::now() + std::chrono::seconds(5);
    char header[4];
    if (!net::RecvAll(fd, header, 4, deadline).ok()) return false;
    body->assign(rendezvous::DecodeFrameLength(header), '\0');
    return net::RecvAll(fd, body->data(), body->size(), deadline).ok();
  }

  static std::string Framed(const std::string& payload) {
    std::string f;
    EXPECT_TRUE(rendezvous::AppendFrame(payload, &f).ok());
    return f;
  }

  // Reads one response frame; false if the server closed the connection first.
  static bool ReadResponse(int fd, rendezvous::Response* out) {
    std::string body;
    return ReadFrame(fd, &body) && rendezvous::DecodeResponse(body, out).ok();
  }

  // True once the server has closed `fd` (recv returns EOF).
  static bool ClosedByServer(int fd) {
    char c;
    const auto deadline = net::Clock::now() + std::chrono::seconds(5);
    Status s = net::RecvAll(fd, &c, 1, deadline);
    return !s.ok() && s.code() == StatusCode::kAborted;
  }

  static void SendRaw(int fd, const std::string& bytes) {
    ASSERT_TRUE(
        net::SendAll(fd, bytes, net::Clock::now() + std::chrono::seconds(5)).ok());
  }

  static std::string EncodedFrame(const rendezvous::Request& request) {
    std::string payload;
    EXPECT_TRUE(rendezvous::EncodeRequest(request, &payload).ok());
    return Framed(payload);
  }

  // The server still answers a well-behaved client.
  void ExpectStillServing() {
    auto c = Client();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Set("alive", "yes").ok());
    StatusOr<std::string> v = c->Get("alive", milliseconds(1000));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, "yes");
  }

  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(RendezvousServerTest, SetGetAdd) {
  auto a = Client();
  auto b = Client();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Set("gloo/0", "addr-of-rank-0").ok());
  StatusOr<std::string> v = b->Get("gloo/0", milliseconds(1000));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "addr-of-rank-0");
  ASSERT_TRUE(a->Set("gloo/0", "").ok());
  EXPECT_EQ(*b->Get("gloo/0", milliseconds(1000)), "");

  EXPECT_EQ(*a->Add("counter", 5), 5);
  EXPECT_EQ(*b->Add("counter", -2), 3);
  EXPECT_EQ(*b->Get("counter", milliseconds(0)), "3");
  // ADD on a value that is not a number is refused but the connection stays usable.
  ASSERT_TRUE(a->Set("text", "abc").ok());
  EXPECT_EQ(a->Add("text", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*a->Add("counter", 1), 4);
}

TEST_F(RendezvousServerTest, BinaryValuesUpToTheFrameLimit) {
  auto c = Client();
  ASSERT_NE(c, nullptr);
  std::string big(rendezvous::kMaxFrameBytes - 100, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31);
  ASSERT_TRUE(c->Set("big", big).ok());
  StatusOr<std::string> v = c->Get("big", milliseconds(1000));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, big);
}

TEST_F(RendezvousServerTest, GetBlocksUntilAnotherClientSets) {
  auto waiter = Client();
  auto setter = Client();
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(setter->Set("late", "value").ok());
  });
  StatusOr<std::string> v = waiter->Get("late", milliseconds(5000));
  t.join();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "value");
}

TEST_F(RendezvousServerTest, GetOfAbsentKeyTimesOut) {
  auto c = Client();
  StatusOr<std::string> v = c->Get("never", milliseconds(60));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("never"), std::string::npos);
}

TEST_F(RendezvousServerTest, ManyClientsAddConcurrently) {
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = Client();
      ASSERT_NE(c, nullptr);
      for (int j = 0; j < kAdds; ++j) ASSERT_TRUE(c->Add("n", 1).ok());
      ASSERT_TRUE(c->Set("ready/" + std::to_string(i), "1").ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*Client()->Add("n", 0), kClients * kAdds);
  EXPECT_EQ(server_->ReadyCount(), kClients);
  EXPECT_GE(server_->connections_accepted(), kClients);
}

TEST_F(RendezvousServerTest, ReadyCountCountsOnlyReadyPrefix) {
  auto c = Client();
  EXPECT_EQ(server_->ReadyCount(), 0);
  ASSERT_TRUE(c->Set("ready/0", "1").ok());
  ASSERT_TRUE(c->Set("ready/0", "1").ok());  // same rank twice counts once
  ASSERT_TRUE(c->Set("ready/1", "1").ok());
  ASSERT_TRUE(c->Set("ready", "x").ok());
  ASSERT_TRUE(c->Set("readyz/2", "x").ok());
  ASSERT_TRUE(c->Set("notready/3", "x").ok());
  EXPECT_EQ(server_->ReadyCount(), 2);
}

TEST_F(RendezvousServerTest, WrongSecretIsRefusedAtTheHandshakeAndNothingApplies) {
  auto bad = RendezvousClient::Connect("127.0.0.1", server_->port(), "not-the-secret", milliseconds(5000));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("refused the job secret"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(server_->requests_rejected(), 1);
  ExpectStillServing();
}

TEST_F(RendezvousServerTest, ARequestWhereTheHelloBelongsIsRefused) {
  // What a client of the protocol that sent the secret itself would do, or one that skips the
  // handshake: no request is served before a proof.
  int fd = RawConnect();
  SendRaw(fd, EncodedFrame({rendezvous::Op::kSet, "k", "v"}));
  rendezvous::Response r;
  ASSERT_TRUE(ReadResponse(fd, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kBadRequest);
  EXPECT_NE(r.value.find("not a handshake"), std::string::npos) << r.value;
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  EXPECT_FALSE(Client()->Get("k", milliseconds(0)).ok());
}

TEST_F(RendezvousServerTest, AProofMadeForAnotherChallengeIsRefused) {
  // A proof seen on the wire for one connection (its nonce) is worthless on another.
  std::string first_nonce, second_nonce;
  int first = RawConnect(&first_nonce);
  int second = RawConnect(&second_nonce);
  ASSERT_NE(first_nonce, second_nonce) << "every connection gets a fresh nonce";
  SendRaw(second, HelloFrame(kSecret, first_nonce));
  rendezvous::Response r;
  ASSERT_TRUE(ReadResponse(second, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kUnauthorized);
  EXPECT_TRUE(ClosedByServer(second));
  ::close(first);
  ::close(second);
  ExpectStillServing();
}

TEST_F(RendezvousServerTest, OversizedFrameIsRejected) {
  int fd = RawConnect();
  const uint32_t len = rendezvous::kMaxFrameBytes + 1;
  std::string header;
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((len >> (8 * i)) & 0xFF));
  SendRaw(fd, header);
  rendezvous::Response r;
  ASSERT_TRUE(ReadResponse(fd, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kBadRequest);
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  ExpectStillServing();
}

TEST_F(RendezvousServerTest, GarbageDoesNotCrashTheServer) {
  // HTTP on the port: "GET " read as a length is far over the limit.
  int http = RawConnect();
  SendRaw(http, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  rendezvous::Response r;
  ASSERT_TRUE(ReadResponse(http, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kBadRequest);
  EXPECT_TRUE(ClosedByServer(http));
  ::close(http);

  // A well-framed payload that is not a request (lengths past its end).
  int junk = RawConnect();
  SendRaw(junk, std::string("\x06\x00\x00\x00\x01\x01\xff\xff\x00\x00", 10));
  ASSERT_TRUE(ReadResponse(junk, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kBadRequest);
  ::close(junk);

  // Half a frame, then hang up; and one that stays open with half a frame.
  int half = RawConnect();
  SendRaw(half, std::string("\x20\x00\x00\x00\x01", 5));
  ::close(half);
  int stalled = RawConnect();
  SendRaw(stalled, std::string("\x20\x00\x00\x00\x01", 5));

  // Every byte value as a frame body.
  for (int b = 0; b < 256; b += 17) {
    int fd = RawConnect();
    SendRaw(fd, std::string("\x03\x00\x00\x00", 4) + std::string(3, static_cast<char>(b)));
    ReadResponse(fd, &r);
    ::close(fd);
  }
  ExpectStillServing();
  ::close(stalled);
  EXPECT_GE(server_->requests_rejected(), 2);
}

TEST_F(RendezvousServerTest, PipelinedRequestsAreAnsweredInOrder) {
  int fd = RawAuthenticated();
  SendRaw(fd, EncodedFrame({rendezvous::Op::kSet, "a", "1"}) +
                  EncodedFrame({rendezvous::Op::kAdd, "a", "41"}) +
                  EncodedFrame({rendezvous::Op::kGet, "a", ""}) +
                  EncodedFrame({rendezvous::Op::kGet, "missing", ""}));
  rendezvous::Response r;
  ASSERT_TRUE(ReadResponse(fd, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kOk);
  ASSERT_TRUE(ReadResponse(fd, &r));
  EXPECT_EQ(r.value, "42");
  ASSERT_TRUE(ReadResponse(fd, &r));
  EXPECT_EQ(r.value, "42");
  ASSERT_TRUE(ReadResponse(fd, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kNotFound);
  ::close(fd);
}

TEST_F(RendezvousServerTest, StopClosesClientConnections) {
  auto c = Client();
  ASSERT_TRUE(c->Set("k", "v").ok());
  server_->Stop();
  server_->Stop();  // idempotent
  EXPECT_FALSE(c->Get("k", milliseconds(100)).ok());
}

// ---- Hardening: time-outs, caps and back-pressure (each case against a real server) ----------

TEST_F(RendezvousServerTest, HalfARequestIsDroppedAfterTheReadTimeout) {
  RendezvousServerOptions o;
  o.read_timeout = milliseconds(200);
  Restart(o);
  auto rank = Client();  // a rank that authenticated and then stays quiet is never dropped
  ASSERT_TRUE(rank->Set("k", "v").ok());
  int slow = RawAuthenticated();
  std::string frame = EncodedFrame({rendezvous::Op::kSet, "slow", "value"});
  SendRaw(slow, frame.substr(0, frame.size() - 2));  // never finished
  EXPECT_TRUE(ClosedByServer(slow));
  ::close(slow);
  EXPECT_EQ(server_->connections_dropped(), 1);
  std::this_thread::sleep_for(milliseconds(300));
  StatusOr<std::string> v = rank->Get("k", milliseconds(100));
  ASSERT_TRUE(v.ok()) << "a quiet authenticated client was dropped: " << v.status().ToString();
  EXPECT_FALSE(rank->Get("slow", milliseconds(0)).ok()) << "the unfinished request must not apply";
}

TEST_F(RendezvousServerTest, ConnectionThatNeverAuthenticatesIsDropped) {
  RendezvousServerOptions o;
  o.auth_timeout = milliseconds(200);
  Restart(o);
  int idle = RawConnect();
  EXPECT_TRUE(ClosedByServer(idle));
  ::close(idle);
  EXPECT_EQ(server_->connections_dropped(), 1);
  ExpectStillServing();
}

TEST_F(RendezvousServerTest, FloodOfIdleConnectionsCannotLockOutTheRanks) {
  RendezvousServerOptions o;
  o.max_unauthenticated = 4;
  Restart(o);
  std::vector<int> flood;
  for (int i = 0; i < 40; ++i) flood.push_back(RawConnect());
  ExpectStillServing();  // connects after the flood and is served
  EXPECT_TRUE(ClosedByServer(flood[0])) << "the oldest idle connection makes room";
  EXPECT_GE(server_->connections_dropped(), 36);
  for (int fd : flood) ::close(fd);
}

TEST_F(RendezvousServerTest, ConnectionsBeyondTheCapAreRefused) {
  RendezvousServerOptions o;
  o.max_connections = 2;
  Restart(o);
  auto a = Client();
  auto b = Client();
  ASSERT_TRUE(a->Set("x", "1").ok());
  ASSERT_TRUE(b->Set("y", "2").ok());
  // The TCP handshake completes in the kernel; then the server closes it, before its challenge.
  auto c = RendezvousClient::Connect("127.0.0.1", server_->port(), kSecret, milliseconds(5000));
  EXPECT_FALSE(c.ok());
  EXPECT_GE(server_->connections_dropped(), 1);
  EXPECT_TRUE(a->Get("y", milliseconds(100)).ok()) << "the connections inside the cap keep working";
  b.reset();
  Status room = Aborted("not tried");
  for (int attempt = 0; attempt < 100 && !room.ok(); ++attempt) {  // once the server saw b close
    std::this_thread::sleep_for(milliseconds(50));
    room = Client()->Set("z", "3");
  }
  EXPECT_TRUE(room.ok()) << "no room after a connection closed: " << room.ToString();
}

TEST_F(RendezvousServerTest, ClientThatDoesNotReadItsAnswersIsThrottled) {
  RendezvousServerOptions o;
  o.max_pending_output = 64 << 10;
  Restart(o);
  auto setter = Client();
  const std::string big(256 << 10, 'b');
  ASSERT_TRUE(setter->Set("big", big).ok());
  // 64 GETs of 256 KiB pipelined, none read yet: 16 MiB of answers if the server kept going.
  int greedy = RawAuthenticated();
  std::string burst;
  for (int i = 0; i < 64; ++i) burst += EncodedFrame({rendezvous::Op::kGet, "big", ""});
  SendRaw(greedy, burst);
  ExpectStillServing();  // other clients are not held up meanwhile
  // Reading now gets every answer, in order.
  for (int i = 0; i < 64; ++i) {
    rendezvous::Response r;
    ASSERT_TRUE(ReadResponse(greedy, &r)) << "answer " << i;
    ASSERT_EQ(r.value.size(), big.size());
  }
  ::close(greedy);
}

TEST_F(RendezvousServerTest, TruncatedAndMalformedRequestsAreRefusedEachWithBadRequest) {
  const std::string good = EncodedFrame({rendezvous::Op::kSet, "key", "value"});
  const std::string payload = good.substr(4);
  auto framed = [](const std::string& p) { return Framed(p); };
  std::string bad_version = payload, bad_op = payload;
  bad_version[0] = 9;
  bad_op[1] = 77;
  for (const std::string& bytes :
       {framed(payload.substr(0, payload.size() - 1)),  // value runs past the end
        framed(payload + "x"),                          // trailing byte
        framed(bad_version), framed(bad_op), framed("")}) {
    int fd = RawAuthenticated();
    SendRaw(fd, bytes);
    rendezvous::Response r;
    ASSERT_TRUE(ReadResponse(fd, &r));
    EXPECT_EQ(r.status, rendezvous::ResponseStatus::kBadRequest) << r.value;
    EXPECT_TRUE(ClosedByServer(fd));
    ::close(fd);
  }
  EXPECT_FALSE(Client()->Get("key", milliseconds(0)).ok()) << "nothing was stored";
  ExpectStillServing();
}

TEST_F(RendezvousServerTest, TheFirstRefusalOfAnAddressIsLoggedTheOthersCounted) {
  RendezvousServerOptions o;
  o.auth_timeout = milliseconds(200);
  Restart(o);
  ::testing::internal::CaptureStderr();
  std::string nonce;
  int wrong = RawConnect(&nonce);
  SendRaw(wrong, HelloFrame("guess", nonce));
  rendezvous::Response r;
  ASSERT_TRUE(ReadResponse(wrong, &r));
  EXPECT_EQ(r.status, rendezvous::ResponseStatus::kUnauthorized);
  EXPECT_TRUE(ClosedByServer(wrong));
  int idle = RawConnect();  // the same address again: closed, not logged
  EXPECT_TRUE(ClosedByServer(idle));
  const std::string during = ::testing::internal::GetCapturedStderr();
  ::close(wrong);
  ::close(idle);
  int lines = 0;
  for (char ch : during) lines += ch == '\n';
  EXPECT_EQ(lines, 1) << during;
  EXPECT_NE(during.find("from 127.0.0.1:"), std::string::npos) << during;
  EXPECT_NE(during.find("UNAUTHORIZED): wrong proof of the job secret"), std::string::npos) << during;
  ::testing::internal::CaptureStderr();
  server_->Stop();
  const std::string at_stop = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(at_stop.find("refused or closed 2 connections from 127.0.0.1 in all"), std::string::npos)
      << at_stop;
}

TEST(RendezvousServerStartTest, RefusesAnEmptySecret) {
  EXPECT_FALSE(RendezvousServer::Start("127.0.0.1", "").ok());
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
