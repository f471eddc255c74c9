#include "dadtrun/supervisor.h"

#include <cerrno>
#include <cstring>
#include <sys/wait.h>
#include <time.h>

#include "dadtrun/console.h"

namespace dadt {
namespace dadtrun {
namespace {

constexpr std::chrono::milliseconds kTick(100);

}  // namespace

sigset_t LauncherSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  return set;
}

void BlockLauncherSignals(sigset_t* original) {
  sigset_t set = LauncherSignals();
  pthread_sigmask(SIG_BLOCK, &set, original);
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

Supervisor::Supervisor(std::vector<RankProcess> ranks, SupervisorOptions options)
    : options_(std::move(options)) {
  for (const RankProcess& r : ranks) ranks_.push_back({r, true});
}

void Supervisor::RequestStop(int exit_code) {
  if (stopping_) return;
  exit_code_ = exit_code;
  StartStopping(options_.failure_grace);
  SignalAll(SIGTERM);
}

int Supervisor::Run() {
  const sigset_t set = LauncherSignals();
  for (;;) {
    ReapExited();
    if (RunningCount() == 0) break;
    auto now = std::chrono::steady_clock::now();
    if (stopping_ && !killed_ && now >= kill_deadline_) {
      if (options_.verbose) {
        console::Message(std::to_string(RunningCount()) + " rank(s) still running after the " +
                         "grace period; sending SIGKILL");
      }
      SignalAll(SIGKILL);
      killed_ = true;
    }
    if (deferred_.rank >= 0 && now >= deferred_.deadline) {
      const Deferred d = deferred_;
      deferred_ = Deferred{};
      exit_code_ = d.code;
      console::Message(d.what + "; stopping the other ranks");
      StartStopping(options_.failure_grace);
      SignalAll(SIGTERM);
    }
    if (options_.on_tick) options_.on_tick();
    auto wait = kTick;
    if (stopping_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_deadline_ - now);
      if (left < wait) wait = left + std::chrono::milliseconds(1);
    }
    timespec ts{static_cast<time_t>(wait.count() / 1000), static_cast<long>(wait.count() % 1000) * 1000000L};
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) OnSignal(sig);
    // SIGCHLD, timeout or EINTR: loop and reap.
  }
  return exit_code_;
}

void Supervisor::SignalAll(int sig) {
  for (const Tracked& t : ranks_) {
    if (!t.running) continue;
    if (t.process.signal) {
      t.process.signal(sig);
    } else {
      ::kill(-t.process.pid, sig);
    }
  }
}

void Supervisor::ReapExited() {
  for (Tracked& t : ranks_) {
    if (!t.running) continue;
    int status = 0;
    pid_t r = ::waitpid(t.process.pid, &status, WNOHANG);
    if (r == 0) continue;
    if (r < 0 && errno == EINTR) continue;
    t.running = false;
    // Whatever the rank left in its process group dies with it, right away: the group id is only
    // safe to signal while it cannot have been reused, and leftovers would hold its output pipes.
    ::kill(-t.process.pid, SIGKILL);
    if (r < 0) continue;  // ECHILD: not ours any more; nothing to report
    OnExit(t, status);
  }
}

void Supervisor::OnExit(const Tracked& t, int wait_status) {
  const bool signaled = WIFSIGNALED(wait_status);
  const int code = signaled ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  std::string what = "rank " + std::to_string(t.process.rank) +
                     (t.process.host.empty() ? "" : " on host " + t.process.host) +
                     (t.process.signal ? " (ssh pid " : " (pid ") + std::to_string(t.process.pid) + ") ";
  what += signaled ? "was killed by signal " + std::to_string(WTERMSIG(wait_status)) + " (" +
                         SignalName(WTERMSIG(wait_status)) + ")"
                   : "exited with code " + std::to_string(code);
  if (t.process.signal && !signaled) {
    if (code == 255) {
      what += " (ssh failed; its message is above)";
    } else if (code > 128 && code < 128 + 65) {
      what += " (killed by " + SignalName(code - 128) + ")";
    }
  }
  if (deferred_.rank >= 0 && t.process.rank == deferred_.cause) {
    // The rank that caused the deferred failure has exited: blame it if it failed too.
    const Deferred d = deferred_;
    deferred_ = Deferred{};
    if (code != 0) {
      Blame(t, code, what + " (rank " + std::to_string(d.rank) + " failed because of it)");
    } else {
      exit_code_ = d.code;
      console::Message(d.what + (RunningCount() > 0 ? "; stopping the other ranks" : ""));
      StartStopping(options_.failure_grace);
      SignalAll(SIGTERM);
    }
    return;
  }
  if (code == 0 || stopping_) {
    if (options_.verbose) console::Message(what);
    return;
  }
  if (deferred_.rank < 0 && options_.cause_of) {
    const int cause = options_.cause_of(t.process.rank);
    for (const Tracked& c : ranks_) {
      if (c.process.rank == cause && c.running && cause != t.process.rank) {
        const std::string silent = options_.unresponsive_of ? options_.unresponsive_of(cause) : "";
        if (!silent.empty()) {
          // Frozen: SIGTERM would stay pending while it is stopped; nothing of it is worth saving.
          if (c.process.signal) {
            c.process.signal(SIGKILL);
          } else {
            ::kill(-c.process.pid, SIGKILL);
          }
          Blame(c, code, silent + " (pid " + std::to_string(c.process.pid) + "); " + what +
                             " because of it");
          return;
        }
        deferred_ = Deferred{t.process.rank, cause, code, what,
                             std::chrono::steady_clock::now() + options_.cause_wait};
        if (options_.verbose) console::Message(what + "; waiting for rank " + std::to_string(cause) + ", which caused it");
        return;
      }
    }
  }
  if (deferred_.rank >= 0) return;  // already waiting on a cause; that decides
  Blame(t, code, what);
}

void Supervisor::Blame(const Tracked& t, int code, const std::string& what) {
  // The first (root-cause) failure decides the exit code and ends the job.
  exit_code_ = code;
  const int others = RunningCount();
  console::Message(what + (others > 0 ? "; stopping the other ranks" : ""));
  StartStopping(options_.failure_grace);
  SignalAll(SIGTERM);
}

void Supervisor::OnSignal(int sig) {
  if (stopping_) {
    if (!killed_) {
      console::Message("received " + SignalName(sig) + " again; killing every rank");
      SignalAll(SIGKILL);
      killed_ = true;
    }
    return;
  }
  console::Message("received " + SignalName(sig) + "; forwarding it to " +
                   std::to_string(RunningCount()) + " rank(s)");
  exit_code_ = 128 + sig;
  StartStopping(options_.signal_grace);
  SignalAll(sig);
}

void Supervisor::StartStopping(std::chrono::milliseconds grace) {
  stopping_ = true;
  kill_deadline_ = std::chrono::steady_clock::now() + grace;
}

int Supervisor::RunningCount() const {
  int n = 0;
  for (const Tracked& t : ranks_) n += t.running ? 1 : 0;
  return n;
}

}  // namespace dadtrun
}  // namespace dadt
