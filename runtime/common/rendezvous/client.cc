#include "runtime/common/rendezvous/client.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <unistd.h>

#include "runtime/common/auth/keyed_proof.h"
#include "runtime/common/env.h"
#include "runtime/common/logging.h"
#include "runtime/common/net/socket.h"

namespace dadt {
namespace rendezvous {
using net::Clock;
using net::ConnectTcp;
using net::RecvAll;
using net::SendAll;

namespace {

// A single request never legitimately takes long: the server answers from memory. This bounds how
// long a rank hangs if dadtrun is wedged (unless set_io_timeout says otherwise).
constexpr std::chrono::seconds kIoTimeout(60);
// The least time the handshake gets, however little of the connect timeout is left.
constexpr std::chrono::seconds kHandshakeTimeout(10);

// Get's polling: every kQuickPoll for the first kQuickWindow, since the ranks of a job usually
// publish their keys within a few milliseconds of each other (at init, and again at every
// re-init); then a backoff from 1 ms doubling to kSlowPoll, so that a rank waiting on a late peer
// costs the server only a request every 20 ms. With the backoff alone, a key that appeared just
// after a poll was seen up to 20 ms late: a Gloo init()/shutdown() cycle at 3 ranks took 4.8 ms
// at the median and 10.6 ms at the 95th percentile, against 4.1 and 6.3-8.2 ms with the quick
// window (lifecycle_bench.py, same machine, alternating).
constexpr std::chrono::microseconds kQuickPoll(250);
constexpr std::chrono::milliseconds kQuickWindow(50);
constexpr std::chrono::milliseconds kSlowPoll(20);

// One frame's payload from `fd` by `deadline`.
StatusOr<std::string> RecvFrame(int fd, Clock::time_point deadline) {
  char header[kFrameHeaderBytes];
  DADT_RETURN_IF_ERROR(RecvAll(fd, header, sizeof(header), deadline));
  const uint32_t length = DecodeFrameLength(header);
  if (length > kMaxFrameBytes) return InvalidArgument("oversized frame");
  std::string body(length, '\0');
  DADT_RETURN_IF_ERROR(RecvAll(fd, body.data(), length, deadline));
  return body;
}

// The client's half of the handshake (protocol.h, step 2) on a fresh connection.
Status Handshake(int fd, const std::string& secret, Clock::time_point deadline) {
  std::string challenge;
  DADT_ASSIGN_OR_RETURN(challenge, RecvFrame(fd, deadline));
  std::string server_nonce;
  DADT_RETURN_IF_ERROR(DecodeChallenge(challenge, &server_nonce));
  std::string client_nonce;
  DADT_ASSIGN_OR_RETURN(client_nonce, auth::NewNonce());
  std::string frame;
  DADT_RETURN_IF_ERROR(AppendFrame(
      EncodeHello(client_nonce, auth::Proof(secret, kClientLabel, server_nonce, client_nonce)), &frame));
  DADT_RETURN_IF_ERROR(SendAll(fd, frame, deadline));
  std::string answer;
  DADT_ASSIGN_OR_RETURN(answer, RecvFrame(fd, deadline));
  Response welcome;
  DADT_RETURN_IF_ERROR(DecodeResponse(answer, &welcome));
  if (welcome.status == ResponseStatus::kUnauthorized) {
    return Aborted("the server refused the job secret (DADT_SECRET does not match this job)");
  }
  if (welcome.status != ResponseStatus::kOk ||
      !auth::ProofMatches(welcome.value, auth::Proof(secret, kServerLabel, client_nonce, server_nonce))) {
    return Aborted(
        "the process listening there did not prove that it knows the job secret: it is not this "
        "job's dadtrun (a stale DADT_RENDEZVOUS_PORT, or another job's port)");
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    const std::string& addr, int port, const std::string& secret, std::chrono::milliseconds timeout) {
  const std::string endpoint = addr + ":" + std::to_string(port);
  if (port <= 0 || port > 65535) {
    return InvalidArgument("rendezvous port " + std::to_string(port) + " of " + endpoint +
                           " is out of range");
  }
  const auto deadline = Clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    StatusOr<int> fd = ConnectTcp(addr, port);
    if (fd.ok()) {
      // The server answers the handshake from memory; a wedged one is bounded like a request.
      const auto start = Clock::now();
      Status s = Handshake(*fd, secret, std::max(deadline, start + kHandshakeTimeout));
      if (!s.ok()) {
        ::close(*fd);
        return Status(s.code(), "the rendezvous server at " + endpoint + ": " + s.message());
      }
      DADT_LOG(DEBUG) << "rendezvous: this process and the server at " << endpoint
                      << " proved the job secret to each other in "
                      << std::chrono::duration<double, std::milli>(Clock::now() - start).count() << " ms";
      return std::unique_ptr<RendezvousClient>(new RendezvousClient(*fd, endpoint));
    }
    if (fd.status().code() == StatusCode::kInvalidArgument || Clock::now() + backoff >= deadline) {
      return TimeoutError("could not connect to the rendezvous server at " + endpoint + " within " +
                          std::to_string(timeout.count()) + " ms: " + fd.status().message());
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

RendezvousClient::RendezvousClient(int fd, std::string endpoint)
    : fd_(fd), io_timeout_(kIoTimeout), endpoint_(std::move(endpoint)) {}

void RendezvousClient::set_io_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  io_timeout_ = timeout;
}

RendezvousClient::~RendezvousClient() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<Response> RendezvousClient::Call(Op op, const std::string& key, const std::string& value) {
  std::string payload, frame;
  DADT_RETURN_IF_ERROR(EncodeRequest({op, key, value}, &payload));
  DADT_RETURN_IF_ERROR(AppendFrame(payload, &frame));

  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) {
    return Aborted("the connection to the rendezvous server at " + endpoint_ + " is closed");
  }
  const auto deadline = Clock::now() + io_timeout_;
  auto fail = [&](const Status& s) -> Status {
    ::close(fd_);
    fd_ = -1;
    return Aborted(std::string(OpName(op)) + " '" + key + "' at rendezvous server " + endpoint_ +
                   ": " + s.message());
  };
  Status s = SendAll(fd_, frame, deadline);
  if (!s.ok()) return fail(s);
  StatusOr<std::string> body = RecvFrame(fd_, deadline);
  if (!body.ok()) return fail(body.status());
  Response response;
  s = DecodeResponse(*body, &response);
  if (!s.ok()) return fail(s);
  if (response.status == ResponseStatus::kUnauthorized) {  // not after a handshake that passed
    return fail(Status(StatusCode::kAborted, "the server refused the request as unauthorized"));
  }
  if (response.status == ResponseStatus::kBadRequest) {
    // Our frames are always well formed, so this is about the data (e.g. ADD on a non-number);
    // if the server did close the connection, the next call reports it.
    return InvalidArgument(std::string(OpName(op)) + " '" + key + "' at rendezvous server " +
                           endpoint_ + " was refused: " + response.value);
  }
  return response;
}

Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  StatusOr<Response> r = Call(Op::kSet, key, value);
  return r.ok() ? Status::OK() : r.status();
}

StatusOr<std::string> RendezvousClient::Get(const std::string& key,
                                            std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  Clock::duration backoff = std::chrono::milliseconds(1);
  for (;;) {
    StatusOr<Response> r = Call(Op::kGet, key, "");
    if (!r.ok()) return r.status();
    if (r->status == ResponseStatus::kOk) return std::move(r->value);
    const auto now = Clock::now();
    if (now >= deadline) {
      return TimeoutError("timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for rendezvous key '" + key + "' at " + endpoint_);
    }
    Clock::duration pause = kQuickPoll;
    if (now - start >= kQuickWindow) {
      pause = backoff;
      backoff = std::min<Clock::duration>(backoff * 2, kSlowPoll);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
  }
}

StatusOr<int64_t> RendezvousClient::Add(const std::string& key, int64_t delta) {
  StatusOr<Response> r = Call(Op::kAdd, key, std::to_string(delta));
  if (!r.ok()) return r.status();
  char* end = nullptr;
  long long v = std::strtoll(r->value.c_str(), &end, 10);
  if (r->value.empty() || *end != '\0') {
    return InternalError("rendezvous server answered ADD '" + key + "' with '" + r->value + "'");
  }
  return static_cast<int64_t>(v);
}

StatusOr<std::unique_ptr<RendezvousClient>> ConnectFromEnv(std::chrono::milliseconds timeout) {
  for (const char* name : {env::kRendezvousAddr, env::kRendezvousPort, env::kSecret}) {
    if (!env::IsSet(name)) {
      return PreconditionFailed(std::string(name) +
                                " is not set; start the job with dadtrun or set it by hand");
    }
  }
  StatusOr<int64_t> port = env::GetInt(env::kRendezvousPort, 0);
  if (!port.ok()) return PreconditionFailed(port.status().message());
  if (*port <= 0 || *port > 65535) {
    return PreconditionFailed(std::string(env::kRendezvousPort) + "=" + std::to_string(*port) +
                              " is not a TCP port");
  }
  return RendezvousClient::Connect(env::GetString(env::kRendezvousAddr), static_cast<int>(*port),
                                   env::GetString(env::kSecret), timeout);
}

}  // namespace rendezvous
}  // namespace dadt
