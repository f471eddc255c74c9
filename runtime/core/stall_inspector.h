// StallInspector: notices tensors that some ranks submitted and others never did.
//
// A rank that skips a collective (or runs them in another order) leaves the others waiting
// forever, because negotiation waits for every rank. The coordinator (rank 0) owns one inspector
// and hands it, from time to time, a view of its pending table; the inspector decides whether to
// warn or to shut the job down, and says when it next needs a look.
//
// Protocol:
//  1. When a tensor name first becomes pending, the coordinator calls OnPending(now): O(1), it
//     only pulls next_check() earlier if needed.
//  2. When now >= next_check(), the coordinator calls Check() with every tensor that is pending
//     and not ready (submitted by some ranks, missing from others that have not called join()).
//  3. Check() reports the tensors pending for at least warning_time (each one again every
//     warning_time while it stays stalled) and, when shutdown_time > 0, asks for a shutdown once
//     any tensor has been pending for shutdown_time. It then sets next_check() to the earliest
//     moment a later call could report something new, or to max() when nothing is pending.
//     Tensors are listed with the most submitters first: the ranks missing those are the likely
//     culprits (a skipped collective), the ranks missing the others usually their victims.
// So a job that is not stalled pays one scan of its pending table per warning_time at most, and
// an idle job none: the coordinator's loop only wakes at next_check().
//
// The response cache does not hide anything here: the coordinator resolves every cached ref back
// to a named request before it enters the pending table, so the view always has names and ranks.
//
//   StallInspector inspector(*StallOptions::FromEnv(), /*size=*/4);
//   inspector.OnPending(now);
//   if (now >= inspector.next_check()) { StallReport r = inspector.Check(view, now); ... }
//
// Not thread-safe: owned by the coordinator on rank 0's loop thread.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace core {

struct StallOptions {
  bool enabled = true;                                 // DADT_STALL_CHECK_DISABLE turns it off
  std::chrono::milliseconds warning_time{60 * 1000};   // DADT_STALL_CHECK_TIME_SECONDS
  std::chrono::milliseconds shutdown_time{0};          // DADT_STALL_SHUTDOWN_TIME_SECONDS; 0 = never

  // Reads the three variables (seconds may be fractional); junk is InvalidArgument naming it.
  static StatusOr<StallOptions> FromEnv();
};

// One pending, not-ready tensor as the coordinator sees it.
struct PendingTensor {
  std::string name;
  std::string op;                // "allreduce", ...
  std::chrono::steady_clock::time_point first_seen;  // when the first rank submitted it
  std::vector<int> submitted;    // ranks that submitted it
  std::vector<int> missing;      // ranks that did not, excluding ranks that called join()
};

struct StallReport {
  std::string warning;   // non-empty: log it on every rank
  std::string shutdown;  // non-empty: end the job with this error on every rank
};

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StallInspector(const StallOptions& options);

  const StallOptions& options() const { return options_; }
  Clock::time_point next_check() const { return next_check_; }
  void OnPending(Clock::time_point now);
  StallReport Check(const std::vector<PendingTensor>& pending, Clock::time_point now);

 private:
  StallOptions options_;
  Clock::time_point next_check_ = Clock::time_point::max();
  // Stalled tensors already reported, and when: each is reported again after warning_time.
  std::unordered_map<std::string, Clock::time_point> warned_;
};

}  // namespace core
}  // namespace dadt
