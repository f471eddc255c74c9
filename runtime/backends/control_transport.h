// ControlTransport: how the runtime's negotiation messages travel between the ranks and the
// coordinator (rank 0). The core's negotiation protocol (runtime/core/runtime.cc) is the same on
// every transport:
//
//   1. a worker sends each new batch of requests (or cached references) to the coordinator;
//   2. the coordinator reads whatever has arrived, decides which tensors are ready everywhere,
//      and sends one ordered response list to every worker;
//   3. every rank executes the list in order on the data plane.
//
// Two transports exist: the core's TCP star (TcpControlTransport, used with dadtrun's rendezvous) and
// MPI point-to-point messages on a private communicator (runtime/backends/mpi, used under mpirun).
// Engines register theirs in ControlTransportRegistry, so the core never includes an engine.
//
// Threading: used only by the runtime's loop thread once the loop runs. Lifetime: created by
// Runtime::Start before the loop thread, destroyed after it has been joined.
//
//   auto t = ControlTransportRegistry::Create("mpi", options);
//   JobGeometry g = (*t)->geometry();   // an MPI transport learns rank/size from MPI itself
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/common/types.h"

namespace dadt {
namespace backends {

class ControlTransport {
 public:
  virtual ~ControlTransport() = default;

  // Where this process sits in the job, as the transport sees it.
  virtual const JobGeometry& geometry() const = 0;

  // Worker -> coordinator. May return before the coordinator has read it; order is kept.
  virtual Status SendToCoordinator(const std::string& payload) = 0;
  // Coordinator -> every worker, in order.
  virtual Status Broadcast(const std::string& payload) = 0;
  // Descriptors the loop can poll() for input. Empty when the transport has none (MPI): the loop
  // then calls ReadAvailable every poll_interval(awaiting), where `awaiting` says that this rank
  // has collectives submitted and not yet executed (a response, or a request, is due soon). Called
  // once per loop iteration, so a transport may track how long it has been awaiting.
  virtual const std::vector<int>& fds() const = 0;
  virtual std::chrono::microseconds poll_interval(bool /*awaiting*/) {
    return std::chrono::microseconds(0);
  }
  // Reads every complete message available without blocking; appends (sender rank, payload).
  virtual Status ReadAvailable(std::vector<std::pair<int, std::string>>* out) = 0;
  // The rank whose connection closed (after ReadAvailable failed), or -1.
  virtual int closed_rank() const = 0;
  // True when the library under the transport may be called from any thread (MPI: the thread
  // level MPI_THREAD_MULTIPLE was granted). The TCP star answers false: it is not MPI.
  virtual bool multi_threaded() const { return false; }
  // Called once on the loop thread as the loop ends (shutdown or abort): returns when nothing a
  // peer sent on this transport is still on its way to this rank (or the transport's timeout
  // passed), so that no message of this incarnation can reach the next init()'s. The TCP star
  // has nothing to do: its connections die with it. Messages read here are dropped.
  virtual void Close() {}
};

struct ControlTransportOptions {
  // An engine-specific communicator handle (MPI: an MPI_Comm cast to uintptr_t), or 0 for the
  // engine's default (MPI_COMM_WORLD).
  uintptr_t native_comm = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

using ControlTransportFactory =
    std::function<StatusOr<std::unique_ptr<ControlTransport>>(const ControlTransportOptions&)>;

// Written only during static initialization (engines' alwayslink libraries), read afterwards.
class ControlTransportRegistry {
 public:
  static bool Register(const std::string& name, ControlTransportFactory factory);
  static bool Has(const std::string& name);
  static StatusOr<std::unique_ptr<ControlTransport>> Create(const std::string& name,
                                                            const ControlTransportOptions& options);
};

}  // namespace backends
}  // namespace dadt
