#include "runtime/core/stall_inspector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "runtime/common/env.h"

namespace dadt {
namespace core {
namespace {

// A message names at most this many tensors; a model whose every gradient stalls would otherwise
// print thousands of lines on every rank.
constexpr size_t kMaxTensorsNamed = 20;

// "0-3, 5, 7-8": ranks ascending, runs collapsed, so 1000 missing ranks stay one short line.
std::string RanksString(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    os << (i ? ", " : "") << ranks[i];
    if (j > i) os << "-" << ranks[j];
    i = j + 1;
  }
  return os.str();
}

std::string Seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s",
                std::chrono::duration_cast<std::chrono::duration<double>>(d).count());
  return buf;
}

// "missing rank 1: [a, b]" per rank, then one line per tensor.
std::string Describe(std::vector<const PendingTensor*> tensors, StallInspector::Clock::time_point now) {
  // Most submitters first: a tensor that every rank but one submitted points at that rank (it
  // skipped the tensor), while one submitted by a single rank usually names its victims (the
  // ranks blocked in the skipped tensor). Then oldest first.
  std::sort(tensors.begin(), tensors.end(), [](const PendingTensor* a, const PendingTensor* b) {
    if (a->submitted.size() != b->submitted.size()) return a->submitted.size() > b->submitted.size();
    return a->first_seen != b->first_seen ? a->first_seen < b->first_seen : a->name < b->name;
  });
  const size_t named = std::min(tensors.size(), kMaxTensorsNamed);
  std::map<int, std::vector<std::string>> by_rank;
  for (size_t i = 0; i < named; ++i) {
    for (int r : tensors[i]->missing) by_rank[r].push_back(tensors[i]->name);
  }
  std::ostringstream os;
  for (const auto& [rank, names] : by_rank) {
    os << "\n  missing rank " << rank << ": [";
    for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
    os << "]";
  }
  for (size_t i = 0; i < named; ++i) {
    const PendingTensor& t = *tensors[i];
    os << "\n  tensor '" << t.name << "' (" << t.op << ") waiting " << Seconds(now - t.first_seen)
       << ": submitted by rank(s) " << RanksString(t.submitted) << ", missing rank(s) "
       << RanksString(t.missing);
  }
  if (tensors.size() > named) os << "\n  (" << tensors.size() - named << " more tensors not listed)";
  return os.str();
}

StatusOr<std::chrono::milliseconds> SecondsFromEnv(const char* name, double fallback, bool zero_ok) {
  StatusOr<double> s = env::GetDouble(name, fallback);
  if (!s.ok()) return s.status();
  if (!std::isfinite(*s) || *s < 0 || (*s == 0 && !zero_ok) || *s > 1e9) {
    return InvalidArgument(std::string(env::Source(name)) + "=" + env::GetString(name) +  // or HOROVOD_
                           ": expected a number of seconds " + (zero_ok ? ">= 0 (0 = off)" : "> 0"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(*s * 1000)));
}

}  // namespace

StatusOr<StallOptions> StallOptions::FromEnv() {
  StallOptions o;
  StatusOr<bool> disable = env::GetBool(env::kStallCheckDisable, false);
  if (!disable.ok()) return disable.status();
  o.enabled = !*disable;
  auto warning = SecondsFromEnv(env::kStallCheckTime, env::kDefaultStallCheckTimeSeconds, false);
  if (!warning.ok()) return warning.status();
  auto shutdown = SecondsFromEnv(env::kStallShutdownTime, 0, true);
  if (!shutdown.ok()) return shutdown.status();
  o.warning_time = std::max(*warning, std::chrono::milliseconds(1));
  o.shutdown_time = *shutdown;
  return o;
}

StallInspector::StallInspector(const StallOptions& options) : options_(options) {}

void StallInspector::OnPending(Clock::time_point now) {
  if (!options_.enabled) return;
  auto first = options_.warning_time;
  if (options_.shutdown_time.count() > 0) first = std::min(first, options_.shutdown_time);
  next_check_ = std::min(next_check_, now + first);
}

StallReport StallInspector::Check(const std::vector<PendingTensor>& pending, Clock::time_point now) {
  StallReport report;
  next_check_ = Clock::time_point::max();
  if (!options_.enabled) return report;
  const auto warn_after = options_.warning_time;
  const bool can_shut_down = options_.shutdown_time.count() > 0;
  std::vector<const PendingTensor*> to_warn, to_stop;
  std::unordered_map<std::string, Clock::time_point> still_warned;
  for (const PendingTensor& t : pending) {
    const auto waited = now - t.first_seen;
    if (can_shut_down) {
      if (waited >= options_.shutdown_time) to_stop.push_back(&t);
      next_check_ = std::min(next_check_, t.first_seen + options_.shutdown_time);
    }
    auto w = warned_.find(t.name);
    // Reported before, and since this very tensor has been pending: repeat after warn_after.
    const bool reported = w != warned_.end() && w->second >= t.first_seen;
    Clock::time_point due = reported ? w->second + warn_after : t.first_seen + warn_after;
    if (waited >= warn_after && now >= due) {
      to_warn.push_back(&t);
      still_warned[t.name] = now;
      due = now + warn_after;
    } else if (reported) {
      still_warned[t.name] = w->second;
    }
    next_check_ = std::min(next_check_, due);
  }
  warned_.swap(still_warned);  // forgets tensors that were released meanwhile
  if (!to_stop.empty()) {
    next_check_ = Clock::time_point::max();
    report.shutdown = "stall: shutting down the job: tensors submitted by some ranks have waited more than " +
                      Seconds(options_.shutdown_time) + " (" + env::kStallShutdownTime +
                      ") for the other ranks" + Describe(to_stop, now);
    return report;
  }
  if (!to_warn.empty()) {
    report.warning = "stall: tensors submitted by some ranks have waited more than " +
                     Seconds(warn_after) +
                     " for the other ranks, which have not submitted them. Ranks that run different "
                     "code (a collective skipped or called in another order on some ranks) wait "
                     "here forever; see docs/troubleshooting.md, 'Stalls'." +
                     Describe(to_warn, now);
  }
  if (next_check_ != Clock::time_point::max() && next_check_ <= now) next_check_ = now + warn_after;
  return report;
}

}  // namespace core
}  // namespace dadt
