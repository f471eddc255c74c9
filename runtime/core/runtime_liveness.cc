// Runtime's side of the liveness watch (liveness_watch.h): starting it, and ending the job when
// it finds a rank silent for the shutdown time. Runs on the caller of Start, then on the watch's
// thread.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/env.h"
#include "runtime/common/logging.h"
#include "runtime/core/runtime.h"

namespace dadt {
namespace core {
namespace {

// Between asking the loop to abort and exiting: long enough for a loop that is not blocked to
// fail every handle and for the framework to print its error, short beside any shutdown time.
constexpr std::chrono::seconds kLivenessExitGrace(2);

// One line appended to DADT_LIVENESS_REPORT (dadtrun --mpi reads it: there is no rendezvous
// server to record the silent rank in). One write() of a short line with O_APPEND: the survivors'
// lines do not interleave.
void AppendReport(const std::string& line) {
  const std::string path = env::GetString(env::kLivenessReport);
  if (path.empty()) return;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = line + "\n";
  ssize_t rc = write(fd, text.data(), text.size());
  (void)rc;
  close(fd);
}

}  // namespace

Status Runtime::StartLiveness() {
  if (options_.size <= 1 || !options_.liveness.enabled()) return Status::OK();
  std::unique_ptr<LivenessWatch> watch;
  auto address = BindAddress(options_);
  if (address.ok()) {
    auto bound = LivenessWatch::Bind(options_.liveness, options_.rank, options_.size, *address);
    if (bound.ok()) {
      watch = std::move(*bound);
    } else {
      DADT_LOG(WARNING) << bound.status().message() << "; no rank watches for unresponsive ranks";
    }
  }
  const size_t n = LivenessWatch::kRecordBytes;
  const std::string mine = watch ? watch->Record() : std::string(n, '\0');
  std::string all(n * static_cast<size_t>(options_.size), '\0');
  DADT_RETURN_IF_ERROR(backend_->Allgatherv(
      mine.data(), &all[0], std::vector<int64_t>(options_.size, static_cast<int64_t>(n))));
  std::vector<std::string> records;
  for (int r = 0; r < options_.size; ++r) {
    records.push_back(all.substr(static_cast<size_t>(r) * n, n));
    if (records.back()[0] == '\0') return Status::OK();  // a rank could not bind: nobody watches
  }
  LivenessWatch::Hooks hooks;
  hooks.in_flight = [this] { return queue_.InFlight(8); };
  hooks.on_end = [this](const std::string& error, int rank, const std::string& host,
                        std::chrono::milliseconds silent) {
    OnPeerUnresponsive(error, rank, host, silent);
  };
  DADT_RETURN_IF_ERROR(watch->Start(records, std::move(hooks)));
  liveness_ = std::move(watch);
  return Status::OK();
}

void Runtime::OnPeerUnresponsive(const std::string& error, int rank, const std::string& host,
                                 std::chrono::milliseconds silent) {
  DADT_LOG(ERROR) << error;
  const std::string what = "rank " + std::to_string(rank) + " on host " + host +
                           " stopped answering: no heartbeat for " + LivenessSeconds(silent);
  // Before any handle fails or this process exits: the launcher must know whom to blame.
  if (store_) {
    // An elastic worker's ranks are the round's: the key is in the round's scope ("elastic/<r>/"),
    // where dadtrun's elastic driver looks for it (dadtrun/elastic_driver.h, UnresponsiveKey).
    const std::string scope = options_.elastic ? options_.store_scope : "";
    (void)store_->Set(scope + "unresponsive/" + std::to_string(rank), what);
    if (rank != options_.rank) (void)store_->Set("cause/" + std::to_string(options_.rank), std::to_string(rank));
  }
  AppendReport(std::to_string(rank) + " " + what);
  {
    std::lock_guard<std::mutex> lock(liveness_mu_);
    liveness_failure_ = Aborted(error);
    liveness_cause_ = rank;
  }
  liveness_failed_ = true;
  queue_.Wake();
  if (options_.elastic) return;  // the launcher stops the silent worker; the job goes on
  // A loop blocked in a collective with the silent rank never returns: do not wait for it.
  std::this_thread::sleep_for(kLivenessExitGrace);
  std::fflush(nullptr);
  _exit(1);
}

}  // namespace core
}  // namespace dadt
