// TcpControlTransport: the coordinator's star of TCP connections, carrying negotiation messages.
//
// Rank 0 listens on an ephemeral port, publishes "ctrl/addr" in the rendezvous store and accepts
// one connection from every other rank. Each connection opens with a keyed handshake
// (runtime/common/auth/keyed_proof.h): the coordinator sends a nonce, the rank answers with its
// rank, a nonce of its own and its proof of the job secret, and the coordinator answers with its
// own proof; the secret never crosses the wire. Hellos are read from all pending connections at
// once, so one that never says hello holds up no rank; a wrong proof, a duplicate rank or a frame
// that is not a hello closes the connection (counted, and logged once). Frames are a u32 length
// and a payload.
// Why a star of plain sockets and not collectives: negotiation is event-driven. A rank sends its
// requests the moment they exist and the coordinator answers the moment tensors are ready, so a
// lone small allreduce pays one message each way instead of a cycle-paced collective, and an idle
// runtime sleeps in poll() instead of spinning.
// Used only by the loop thread (Create runs on the initialising thread before the loop starts).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backends/control_transport.h"
#include "runtime/common/kv_store.h"
#include "runtime/common/status.h"

namespace dadt {
namespace backends {
namespace tcp {

class TcpControlTransport final : public ControlTransport {
 public:
  static StatusOr<std::unique_ptr<TcpControlTransport>> Create(int rank, int size, KeyValueStore* store,
                                                          const std::string& bind_address,
                                                          const std::string& secret,
                                                          std::chrono::milliseconds timeout);
  ~TcpControlTransport() override;

  // rank and size as given to Create (the launcher's environment says the rest).
  const JobGeometry& geometry() const override { return geometry_; }
  // Worker -> coordinator.
  Status SendToCoordinator(const std::string& payload) override;
  // Coordinator -> every worker.
  Status Broadcast(const std::string& payload) override;
  // Descriptors to poll for input (the coordinator's peers, or the worker's one socket).
  const std::vector<int>& fds() const override { return fds_; }
  // Reads every complete frame available without blocking; appends (peer rank, payload). A peer
  // that closed its end is an Aborted status naming the rank.
  Status ReadAvailable(std::vector<std::pair<int, std::string>>* out) override;
  // The rank whose connection closed (after ReadAvailable failed), or -1.
  int closed_rank() const override { return closed_rank_; }

 private:
  TcpControlTransport(int rank, int size) : rank_(rank), size_(size) {
    geometry_.rank = rank;
    geometry_.size = size;
  }
  struct Peer {
    int fd = -1;
    int rank = -1;
    std::string inbox;
    std::string challenge;  // while pending: the nonce sent on accept
  };
  Status Accept(int listen_fd, const std::string& secret, std::chrono::milliseconds timeout);
  // A worker's half of the handshake on its fresh connection to the coordinator.
  static Status Hello(int fd, int rank, const std::string& secret,
                      std::chrono::steady_clock::time_point deadline);

  int rank_;
  int size_;
  std::vector<Peer> peers_;
  std::vector<int> fds_;
  int closed_rank_ = -1;
  int refused_ = 0;  // connections that sent something other than a rank's hello while the star formed
  JobGeometry geometry_;
};

}  // namespace tcp
}  // namespace backends
}  // namespace dadt
