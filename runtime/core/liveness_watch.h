// LivenessWatch: the thread that sends this rank's heartbeats and watches the others' (the
// protocol and the bookkeeping are liveness.h).
//
// It lives beside the loop thread, not in it: a rank whose loop thread is blocked in a collective
// (waiting on the rank that stopped) must still send heartbeats and still notice the silence.
// Heartbeats travel as UDP datagrams of their own, not on the control transport, which belongs
// to the loop thread (and under MPI may not be called from a second thread).
//
// Lifetime:
//  1. Bind: a UDP socket on the address this rank is reached at; Record() describes it (address,
//     port, host name, a random token).
//  2. Every rank exchanges its record (the Runtime allgathers them on the data plane at start)
//     and calls Start with all of them: the thread starts. Rank 0's token is the job's.
//  3. The thread warns through the log and, at the end, calls `on_end` once with the error text
//     and the silent rank; what ending means (abort, record the cause, exit) is the caller's.
//  4. Stop (any thread but this one's) ends the thread and joins it.
//
//   auto w = LivenessWatch::Bind(options, rank, size, "127.0.0.1");
//   std::vector<std::string> records = AllgatherRecords((*w)->Record());
//   (*w)->Start(records, hooks);
//   ...
//   (*w)->Stop();
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/core/liveness.h"
#include "runtime/core/tensor_queue.h"

namespace dadt {
namespace core {

class LivenessWatch {
 public:
  // Bytes of one rank's record in the start-up exchange (fixed, so a plain allgather moves them).
  static constexpr size_t kRecordBytes = 160;

  struct Hooks {
    // What this rank waits for now (TensorQueue::InFlight); any thread.
    std::function<std::vector<InFlightTensor>()> in_flight;
    // Called once, on the watch's thread, when the job must end because `rank` on `host` has
    // been silent for `silent`; `error` says so for the user.
    std::function<void(const std::string& error, int rank, const std::string& host,
                       std::chrono::milliseconds silent)>
        on_end;
  };

  static StatusOr<std::unique_ptr<LivenessWatch>> Bind(const LivenessOptions& options, int rank,
                                                       int size, const std::string& address);
  ~LivenessWatch();
  LivenessWatch(const LivenessWatch&) = delete;
  LivenessWatch& operator=(const LivenessWatch&) = delete;

  // This rank's record, kRecordBytes long (NUL padded).
  std::string Record() const;
  // `records`: every rank's Record(), by rank. Starts the thread.
  Status Start(const std::vector<std::string>& records, Hooks hooks);
  // Ends the thread (at once: it sleeps on an eventfd too) and joins it. Idempotent.
  void Stop();

  const std::string& host_of(int rank) const { return hosts_[rank]; }

 private:
  LivenessWatch(const LivenessOptions& options, int rank, int size, int fd, std::string address,
                int port);
  void Run();
  void SendHeartbeats(const std::vector<SilentPeer>& verdict, bool end);
  // Reads every datagram waiting; a worker's verdict from rank 0 lands in `reported`.
  void Receive(LivenessTracker* tracker, std::chrono::steady_clock::time_point now);
  std::string WaitText(std::chrono::steady_clock::time_point now) const;
  std::string PeerText(const SilentPeer& p) const;

  const LivenessOptions options_;
  const int rank_;
  const int size_;
  int fd_ = -1;       // UDP; a worker's is connected to rank 0
  int stop_fd_ = -1;  // eventfd
  const std::string address_;
  const int port_;
  uint64_t own_token_ = 0;
  uint64_t token_ = 0;  // rank 0's
  std::vector<std::string> hosts_;
  std::vector<sockaddr_in> peers_;  // by rank, parsed once in Start (rank 0 sends to them all)
  Hooks hooks_;
  uint64_t seq_ = 0;
  // A worker's latest verdict from rank 0, and whether rank 0 ends the job.
  std::vector<SilentPeer> reported_;
  bool reported_end_ = false;
  bool coordinator_gone_ = false;  // rank 0's socket refused: it exited (not frozen)
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace core
}  // namespace dadt
