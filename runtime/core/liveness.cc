#include "runtime/core/liveness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/common/env.h"

namespace dadt {
namespace core {
namespace {

constexpr char kMagic[] = "dadt-hb";

StatusOr<std::chrono::milliseconds> Seconds(const char* name, double fallback) {
  StatusOr<double> s = env::GetDouble(name, fallback);
  if (!s.ok()) return s.status();
  if (!std::isfinite(*s) || *s < 0 || *s > 1e9) {
    return InvalidArgument(std::string(name) + "=" + env::GetString(name) +
                           ": expected a number of seconds >= 0");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(*s * 1000)));
}

}  // namespace

std::chrono::milliseconds LivenessOptions::heartbeat_interval() const {
  return std::clamp(warning_time / 5, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
}

StatusOr<LivenessOptions> LivenessOptions::FromEnv() {
  LivenessOptions o;
  DADT_ASSIGN_OR_RETURN(o.warning_time,
                        Seconds(env::kLivenessTimeout, env::kDefaultLivenessTimeoutSeconds));
  DADT_ASSIGN_OR_RETURN(o.shutdown_time, Seconds(env::kLivenessShutdownTime,
                                                 env::kDefaultLivenessShutdownTimeSeconds));
  if (o.enabled() && o.shutdown_time < o.warning_time) {
    return InvalidArgument(std::string(env::kLivenessShutdownTime) + "=" +
                           env::GetString(env::kLivenessShutdownTime) + " is shorter than " +
                           env::kLivenessTimeout + " (" + LivenessSeconds(o.warning_time) +
                           "): the job would end before any warning");
  }
  return o;
}

LivenessTracker::LivenessTracker(const LivenessOptions& options, const std::vector<int>& watched,
                                 Clock::time_point start)
    : options_(options) {
  for (int r : watched) peers_.push_back(Peer{r, start});
}

void LivenessTracker::OnHeard(int rank, Clock::time_point now) {
  for (Peer& p : peers_) {
    if (p.rank == rank) p.heard = std::max(p.heard, now);
  }
}

void LivenessTracker::Forget(int rank) {
  for (Peer& p : peers_) {
    if (p.rank == rank) p.forgotten = true;
  }
}

std::vector<SilentPeer> LivenessTracker::Silent(Clock::time_point now) const {
  std::vector<SilentPeer> out;
  if (!options_.enabled()) return out;
  for (const Peer& p : peers_) {
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.heard);
    if (!p.forgotten && silent >= options_.warning_time) out.push_back(SilentPeer{p.rank, silent});
  }
  std::sort(out.begin(), out.end(), [](const SilentPeer& a, const SilentPeer& b) {
    return a.silent != b.silent ? a.silent > b.silent : a.rank < b.rank;
  });
  return out;
}

LivenessVerdict LivenessTracker::Decide(const std::vector<SilentPeer>& silent, Clock::time_point now) {
  LivenessVerdict v;
  if (silent.empty()) {
    last_warning_.reset();
    return v;
  }
  for (const SilentPeer& p : silent) v.end = v.end || p.silent >= options_.shutdown_time;
  if (!last_warning_ || now - *last_warning_ >= options_.warning_time) {
    v.warn = true;
    last_warning_ = now;
  }
  return v;
}

std::string EncodeHeartbeat(const Heartbeat& hb) {
  std::ostringstream os;
  os << kMagic << ' ' << hb.token << ' ' << hb.rank << ' ' << hb.seq;
  if (!hb.silent.empty()) {
    os << ' ';
    for (size_t i = 0; i < hb.silent.size(); ++i) {
      os << (i ? "," : "") << hb.silent[i].rank << ':' << hb.silent[i].silent.count();
    }
  }
  if (hb.end) os << " end";
  return os.str();
}

std::optional<Heartbeat> DecodeHeartbeat(const std::string& datagram) {
  std::istringstream is(datagram);
  std::string magic;
  Heartbeat hb;
  if (!(is >> magic >> hb.token >> hb.rank >> hb.seq) || magic != kMagic || hb.rank < 0) {
    return std::nullopt;
  }
  std::string word;
  while (is >> word) {
    if (word == "end") {
      hb.end = true;
      continue;
    }
    std::istringstream list(word);
    std::string item;
    while (std::getline(list, item, ',')) {
      int rank = -1;
      long long ms = -1;
      if (std::sscanf(item.c_str(), "%d:%lld", &rank, &ms) != 2 || rank < 0 || ms < 0) {
        return std::nullopt;
      }
      hb.silent.push_back(SilentPeer{rank, std::chrono::milliseconds(ms)});
    }
  }
  return hb;
}

std::string LivenessSeconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", d.count() / 1000.0);
  return buf;
}

}  // namespace core
}  // namespace dadt
