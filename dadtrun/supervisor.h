// Supervisor: waits for every rank, forwards SIGINT/SIGTERM/SIGHUP to them, and ends the whole job
// as soon as one rank fails.
//
// Protocol, from the moment the ranks run:
//   1. Reap ranks as they exit (waitpid per pid, woken by SIGCHLD or every 100 ms).
//   2. A rank exiting non-zero or dying from a signal, while nothing is stopping yet, is reported
//      ("rank 1 (pid 123) exited with code 3; stopping the other ranks") and decides the exit code
//      (its code, or 128+signal). Every rank's process group gets SIGTERM; after failure_grace,
//      SIGKILL. When the failing rank names a cause that is still running, the cause is blamed
//      once it exits (or after cause_wait); at once, and killed, when the others' liveness check
//      recorded it as unresponsive (a stopped process never exits by itself).
//   3. SIGINT/SIGTERM/SIGHUP to dadtrun are forwarded to every rank's process group; after
//      signal_grace the survivors get SIGKILL. A second signal sends SIGKILL at once. The exit code
//      is 128+signal.
//   4. When a rank is reaped, whatever is left in its process group (its background children) gets
//      SIGKILL at once: nothing outlives its rank, and a reaped group id is never signalled later,
//      when the number could belong to someone else.
//   5. Run() returns once every rank is reaped: 0 when all exited 0.
//
// Requires LauncherSignals() to be blocked in every thread of the process before any thread or rank
// starts (BlockLauncherSignals), because Run() takes them synchronously with sigtimedwait.
//
//   sigset_t original; BlockLauncherSignals(&original);
//   ... spawn ranks ...
//   Supervisor sup(ranks, {});
//   int exit_code = sup.Run();
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dadt {
namespace dadtrun {

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  std::string host;  // non-empty: named in messages ("rank 3 on host h2 (pid 123) ...")
  // Set for a rank on another host: `pid` is its local ssh process, this delivers signals to the
  // rank itself, and an exit status of 128+N there means the rank died from signal N.
  std::function<void(int sig)> signal;
};

struct SupervisorOptions {
  std::chrono::milliseconds signal_grace{5000};   // after forwarding SIGINT/SIGTERM
  std::chrono::milliseconds failure_grace{3000};  // after a rank failed
  bool verbose = false;
  std::function<void()> on_tick;  // called from Run() at least every 100 ms
  // The rank whose failure made `rank` fail (its runtime records it at rendezvous as
  // "cause/<rank>"), or -1. Lets dadtrun name the rank that started a failure, not the first one
  // to exit: a rank whose collective was aborted by another rank's exit often exits first.
  std::function<int(int rank)> cause_of;
  // How long to wait for the causing rank's own exit status before blaming the rank at hand.
  std::chrono::milliseconds cause_wait{3000};
  // What the other ranks' liveness check recorded about `rank` ("unresponsive/<rank>": "rank 1
  // on host h stopped answering: no heartbeat for 6.0 s"), or "". A causing rank recorded so is
  // blamed at once, without waiting for its exit (it is stopped: it will not exit), and killed.
  std::function<std::string(int rank)> unresponsive_of;
};

// SIGINT, SIGTERM, SIGHUP and SIGCHLD.
sigset_t LauncherSignals();
// Blocks LauncherSignals() in the calling thread (threads started later inherit it) and stores the
// previous mask in `original`, which ranks get back before exec.
void BlockLauncherSignals(sigset_t* original);

// "SIGKILL" for 9.
std::string SignalName(int sig);

class Supervisor {
 public:
  Supervisor(std::vector<RankProcess> ranks, SupervisorOptions options);

  // Starts stopping the job without a failed rank (e.g. another rank could not be started):
  // SIGTERM now, SIGKILL after failure_grace.
  void RequestStop(int exit_code);
  int Run();
  // Sends `sig` to the process group of every rank that is still running.
  void SignalAll(int sig);

 private:
  struct Tracked {
    RankProcess process;
    bool running = true;
  };

  void ReapExited();
  void OnExit(const Tracked& t, int wait_status);
  void Blame(const Tracked& t, int code, const std::string& what);
  void OnSignal(int sig);
  void StartStopping(std::chrono::milliseconds grace);
  int RunningCount() const;

  std::vector<Tracked> ranks_;
  SupervisorOptions options_;
  bool stopping_ = false;
  bool killed_ = false;
  std::chrono::steady_clock::time_point kill_deadline_;
  int exit_code_ = 0;
  // A secondary failure waiting for its cause to exit: rank, code, message, deadline.
  struct Deferred {
    int rank = -1;
    int cause = -1;
    int code = 0;
    std::string what;
    std::chrono::steady_clock::time_point deadline;
  };
  Deferred deferred_;
};

}  // namespace dadtrun
}  // namespace dadt
