// RendezvousClient: a rank's connection to dadtrun's key-value server (protocol.h).
//
// The runtime creates one at init from the environment dadtrun sets (DADT_RENDEZVOUS_ADDR,
// DADT_RENDEZVOUS_PORT, DADT_SECRET) and hands it to the backend and controller as their
// KeyValueStore. Each connection starts with the keyed handshake of protocol.h: the client and
// the server prove to each other that they know the job secret, which never crosses the wire.
//
// Threading: one persistent TCP connection guarded by a mutex, so any number of threads may call it;
// requests from different threads are serialised. After a connection error every later call fails
// (the server only closes a connection when something is badly wrong).
//
//   auto client = ConnectFromEnv(std::chrono::seconds(30));
//   if (!client.ok()) return client.status();
//   DADT_RETURN_IF_ERROR((*client)->Set("ready/" + std::to_string(rank), "1"));
//   StatusOr<std::string> addr = (*client)->Get("coordinator/addr", std::chrono::seconds(30));
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/common/kv_store.h"
#include "runtime/common/rendezvous/protocol.h"
#include "runtime/common/status.h"

namespace dadt {
namespace rendezvous {

class RendezvousClient : public KeyValueStore {
 public:
  // Retries connecting (short backoff) until `timeout` passes, then runs the handshake; the error
  // names addr:port and the last failure, or which side's proof failed (not retried).
  static StatusOr<std::unique_ptr<RendezvousClient>> Connect(const std::string& addr, int port,
                                                             const std::string& secret,
                                                             std::chrono::milliseconds timeout);
  ~RendezvousClient() override;
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  Status Set(const std::string& key, const std::string& value) override;
  // Polls until `key` exists (every 250 us for the first 50 ms, then backing off from 1 ms to
  // 20 ms); TimeoutError names the key.
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Adds `delta` to the decimal counter at `key` (absent = 0) and returns the new value.
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);

  const std::string& endpoint() const { return endpoint_; }  // "addr:port"

  // How long one request may wait for the server's answer before the call fails (and closes the
  // connection); 60 s unless set. An elastic worker's clients set its start timeout, so that a
  // wedged launcher is reported within it (elastic_membership.h, engine_setup.cc).
  void set_io_timeout(std::chrono::milliseconds timeout);

 private:
  RendezvousClient(int fd, std::string endpoint);
  // One request/response exchange under mu_. Unauthorized (and any I/O or framing error) closes
  // the connection; BadRequest is InvalidArgument; NotFound is returned as a Response.
  StatusOr<Response> Call(Op op, const std::string& key, const std::string& value);

  std::mutex mu_;
  int fd_;  // -1 once the connection is broken
  std::chrono::milliseconds io_timeout_;  // guarded by mu_
  const std::string endpoint_;
};

// Connects with the address, port and secret that dadtrun put in the environment; a missing or
// malformed variable is PreconditionFailed naming it.
StatusOr<std::unique_ptr<RendezvousClient>> ConnectFromEnv(std::chrono::milliseconds timeout);

}  // namespace rendezvous
}  // namespace dadt
