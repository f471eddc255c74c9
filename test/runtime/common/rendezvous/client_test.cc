// RendezvousClient on its own: the handshake, connection errors, environment handling, and
// polling against a scripted fake server. The real server is exercised in test/dadtrun/rendezvous_server_test.cc.
#include "runtime/common/rendezvous/client.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/rendezvous/protocol.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace rendezvous {
namespace {

using net::Clock;
using net::ListenTcp;
using net::RecvAll;
using net::SendAll;
using std::chrono::milliseconds;

// Accepts one connection, runs the server's half of the handshake with `secret` (refusing a wrong
// proof as dadtrun does, or, with `prove_with`, answering with a proof made from that secret
// instead: a listener that does not know the job's), then answers each request with kNotFound
// until `found_after` requests have been seen, then kOk "value"; with found_after < 0 it never
// answers a request (a wedged dadtrun). Counts the requests.
class FakeServer {
 public:
  FakeServer(int found_after, std::string secret, std::string prove_with = "")
      : found_after_(found_after), secret_(std::move(secret)),
        prove_with_(prove_with.empty() ? secret_ : std::move(prove_with)) {
    StatusOr<int> fd = ListenTcp("127.0.0.1", 0, &port_);
    EXPECT_TRUE(fd.ok());
    listen_fd_ = *fd;
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  bool client_proved() const { return client_proved_.load(); }

 private:
  static bool Send(int fd, const Response& resp, Clock::time_point deadline) {
    std::string payload, frame;
    (void)EncodeResponse(resp, &payload);
    (void)AppendFrame(payload, &frame);
    return SendAll(fd, frame, deadline).ok();
  }
  static bool Recv(int fd, std::string* body, Clock::time_point deadline) {
    char header[4];
    if (!RecvAll(fd, header, 4, deadline).ok()) return false;
    body->assign(DecodeFrameLength(header), '\0');
    return RecvAll(fd, body->data(), body->size(), deadline).ok();
  }
  bool Handshake(int fd, Clock::time_point deadline) {
    const std::string nonce(auth::kNonceBytes, 'n');
    std::string frame, hello, client_nonce, proof;
    (void)AppendFrame(EncodeChallenge(nonce), &frame);
    if (!SendAll(fd, frame, deadline).ok() || !Recv(fd, &hello, deadline)) return false;
    if (!DecodeHello(hello, &client_nonce, &proof).ok()) return false;
    if (!auth::ProofMatches(proof, auth::Proof(secret_, kClientLabel, nonce, client_nonce))) {
      Send(fd, {ResponseStatus::kUnauthorized, "wrong proof of the job secret"}, deadline);
      return false;
    }
    client_proved_ = true;
    return Send(fd, {ResponseStatus::kOk, auth::Proof(prove_with_, kServerLabel, client_nonce, nonce)},
                deadline);
  }
  void Serve() {
    int fd = -1;
    for (int i = 0; i < 5000 && fd < 0; ++i) {
      fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) std::this_thread::sleep_for(milliseconds(1));
    }
    if (fd < 0) return;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::string body;
    if (Handshake(fd, deadline)) {
      while (Recv(fd, &body, deadline)) {
        Request req;
        if (!DecodeRequest(body, &req).ok()) break;
        ++requests_;
        if (found_after_ < 0) continue;
        if (!Send(fd, {requests_ > found_after_ ? ResponseStatus::kOk : ResponseStatus::kNotFound, "value"},
                  deadline)) {
          break;
        }
      }
    }
    ::close(fd);
  }

  int found_after_;
  const std::string secret_;
  const std::string prove_with_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<int> requests_{0};
  std::atomic<bool> client_proved_{false};
  std::thread thread_;
};

TEST(RendezvousClientTest, ConnectTimeoutNamesTheEndpoint) {
  // A port that was free a moment ago: nothing listens there.
  int port = 0;
  StatusOr<int> fd = ListenTcp("127.0.0.1", 0, &port);
  ASSERT_TRUE(fd.ok());
  ::close(*fd);
  auto start = std::chrono::steady_clock::now();
  auto client = RendezvousClient::Connect("127.0.0.1", port, "s", milliseconds(200));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(150));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kTimeout);
  EXPECT_NE(client.status().message().find("127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << client.status().message();
}

TEST(RendezvousClientTest, GetPollsUntilTheKeyAppears) {
  FakeServer server(/*found_after=*/3, "job-secret");
  auto client = RendezvousClient::Connect("127.0.0.1", server.port(), "job-secret",
                                          milliseconds(2000));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(server.client_proved());
  StatusOr<std::string> v = (*client)->Get("k", milliseconds(5000));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "value");
  EXPECT_EQ(server.requests(), 4);
}

