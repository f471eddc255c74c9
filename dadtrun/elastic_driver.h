// ElasticDriver: dadtrun's loop for an elastic job (docs/elastic.md; the launcher <-> worker
// contract is docs/elastic.md's "How the driver works").
//
// Every 100 ms, on the thread that calls Run():
//   0. Kill every worker of the current round that a peer reported silent (UnresponsiveKey: a
//      stopped or frozen process never exits by itself, and its survivors wait for a new round),
//      and count it as failed at once, as step 1 would at its exit.
//   1. Reap workers that exited. A failure (non-zero exit or a signal) of a worker that was not
//      removed makes its slot rest, maybe blacklists its host (HostManager's rule), and asks for a
//      new round. A worker of the latest round that exits 0 starts the end: the job succeeds when
//      every worker of that round exited 0. A removed worker's exit never ends the job.
//   2. Take the latest discovery result (or, with a fixed host list, only the end of rests). A
//      change of the usable hosts that is not a failure is announced by a notice: elastic/notice/<n>
//      = added|removed|mixed, then elastic/notice = n (n = 1, 2, ...), and asks for a new round.
//   3. When a new round is asked for and no event came for `settle`, plan it (PlanRound); below
//      --min-np, wait (and end the job after --elastic-timeout). Otherwise count a reset (every
//      round after the first; past --reset-limit the job ends), spawn the new workers, and publish
//      round r: every elastic/round/<r>/assign/<id> (geometry, or "removed" for every running
//      worker not in it), then elastic/round/<r>/size, then elastic/round = r. A plan equal to the
//      current round publishes nothing (no notice either: it would leave workers waiting).
//   4. On a fatal end (elastic timeout, reset limit, a failure after the end began, a signal to
//      dadtrun) every running worker gets SIGTERM (or the signal), then SIGKILL after the grace;
//      Run() returns once every worker is reaped: no orphans.
//
// Workers are started and signalled through the hooks, so tests run it with plain local processes.
// Requires LauncherSignals() blocked in every thread (supervisor.h), like Supervisor::Run.
//
//   ElasticDriver driver(options, hooks);
//   int exit_code = driver.Run();
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dadtrun/elastic_flags.h"
#include "dadtrun/host_manager.h"
#include "dadtrun/hosts.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// The contract's store keys.
std::string RoundKey();                                          // "elastic/round"
std::string RoundFinishedKey(int64_t round);                     // "elastic/round/<r>/finished"
std::string AssignKey(int64_t round, const std::string& worker_id);  // "elastic/round/<r>/assign/<id>"
std::string RoundSizeKey(int64_t round);                         // "elastic/round/<r>/size"
std::string NoticeKey();                                         // "elastic/notice"
std::string NoticeKindKey(int64_t seq);                          // "elastic/notice/<seq>"
// Set by a worker's runtime when rank `rank` of round `round` stopped answering (no heartbeat for
// DADT_LIVENESS_SHUTDOWN_TIME_SECONDS): "elastic/<round>/unresponsive/<rank>", the round's store
// scope (runtime/core/elastic_membership.h) followed by the key a static job uses.
std::string UnresponsiveKey(int64_t round, int rank);

struct ElasticWorkerSpec {
  std::string id;  // "<host>/<slot>/<spawn seq>"
  std::string host;
  int slot = 0;
  int workers_on_host = 1;  // in the round it is started for (OMP_NUM_THREADS=1 when several)
};

struct ElasticWorkerHandle {
  pid_t pid = -1;  // reaped by the driver with waitpid; also the process group to signal
  // Set for a worker started over ssh: delivers a signal to the worker itself (ssh_spawner.h).
  std::function<void(int sig)> signal;
};

