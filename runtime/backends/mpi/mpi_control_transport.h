// MpiControlTransport: the runtime's negotiation messages as MPI point-to-point messages
// (registered as controller "mpi"; see runtime/backends/control_transport.h for the protocol).
//
// Workers send request lists to rank 0 and rank 0 sends response lists to every worker, all with
// nonblocking sends on a private duplicate of the job's communicator (so they never match the
// data plane's collectives or the user's own MPI traffic). Sends are nonblocking because both
// sides send without a matching receive posted: blocking sends of large lists (eager tensors
// ride with their requests) could deadlock coordinator and worker against each other. A send's
// buffer is kept until MPI reports it complete.
//
// Why messages and not a cycle of collectives (gather of requests, bcast of responses, the
// response cache's bit-vector allreduce, as Horovod's MPI controller runs): negotiation stays
// event-driven on every transport, so a rank that has nothing to say sends nothing, and the
// coordinator answers as soon as a tensor is ready everywhere. MPI has no descriptor to poll, so
// the loop probes for messages every poll_interval() (MPI_Iprobe costs well under a microsecond):
// while this rank has collectives in flight, every 5 us for the first 200 us after it starts
// awaiting or gets a message, since the answer usually follows at once when every rank is ready;
// otherwise every 100 us for 20 ms after the last message, and every 1 ms after that, so that an
// idle runtime, or one awaiting a late rank, does not burn a core (about 7% of one while a peer is
// 15 ms late). The loop thread asks for 1 us timer slack (runtime.cc), so these sleeps are not
// stretched by the kernel's default 50 us.
//
// Closing (init, shutdown, init in one process): the communicator is the job's, created once per
// process and kept for every later incarnation (mpi_env.h, JobComm), since creating one per init()
// cost up to a few hundred milliseconds with more ranks than cores. When the loop ends, a worker
// may have sent a request list (its own shutdown, say) that the coordinator, already shut down by
// another rank, will never read; on a kept communicator the next incarnation's coordinator would
// read it as its own. So Close ends the traffic first, as a barrier would, but only between the
// pairs that talk: each rank sends an empty "bye" to each of its peers (the coordinator to every
// worker, a worker to the coordinator) after everything else, then reads and drops what each peer
// sent until that peer's bye is in, and nothing after it: MPI keeps messages from one sender in
// order, so what follows a bye is the peer's next incarnation (a worker that got the
// coordinator's bye may start its next init() while the coordinator still awaits another
// worker's), left queued for the next transport. It costs one message each way, at a moment when
// every rank's loop is ending (the coordinator's shutdown list ends them all). A peer that never
// says bye within the timeout is a job that is already broken (a dead or stuck rank).
//
// Geometry comes from MPI (mpi_env.h, found once per job communicator): rank and size in the
// communicator, local ranks from MPI_Comm_split_type(SHARED), cross ranks from a split by local
// rank.
// Threading: the loop thread only, after Create (which runs on the initialising thread).
#pragma once

#include <mpi.h>

#include <chrono>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backends/control_transport.h"

namespace dadt {
namespace backends {
namespace mpi {

class MpiControlTransport final : public ControlTransport {
 public:
  static StatusOr<std::unique_ptr<ControlTransport>> Create(const ControlTransportOptions& options);
  ~MpiControlTransport() override;

  const JobGeometry& geometry() const override { return geometry_; }
  Status SendToCoordinator(const std::string& payload) override;
  Status Broadcast(const std::string& payload) override;
  const std::vector<int>& fds() const override { return no_fds_; }
  std::chrono::microseconds poll_interval(bool awaiting) override;
  Status ReadAvailable(std::vector<std::pair<int, std::string>>* out) override;
  int closed_rank() const override { return -1; }
  bool multi_threaded() const override { return thread_level_ == MPI_THREAD_MULTIPLE; }
  // The bye exchange above; the communicator is kept for the next incarnation. Also run by the
  // destructor when the loop never ran.
  void Close() override;

 private:
  MpiControlTransport(MPI_Comm comm, JobGeometry geometry, int thread_level,
                      std::chrono::milliseconds timeout)
      : comm_(comm), geometry_(geometry), thread_level_(thread_level), timeout_(timeout) {}
  struct Pending {
    std::shared_ptr<const std::string> payload;  // shared by a broadcast's sends
    MPI_Request request = MPI_REQUEST_NULL;
  };
  Status Send(int dest, std::shared_ptr<const std::string> payload);
  // Frees the buffers of completed sends.
  Status Reap();

  MPI_Comm comm_;
  const JobGeometry geometry_;
  const int thread_level_;
  const std::chrono::milliseconds timeout_;
  const std::vector<int> no_fds_;
  bool closed_ = false;
  std::list<Pending> pending_;
  std::chrono::steady_clock::time_point last_message_{};
  bool awaiting_ = false;                               // as of the last poll_interval()
  std::chrono::steady_clock::time_point await_start_{};  // when awaiting_ last became true
};

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
