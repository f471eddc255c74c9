// The host discovery script of an elastic job (--host-discovery-script): run it, parse what it
// prints, and keep running it every second on a thread of its own.
//
// The script is a shell command line (run with /bin/sh -c, as Horovod does), in its own process
// group, with stdin from /dev/null and the default signal mask. It prints one usable host per line:
// "host" or "host:slots" ("host" has --slots-per-host slots); blank lines and lines starting with
// '#' are skipped. A run fails when the script exits non-zero, is killed, prints a malformed line,
// or is still running after the time-out (its whole process group is then killed). The error says
// which, with the last line the script wrote on stderr.
//
//   StatusOr<std::vector<HostSlots>> hosts = RunDiscoveryScript("./hosts.sh", 1, std::chrono::seconds(10));
//   DiscoveryPoller poller("./hosts.sh", 1, std::chrono::seconds(10), std::chrono::seconds(1));
//   poller.Start();
//   std::optional<StatusOr<std::vector<HostSlots>>> latest = poller.Take();  // from the loop
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dadtrun/hosts.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

// The script's stdout -> hosts, in order. InvalidArgument naming the line on a bad one.
StatusOr<std::vector<HostSlots>> ParseDiscoveryOutput(const std::string& text, int default_slots);

// One run, at most `timeout` long.
StatusOr<std::vector<HostSlots>> RunDiscoveryScript(const std::string& script, int default_slots,
                                                    std::chrono::milliseconds timeout);

// Runs the script every `interval` (counted from the end of one run to the start of the next) on
// its own thread. Thread-safe: Take() from any thread; Stop() joins (and the destructor calls it).
class DiscoveryPoller {
 public:
  DiscoveryPoller(std::string script, int default_slots, std::chrono::milliseconds timeout,
                  std::chrono::milliseconds interval);
  ~DiscoveryPoller();
  DiscoveryPoller(const DiscoveryPoller&) = delete;
  DiscoveryPoller& operator=(const DiscoveryPoller&) = delete;

  void Start();
  void Stop();
  // The result of the latest run finished since the previous Take(), if any.
  std::optional<StatusOr<std::vector<HostSlots>>> Take();

 private:
  void Loop();

  const std::string script_;
  const int default_slots_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                                      // guarded by mu_
  std::optional<StatusOr<std::vector<HostSlots>>> latest_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace dadtrun
}  // namespace dadt