struct ElasticDriverHooks {
  std::function<StatusOr<ElasticWorkerHandle>(const ElasticWorkerSpec&)> spawn;
  std::function<void(const std::string& key, const std::string& value)> publish;
  // The latest discovery result since the last call, if any; unset with a fixed host list.
  std::function<std::optional<StatusOr<std::vector<HostSlots>>>()> poll_discovery;
  std::function<void()> on_tick;  // at least every 100 ms
  // The value of a key in the job's store ("" when unset): the driver reads
  // UnresponsiveKey(round, rank), which a worker's runtime sets when it finds that rank silent
  // (runtime/core/liveness.h). Unset: silent workers are left to the runtime's own time-outs.
  std::function<std::string(const std::string& key)> peek;
};

struct ElasticDriverOptions {
  ElasticConfig config;
  std::vector<HostSlots> initial_hosts;  // the fixed list, or the discovery script's first run
  std::chrono::milliseconds settle{300};          // quiet time before a round is planned
  std::chrono::milliseconds failure_grace{3000};  // SIGTERM -> SIGKILL on a fatal end
  std::chrono::milliseconds signal_grace{5000};   // after forwarding SIGINT/SIGTERM/SIGHUP
  bool verbose = false;
};

// A worker that exits with this code met an error no other host would avoid (Python's
// dadt.common.elastic.JOB_FATAL_EXIT_CODE: the elastic checkpoint cannot be written or read): the
// job ends at once, with this code, instead of the worker's host being blacklisted and replaced.
inline constexpr int kJobFatalExitCode = 86;

class ElasticDriver {
 public:
  ElasticDriver(ElasticDriverOptions options, ElasticDriverHooks hooks);
  // 0 when every worker of the latest round exited 0; 1 for a job the driver ended (elastic
  // time-out, reset limit, no worker could start); the worker's code (128+signal when killed) for
  // a failure after the end began; 128+signal when dadtrun was interrupted.
  int Run();

 private:
  struct Worker {
    ElasticWorkerSpec spec;
    ElasticWorkerHandle handle;
    bool running = true;
    bool removed = false;
    int64_t round = 0;  // latest round it is assigned in; 0: none yet
    int rank = -1;      // its rank there
    std::string assignment;  // its assignment value there
    bool succeeded = false;
  };
  using Clock = ElasticClock;

  // Kills (SIGKILL: a stopped process would not act on SIGTERM) every running worker of the
  // current round that a peer's runtime reported as silent, and counts it lost at once (removed:
  // its exit, whenever it comes, is not counted again).
  void KillUnresponsive(Clock::time_point now);
  // A failure of `w`'s slot (maybe blacklisting its host), said with `how`; asks for a new round.
  void RecordLoss(const Worker& w, const std::string& how, Clock::time_point now);
  void Reap(Clock::time_point now);
  void OnExit(Worker* w, int wait_status, Clock::time_point now);
  void TakeHostChanges(Clock::time_point now);
  void TryPublishRound(Clock::time_point now);
  void CheckDone();
  void Fatal(const std::string& message, int exit_code, Clock::time_point now);
  void StopAll(int sig, std::chrono::milliseconds grace, Clock::time_point now);
  void Signal(const Worker& w, int sig);
  void OnSignal(int sig, Clock::time_point now);
  std::string Describe(const Worker& w) const;
  int RunningCount() const;

  const ElasticDriverOptions options_;
  const ElasticDriverHooks hooks_;
  HostManager hosts_;
  std::map<std::string, Worker> workers_;  // by id
  int64_t spawn_seq_ = 0;
  int64_t round_ = 0;
  int64_t notice_ = 0;
  int resets_ = 0;
  bool round_wanted_ = true;  // the first round
  Clock::time_point last_event_{};
  std::string notice_kind_;  // pending notice: "added", "removed", "mixed" or ""
  std::optional<Clock::time_point> below_since_;
  int waiting_reported_have_ = -1;
  std::string discovery_error_;  // the last one reported, so a failing script logs once per message
  bool finishing_ = false;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_{};
  int exit_code_ = 0;
};

}  // namespace dadtrun
}  // namespace dadt