TEST(RendezvousClientTest, AWrongSecretFailsAtConnectAndSaysSo) {
  FakeServer server(/*found_after=*/0, "job-secret");
  auto client = RendezvousClient::Connect("127.0.0.1", server.port(), "not-the-secret", milliseconds(2000));
  ASSERT_FALSE(client.ok());
  EXPECT_FALSE(server.client_proved());
  EXPECT_NE(client.status().message().find("refused the job secret (DADT_SECRET does not match this job)"),
            std::string::npos)
      << client.status().message();
}

TEST(RendezvousClientTest, AListenerThatCannotProveTheSecretIsNotTakenForTheServer) {
  // It accepts any client but does not know the job's secret: not this job's dadtrun.
  FakeServer server(/*found_after=*/0, "job-secret", /*prove_with=*/"another-secret");
  auto client = RendezvousClient::Connect("127.0.0.1", server.port(), "job-secret", milliseconds(2000));
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("did not prove that it knows the job secret"), std::string::npos)
      << client.status().message();
  EXPECT_EQ(server.requests(), 0) << "no request may go to an unproven server";
}

TEST(RendezvousClientTest, GetTimeoutNamesTheKey) {
  FakeServer server(/*found_after=*/1000000, "s");
  auto client = RendezvousClient::Connect("127.0.0.1", server.port(), "s", milliseconds(2000));
  ASSERT_TRUE(client.ok());
  auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> v = (*client)->Get("gloo/rank3", milliseconds(150));
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("gloo/rank3"), std::string::npos);
  EXPECT_GE(elapsed, milliseconds(140));
  EXPECT_LT(elapsed, milliseconds(2000));
  // Backoff caps at 20 ms, so 150 ms takes more than a handful of polls but not thousands.
  EXPECT_GE(server.requests(), 6);
  EXPECT_LE(server.requests(), 200);
}

TEST(RendezvousClientTest, ASilentServerFailsTheCallWithinTheIoTimeout) {
  // The handshake passes, then nothing answers: a wedged dadtrun.
  FakeServer server(/*found_after=*/-1, "s");
  const int port = server.port();
  auto client = RendezvousClient::Connect("127.0.0.1", port, "s", milliseconds(2000));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  (*client)->set_io_timeout(milliseconds(200));
  auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> v = (*client)->Get("elastic/notice", milliseconds(0));
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kAborted);
  EXPECT_NE(v.status().message().find("GET 'elastic/notice' at rendezvous server 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << v.status().message();
  EXPECT_GE(elapsed, milliseconds(190));
  EXPECT_LT(elapsed, std::chrono::seconds(30));  // bounded; the default would be 60 s
  // The connection is closed: the next call fails at once instead of waiting again.
  StatusOr<std::string> again = (*client)->Get("elastic/notice", milliseconds(0));
  EXPECT_NE(again.status().message().find("is closed"), std::string::npos) << again.status().message();
}

TEST(RendezvousClientTest, ConnectFromEnvReportsMissingVariables) {
  ::unsetenv("DADT_RENDEZVOUS_ADDR");
  ::unsetenv("DADT_RENDEZVOUS_PORT");
  ::unsetenv("DADT_SECRET");
  auto client = ConnectFromEnv(milliseconds(100));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(client.status().message().find("DADT_RENDEZVOUS_ADDR"), std::string::npos);

  ::setenv("DADT_RENDEZVOUS_ADDR", "127.0.0.1", 1);
  ::setenv("DADT_RENDEZVOUS_PORT", "notaport", 1);
  ::setenv("DADT_SECRET", "s", 1);
  client = ConnectFromEnv(milliseconds(100));
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("DADT_RENDEZVOUS_PORT"), std::string::npos);
}

TEST(RendezvousClientTest, ConnectFromEnvUsesTheEnvironment) {
  FakeServer server(/*found_after=*/0, "from-env");
  ::setenv("DADT_RENDEZVOUS_ADDR", "127.0.0.1", 1);
  ::setenv("DADT_RENDEZVOUS_PORT", std::to_string(server.port()).c_str(), 1);
  ::setenv("DADT_SECRET", "from-env", 1);
  auto client = ConnectFromEnv(milliseconds(2000));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(server.client_proved());
  ASSERT_TRUE((*client)->Set("k", "v").ok());
}

}  // namespace
}  // namespace rendezvous
}  // namespace dadt
