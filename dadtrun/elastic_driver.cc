#include "dadtrun/elastic_driver.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "dadtrun/console.h"
#include "dadtrun/round_planner.h"
#include "dadtrun/supervisor.h"

namespace dadt {
namespace dadtrun {
namespace {

constexpr std::chrono::milliseconds kTick(100);

void Say(const std::string& text) { console::Message("elastic: " + text); }

// "20:41:07" (local time) for a steady-clock time point.
std::string WallClock(ElasticClock::time_point t) {
  const auto delta = t - ElasticClock::now();
  const std::time_t when = std::chrono::system_clock::to_time_t(
      std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(delta));
  std::tm tm{};
  localtime_r(&when, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

std::string Seconds(std::chrono::steady_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

std::string RestText(const FailureOutcome& out) {
  if (out.forever) return "for the rest of the job (no --blacklist-cooldown-range)";
  return "until " + WallClock(out.until) + " (cooldown " + Seconds(out.cooldown) + ")";
}

}  // namespace

std::string RoundKey() { return "elastic/round"; }
std::string RoundFinishedKey(int64_t round) { return "elastic/round/" + std::to_string(round) + "/finished"; }
std::string AssignKey(int64_t round, const std::string& worker_id) {
  return "elastic/round/" + std::to_string(round) + "/assign/" + worker_id;
}
std::string RoundSizeKey(int64_t round) { return "elastic/round/" + std::to_string(round) + "/size"; }
std::string NoticeKey() { return "elastic/notice"; }
std::string NoticeKindKey(int64_t seq) { return "elastic/notice/" + std::to_string(seq); }
std::string UnresponsiveKey(int64_t round, int rank) {
  return "elastic/" + std::to_string(round) + "/unresponsive/" + std::to_string(rank);
}

ElasticDriver::ElasticDriver(ElasticDriverOptions options, ElasticDriverHooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      hosts_(options_.config.cooldown_range
                 ? HostManager::Cooldown(std::make_pair(std::chrono::seconds(options_.config.cooldown_range->first),
                                                        std::chrono::seconds(options_.config.cooldown_range->second)))
                 : std::nullopt) {}

int ElasticDriver::Run() {
  const Clock::time_point start = Clock::now();
  for (const HostSlots& h : hosts_.Update(options_.initial_hosts, start).added) {
    Say("host " + h.host + " added (" + std::to_string(h.slots) + " slot" + (h.slots == 1 ? "" : "s") + ")");
  }
  last_event_ = start - options_.settle;  // the first round needs no quiet time
  const sigset_t set = LauncherSignals();
  for (;;) {
    Clock::time_point now = Clock::now();
    if (!stopping_ && !finishing_) KillUnresponsive(now);
    Reap(now);
    if (stopping_) {
      if (RunningCount() == 0) break;
      if (!killed_ && now >= kill_deadline_) {
        if (options_.verbose) Say(std::to_string(RunningCount()) + " worker(s) still running; sending SIGKILL");
        for (const auto& [id, w] : workers_) {
          if (!w.running) continue;
          Signal(w, SIGKILL);
          // A worker over ssh: its ssh too, which a partition may keep waiting for the remote end
          // (sshd then closes the session, and the remote shell kills the worker, once it can).
          if (w.handle.signal) ::kill(-w.handle.pid, SIGKILL);
        }
        killed_ = true;
      }
    } else if (!finishing_) {
      TakeHostChanges(now);
      if (round_wanted_ && now - last_event_ >= options_.settle) TryPublishRound(now);
      if (!stopping_ && below_since_ &&
          now - *below_since_ >= std::chrono::seconds(options_.config.elastic_timeout_seconds)) {
        Fatal("elastic timeout: waited " + std::to_string(options_.config.elastic_timeout_seconds) +
                  " s (--elastic-timeout) with " + std::to_string(hosts_.UsableSlotCount()) +
                  " usable slot(s), fewer than --min-np " + std::to_string(options_.config.min_np) + "; stopping",
              1, now);
      }
    }
    if (hooks_.on_tick) hooks_.on_tick();
    timespec ts{0, static_cast<long>(std::chrono::nanoseconds(kTick).count())};
    siginfo_t info;
    const int sig = sigtimedwait(&set, &info, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) OnSignal(sig, Clock::now());
  }
  return exit_code_;
}

void ElasticDriver::Reap(Clock::time_point now) {
  for (auto& [id, w] : workers_) {
    if (!w.running) continue;
    // Seen without reaping first: while the worker is a zombie its pid, and so its process group
    // id, cannot be reused, so the SIGKILL for what it left in its group reaches nobody else.
    siginfo_t info{};
    const int seen = ::waitid(P_PID, static_cast<id_t>(w.handle.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (seen == 0 && info.si_pid != w.handle.pid) continue;  // still running
    if (seen < 0 && errno == EINTR) continue;
    w.running = false;
    if (seen < 0) continue;  // ECHILD: not ours any more
    ::kill(-w.handle.pid, SIGKILL);
    int status = 0;
    while (::waitpid(w.handle.pid, &status, 0) < 0 && errno == EINTR) {
    }
    OnExit(&w, status, now);
  }
}

void ElasticDriver::KillUnresponsive(Clock::time_point now) {
  if (!hooks_.peek || round_ == 0) return;
  for (auto& [id, w] : workers_) {
    if (!w.running || w.removed || w.round != round_ || w.rank < 0) continue;
    std::string what = hooks_.peek(UnresponsiveKey(round_, w.rank));
    if (what.empty()) continue;
    // "rank 1 on host h4 stopped answering: no heartbeat for 6.0 s": the part after the rank.
    const std::string prefix = "rank " + std::to_string(w.rank) + " on host " + w.spec.host + " ";
    if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    Say(Describe(w) + " on host " + w.spec.host + " " + what + "; killing it");
    Signal(w, SIGKILL);
    // Lost now, not when its exit is seen: across a partition the kill (and so the exit of the
    // ssh that carries it) may take as long as the partition. The next round leaves it out, as
    // "removed", so that if it ever reads the store again it leaves rather than waits.
    w.removed = true;
    RecordLoss(w, what + " (killed)", now);
  }
}

void ElasticDriver::RecordLoss(const Worker& w, const std::string& how, Clock::time_point now) {
  const FailureOutcome out = hosts_.RecordFailure(w.spec.host, w.spec.slot, now);
  if (out.host_blacklisted) {
    Say("host " + w.spec.host + " lost: " + Describe(w) + " " + how);
    Say("host " + w.spec.host + " blacklisted " + RestText(out));
  } else {
    Say(Describe(w) + " on host " + w.spec.host + " lost: " + how + "; slot " + w.spec.host + ":" +
        std::to_string(w.spec.slot) + " rests " + RestText(out));
  }
  round_wanted_ = true;
  last_event_ = now;
}

std::string ElasticDriver::Describe(const Worker& w) const {
  return (w.rank >= 0 ? "rank " + std::to_string(w.rank) + " (worker " + w.spec.id + ")" : "worker " + w.spec.id);
}

void ElasticDriver::OnExit(Worker* w, int wait_status, Clock::time_point now) {
  const bool signaled = WIFSIGNALED(wait_status);
  int code = signaled ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  std::string how = signaled ? "killed by " + SignalName(WTERMSIG(wait_status)) : "exited with code " + std::to_string(code);
  if (w->handle.signal && !signaled && code > 128 && code < 128 + 65) {
    how = "killed by " + SignalName(code - 128);  // over ssh: the remote shell's 128+N
  } else if (w->handle.signal && code == 255) {
    how += " (ssh failed; its message is above)";
  }
  if (stopping_) return;
  if (w->removed) {
    if (options_.verbose) Say(Describe(*w) + " on " + w->spec.host + " was removed and " + how);
    return;
  }
  if (code == 0) {
    if (round_ > 0 && w->round == round_) {
      w->succeeded = true;
      if (!finishing_) {
        if (options_.verbose) Say(Describe(*w) + " finished; waiting for the rest of round " + std::to_string(round_));
        // A worker of this round still waiting for a new one (its world failed after this exit)
        // learns that none will come, instead of waiting out its elastic time-out.
        hooks_.publish(RoundFinishedKey(round_), Describe(*w));
      }
      finishing_ = true;
      CheckDone();
    } else {
      Say(Describe(*w) + " on " + w->spec.host + " exited 0 outside the latest round; not counted");
    }
    return;
  }
  if (finishing_ && w->round != round_) {
    if (options_.verbose) Say(Describe(*w) + " on " + w->spec.host + " " + how + " (not in the finishing round)");
    return;
  }
  if (finishing_) {
    Fatal(Describe(*w) + " on " + w->spec.host + " " + how + " after other workers of round " +
              std::to_string(round_) + " had finished; stopping",
          code, now);
    return;
  }
  if (!signaled && code == kJobFatalExitCode) {
    Fatal(Describe(*w) + " on " + w->spec.host + " " + how + ": an error no other host would "
              "avoid (its message is above); stopping the job",
          code, now);
    return;
  }
  RecordLoss(*w, how, now);
}

void ElasticDriver::TakeHostChanges(Clock::time_point now) {
  HostChange change;
  if (hooks_.poll_discovery) {
    std::optional<StatusOr<std::vector<HostSlots>>> found = hooks_.poll_discovery();
    if (found && !found->ok()) {
      if (found->status().message() != discovery_error_) {
        discovery_error_ = found->status().message();
        Say(discovery_error_ + "; keeping the last host list and retrying every second");
      }
      found.reset();
    }
    if (found) {
      if (!discovery_error_.empty()) Say("host discovery script works again");
      discovery_error_.clear();
      change = hosts_.Update(**found, now);
    } else {
      change = hosts_.ExpireRests(now);
    }
  } else {
    change = hosts_.ExpireRests(now);
  }
  if (!change.any()) return;
  for (const HostSlots& h : change.added) {
    Say("host " + h.host + " added (" + std::to_string(h.slots) + " slot" + (h.slots == 1 ? "" : "s") + ")");
  }
  for (const std::string& h : change.removed) Say("host " + h + " removed (no longer listed)");
  for (const HostSlots& h : change.resized) {
    Say("host " + h.host + " now has " + std::to_string(h.slots) + " slot" + (h.slots == 1 ? "" : "s"));
  }
  for (const std::string& slot : change.slots_back) Say("slot " + slot + " usable again (its rest is over)");
  // Several changes before one round: one notice of their combined kind.
  const std::string kind = change.Kind();
  notice_kind_ = notice_kind_.empty() || notice_kind_ == kind ? kind : "mixed";
  round_wanted_ = true;
  last_event_ = now;
}

void ElasticDriver::TryPublishRound(Clock::time_point now) {
  std::vector<LiveWorker> live;
  for (const auto& [id, w] : workers_) {
    if (w.running && !w.removed) live.push_back({id, w.spec.host, w.spec.slot, w.round > 0});
  }
  const ElasticConfig& c = options_.config;
  RoundPlan plan = PlanRound(hosts_.Usable(), live, c.min_np, c.max_np);
  if (!plan.enough) {
    if (!below_since_) below_since_ = now;
    if (plan.available != waiting_reported_have_) {
      waiting_reported_have_ = plan.available;
      const auto left = std::chrono::seconds(c.elastic_timeout_seconds) - (now - *below_since_);
      Say("waiting for " + std::to_string(c.min_np) + " slots (have " + std::to_string(plan.available) +
          ", need --min-np " + std::to_string(c.min_np) + "); giving up in " + Seconds(left));
    }
    return;  // round_wanted_ stays: planned again on every tick until enough
  }
  // The same world as the current round (a change that ended where it began, e.g. a host listed
  // and blacklisted before it could start): no notice, no round, no reset. A notice without a new
  // round would leave the workers waiting for one.
  bool same = round_ > 0 && plan.removed.empty();
  for (const PlannedWorker& p : plan.workers) {
    auto it = workers_.find(p.worker_id);  // a new worker (empty id) is never the same world
    same = same && it != workers_.end() && it->second.round == round_ && it->second.assignment == p.AssignmentValue();
  }
  if (same) {
    if (options_.verbose) Say("hosts changed, but round " + std::to_string(round_) + " stays as it is");
    notice_kind_.clear();
    round_wanted_ = false;
    below_since_.reset();
    waiting_reported_have_ = -1;
    return;
  }
  if (round_ > 0 && c.reset_limit >= 0 && resets_ + 1 > c.reset_limit) {
    Fatal("reset limit reached: the job needs reset " + std::to_string(resets_ + 1) + " but --reset-limit is " +
              std::to_string(c.reset_limit) + "; stopping",
          1, now);
    return;
  }
  // New workers first: a slot whose worker cannot start counts as a failure there.
  bool spawn_failed = false;
  for (PlannedWorker& p : plan.workers) {
    if (!p.worker_id.empty()) continue;
    ElasticWorkerSpec spec{p.host + "/" + std::to_string(p.slot) + "/" + std::to_string(++spawn_seq_), p.host, p.slot,
                           p.local_size};
    StatusOr<ElasticWorkerHandle> handle = hooks_.spawn(spec);
    if (!handle.ok()) {
      const FailureOutcome out = hosts_.RecordFailure(p.host, p.slot, now);
      Say("cannot start worker " + spec.id + ": " + handle.status().message() +
          (out.host_blacklisted ? "; host " + p.host + " blacklisted " + RestText(out) : ""));
      spawn_failed = true;
      continue;
    }
    if (options_.verbose) Say("started worker " + spec.id + " (pid " + std::to_string(handle->pid) + ")");
    p.worker_id = spec.id;
    workers_[spec.id] = Worker{spec, *handle};
  }
  if (spawn_failed) {
    last_event_ = now;  // plan again, without those slots; the ones that started wait for it
    return;
  }
  below_since_.reset();
  waiting_reported_have_ = -1;
  if (!notice_kind_.empty() && round_ > 0) {
    ++notice_;
    hooks_.publish(NoticeKindKey(notice_), notice_kind_);
    hooks_.publish(NoticeKey(), std::to_string(notice_));
  }
  notice_kind_.clear();
  if (round_ > 0) ++resets_;
  ++round_;
  for (const PlannedWorker& p : plan.workers) hooks_.publish(AssignKey(round_, p.worker_id), p.AssignmentValue());
  for (const std::string& id : plan.removed) {
    Worker& w = workers_.at(id);
    w.removed = true;
    Say(Describe(w) + " on " + w.spec.host + " removed from the job");
  }
  // Every running worker not in the round is told so, also one removed earlier that has not
  // re-initialised yet: it reads only the latest round, and must not wait in it for nothing.
  for (const auto& [id, w] : workers_) {
    if (w.running && w.removed) hooks_.publish(AssignKey(round_, id), "removed");
  }
  hooks_.publish(RoundSizeKey(round_), std::to_string(plan.workers.size()));
  hooks_.publish(RoundKey(), std::to_string(round_));
  std::vector<std::string> host_names;
  for (const PlannedWorker& p : plan.workers) {
    Worker& w = workers_.at(p.worker_id);
    w.round = round_;
    w.rank = p.rank;
    w.assignment = p.AssignmentValue();
    if (std::find(host_names.begin(), host_names.end(), p.host) == host_names.end()) host_names.push_back(p.host);
  }
  std::string hosts_text;
  for (const std::string& h : host_names) hosts_text += (hosts_text.empty() ? "" : ", ") + h;
  std::string reset_text;
  if (round_ > 1) {
    reset_text = " (reset " + std::to_string(resets_) +
                 (c.reset_limit >= 0 ? " of limit " + std::to_string(c.reset_limit) : "") + ")";
  }
  Say("round " + std::to_string(round_) + ": " + std::to_string(plan.workers.size()) + " worker" +
      (plan.workers.size() == 1 ? "" : "s") + " on " + hosts_text + reset_text);
  round_wanted_ = false;
}

void ElasticDriver::CheckDone() {
  for (const auto& [id, w] : workers_) {
    if (w.round == round_ && !w.removed && !w.succeeded) return;
  }
  if (options_.verbose) Say("every worker of round " + std::to_string(round_) + " exited 0");
  exit_code_ = 0;
  // Left: removed workers on their way out, and workers that never got a round.
  StopAll(SIGTERM, options_.failure_grace, Clock::now());
}

void ElasticDriver::Fatal(const std::string& message, int exit_code, Clock::time_point now) {
  Say(message);
  exit_code_ = exit_code;
  StopAll(SIGTERM, options_.failure_grace, now);
}

void ElasticDriver::StopAll(int sig, std::chrono::milliseconds grace, Clock::time_point now) {
  stopping_ = true;
  kill_deadline_ = now + grace;
  for (const auto& [id, w] : workers_) {
    if (w.running) Signal(w, sig);
  }
}

void ElasticDriver::Signal(const Worker& w, int sig) {
  if (w.handle.signal) {
    w.handle.signal(sig);
  } else {
    ::kill(-w.handle.pid, sig);
  }
}

void ElasticDriver::OnSignal(int sig, Clock::time_point now) {
  if (stopping_) {
    if (!killed_) {
      console::Message("received " + SignalName(sig) + " again; killing every worker");
      for (const auto& [id, w] : workers_) {
        if (w.running) Signal(w, SIGKILL);
      }
      killed_ = true;
    }
    return;
  }
  console::Message("received " + SignalName(sig) + "; forwarding it to " + std::to_string(RunningCount()) +
                   " worker(s)");
  exit_code_ = 128 + sig;
  StopAll(sig, options_.signal_grace, now);
}

int ElasticDriver::RunningCount() const {
  int n = 0;
  for (const auto& [id, w] : workers_) n += w.running ? 1 : 0;
  return n;
}

}  // namespace dadtrun
}  // namespace dadt
