// RendezvousServer: dadtrun's key-value server for the ranks of one job (protocol:
// runtime/common/rendezvous/protocol.h; client: RendezvousClient).
//
// One thread runs a poll() loop over the listening socket and every persistent client connection;
// the store is an in-memory map. Every connection starts with the keyed handshake (protocol.h): a
// client that cannot prove it knows the job secret is answered kUnauthorized and closed, and the
// secret never crosses the wire. Malformed or oversized frames are
// answered kBadRequest, logged as a warning and the connection closed; nothing a client sends can
// crash the server or stall the other clients. Each rank's runtime sets "ready/<rank>" once it is
// connected; ReadyCount() reports how many have.
//
// Hardening, so that nothing another local user sends can wedge the job (docs/architecture.md):
//  - a connection must complete the handshake within auth_timeout of connecting, and
//    finish any request within read_timeout of its first byte, or it is closed;
//  - at most max_unauthenticated connections may be waiting to authenticate: a new one closes the
//    oldest, so a flood of idle connections cannot lock the ranks out; beyond max_connections in
//    all, new connections are closed at once;
//  - while max_pending_output response bytes wait for a client that does not read, the server
//    stops reading that client's requests (memory stays bounded);
//  - when accept() runs out of descriptors, accepting pauses briefly instead of spinning.
// The first refusal or closure of a peer address is logged as one warning line naming the peer
// and the reason; later ones from that address at debug level, with one warning giving their
// count when the server stops (a flood of connections cannot flood the log).
//
// Threading: Start() spawns the thread; the accessors and Stop() may be called from any thread.
//
//   auto server = RendezvousServer::Start("127.0.0.1", secret);
//   if (!server.ok()) return server.status();
//   env["DADT_RENDEZVOUS_PORT"] = std::to_string((*server)->port());
//   ...
//   (*server)->Stop();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/common/rendezvous/protocol.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

struct RendezvousServerOptions {
  int port = 0;  // 0: an ephemeral port (dadtrun); a fixed one for a Slurm step's rank 0
  size_t max_connections = 4096;
  size_t max_unauthenticated = 64;
  std::chrono::milliseconds auth_timeout{std::chrono::seconds(20)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(10)};
  size_t max_pending_output = 4 << 20;
};

class RendezvousServer {
 public:
  // Listens on bind_addr, options.port (ephemeral when 0), and starts serving.
  static StatusOr<std::unique_ptr<RendezvousServer>> Start(
      const std::string& bind_addr, const std::string& secret,
      const RendezvousServerOptions& options = RendezvousServerOptions());
  ~RendezvousServer();  // Stop()
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Number of keys with prefix "ready/" (set by each rank after it connects).
  int ReadyCount() const;
  // The value stored under `key`, or "" when absent (e.g. "cause/1", see Supervisor).
  std::string Peek(const std::string& key) const;
  // Sets `key` as a client's kSet would: how dadtrun's elastic driver publishes its rounds.
  void Put(const std::string& key, const std::string& value);
  int64_t connections_accepted() const { return connections_accepted_.load(); }
  // Requests answered kUnauthorized or kBadRequest (each also closed its connection).
  int64_t requests_rejected() const { return requests_rejected_.load(); }
  // Connections closed for a time-out or a cap (never answered).
  int64_t connections_dropped() const { return connections_dropped_.load(); }

  // Closes every connection and joins the thread. Idempotent.
  void Stop();

 private:
  struct Connection;

  RendezvousServer(std::string address, int port, int listen_fd, std::string secret,
                   const RendezvousServerOptions& options);
  void Loop();
  void AcceptAll();
  // Makes room for one more connection (true) or says there is none (false).
  bool MakeRoom(const std::string& peer);
  // Closes connections past their deadlines; returns the poll() timeout until the next deadline.
  int ExpireConnections();
  void Drop(int fd, const std::string& why);
  // Reads what is available and answers whole frames; false when the connection must close.
  bool ReadAndServe(Connection* c);
  void Serve(Connection* c);
  // Checks a connection's hello (its first frame); true with the server's proof in `welcome`, or
  // false after rejecting the connection.
  bool Authenticate(Connection* c, const std::string& hello, rendezvous::Response* welcome);
  bool Flush(Connection* c);
  void Reject(Connection* c, rendezvous::ResponseStatus status, const std::string& why);
  // Logs a refusal of `peer` ("address:port"): a warning the first time for its address.
  void LogRefusal(const std::string& peer, const std::string& message);
  rendezvous::Response Apply(const rendezvous::Request& request);

  const std::string address_;
  const int port_;
  const int listen_fd_;
  const std::string secret_;
  const RendezvousServerOptions options_;
  std::chrono::steady_clock::time_point accept_paused_until_{};
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> connections_accepted_{0};
  std::atomic<int64_t> requests_rejected_{0};
  std::atomic<int64_t> connections_dropped_{0};

  mutable std::mutex mu_;  // guards store_ (written by the loop thread and Put, read by ReadyCount and Peek)
  std::map<std::string, std::string> store_;
  std::map<int, std::unique_ptr<Connection>> connections_;  // loop thread only
  std::map<std::string, int64_t> refusals_;                 // per peer address; loop thread only
};

}  // namespace dadtrun
}  // namespace dadt
