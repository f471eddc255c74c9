// TcpControlTransport: the coordinator's star of TCP connections, carrying negotiation messages.
//
// Rank 0 listens on an ephemeral port, publishes "ctrl/addr" in the rendezvous store and accepts
// one connection from every other rank; each connection opens with a hello frame holding the
// rank and the job secret, checked in constant time. Hellos are read from all pending
// connections at once, so one that never says hello holds up no rank; a wrong secret, a
// duplicate rank or a hello over 4 KiB closes the connection. Frames are a u32 length and a
// payload.
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
  };
  Status Accept(int listen_fd, const std::string& secret, std::chrono::milliseconds timeout);

  int rank_;
  int size_;
  std::vector<Peer> peers_;
  std::vector<int> fds_;
  int closed_rank_ = -1;
  JobGeometry geometry_;
};

}  // namespace tcp
}  // namespace backends
}  // namespace dadt
