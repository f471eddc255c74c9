// Liveness: tells a rank that stopped answering (frozen, stopped, cut off) from one that is only
// slow or runs different code. The bookkeeping and the wire format; no I/O (the thread and its
// socket are LivenessWatch, liveness_watch.h), so it is unit-tested with simulated clocks.
//
// Every rank's runtime sends a small heartbeat every heartbeat_interval() from a thread of its
// own, whatever the rank does: a rank busy in Python, or blocked in a collective, keeps sending;
// a stopped process (SIGSTOP, a debugger, a host that froze) does not. Protocol:
//  1. Workers send their heartbeat to rank 0; rank 0 sends its own to every worker, carrying the
//     ranks it has not heard from for warning_time and for how long (the verdict).
//  2. Rank 0 tracks every worker (LivenessTracker); a worker tracks rank 0 only and learns about
//     the other workers from rank 0's verdict.
//  3. While some rank is silent for warning_time, every rank logs a warning naming it, its host
//     and what this rank waits for, again every warning_time.
//  4. Once a rank is silent for shutdown_time, the job ends: rank 0 marks its last heartbeats
//     "end", and every surviving rank ends with an error naming the silent rank.
// A rank that waits for another that is only late, or runs different code, stays with the stall
// inspector (stall_inspector.h): heartbeats keep coming, so nothing here fires.
//
//   LivenessTracker t(*LivenessOptions::FromEnv(), /*watched=*/{1, 2}, now);
//   t.OnHeard(1, now);
//   LivenessVerdict v = t.Decide(t.Silent(now), now);   // v.warn, v.end
//
// Not thread-safe: owned by the liveness thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace core {

struct LivenessOptions {
  // DADT_LIVENESS_TIMEOUT_SECONDS: silence before the warning, and between repeats; 0 = off.
  std::chrono::milliseconds warning_time{10 * 1000};
  // DADT_LIVENESS_SHUTDOWN_TIME_SECONDS: silence before the job ends; at least warning_time.
  std::chrono::milliseconds shutdown_time{60 * 1000};

  bool enabled() const { return warning_time.count() > 0; }
  // No heartbeats (options made by hand, as the C++ tests' ranks-as-threads do).
  static LivenessOptions Off() { return LivenessOptions{std::chrono::milliseconds(0)}; }
  // A fifth of the warning time, between 20 ms and 1 s: a few heartbeats lost on the way (they
  // travel as datagrams) never look like silence.
  std::chrono::milliseconds heartbeat_interval() const;
  // Reads the two variables (seconds may be fractional); junk, or an end before the warning, is
  // InvalidArgument naming the variable.
  static StatusOr<LivenessOptions> FromEnv();
};

struct SilentPeer {
  int rank = -1;
  std::chrono::milliseconds silent{0};  // since the last heartbeat heard from it
};

struct LivenessVerdict {
  bool warn = false;  // log the warning now
  bool end = false;   // some rank has been silent for shutdown_time: end the job
};

class LivenessTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // `watched`: the ranks this rank hears from (rank 0: every worker; a worker: rank 0). Each
  // counts as heard at `start`.
  LivenessTracker(const LivenessOptions& options, const std::vector<int>& watched,
                  Clock::time_point start);

  void OnHeard(int rank, Clock::time_point now);
  // Stops watching `rank` (its process exited: the failure paths that see closed connections
  // report it, not this).
  void Forget(int rank);
  // The watched ranks silent for at least warning_time, longest silence first.
  std::vector<SilentPeer> Silent(Clock::time_point now) const;
  // Over `silent` (this rank's own Silent() and, on a worker, rank 0's verdict): a warning when
  // the silence is new or the last warning is warning_time old; the end when any rank has been
  // silent for shutdown_time. A silence that ends resets the repeat.
  LivenessVerdict Decide(const std::vector<SilentPeer>& silent, Clock::time_point now);

 private:
  struct Peer {
    int rank;
    Clock::time_point heard;
    bool forgotten = false;
  };
  LivenessOptions options_;
  std::vector<Peer> peers_;
  std::optional<Clock::time_point> last_warning_;
};

// One heartbeat datagram: "dadt-hb <token> <rank> <seq> [<rank>:<ms>,...] [end]". The token is
// rank 0's random number for this job and init(), exchanged at start: a datagram of another job
// (or of an earlier init()) is dropped.
struct Heartbeat {
  uint64_t token = 0;
  int rank = -1;
  uint64_t seq = 0;
  std::vector<SilentPeer> silent;  // rank 0's verdict
  bool end = false;                // rank 0 ends the job because of silent[0]
};

std::string EncodeHeartbeat(const Heartbeat& hb);
std::optional<Heartbeat> DecodeHeartbeat(const std::string& datagram);

// "2.0 s".
std::string LivenessSeconds(std::chrono::milliseconds d);

}  // namespace core
}  // namespace dadt
