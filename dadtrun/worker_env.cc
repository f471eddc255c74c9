#include "dadtrun/worker_env.h"

#include <cerrno>
#include <fcntl.h>
#include <iomanip>
#include <sstream>
#include <unistd.h>

#include "runtime/common/env.h"
#include "runtime/common/net/socket.h"

extern char** environ;

namespace dadt {
namespace dadtrun {

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

bool UserTunesMalloc(const EnvMap& env) {
  if (env.count(env::kMallocMmapThreshold) || env.count(env::kMallocTrimThreshold)) return true;
  auto tunables = env.find(env::kGlibcTunables);
  return tunables != env.end() && tunables->second.find("glibc.malloc.") != std::string::npos;
}

EnvMap WorkerEnvironment(const LaunchConfig& config, const JobEndpoints& endpoints,
                         const EnvMap& user_env, int rank) {
  EnvMap env = user_env;
  const std::string size = std::to_string(config.num_proc);
  const std::string rank_s = std::to_string(rank);
  RankPlacement place;  // a config without hosts (tests) is one host with every rank
  place.rank = rank;
  place.local_rank = rank;
  place.local_size = config.num_proc;
  if (!config.hosts.empty() && TotalSlots(config.hosts) >= config.num_proc) {
    place = PlaceRanks(config.hosts, config.num_proc).at(rank);
  }
  // -x NAME=VALUE applies to every rank; -x NAME forwards what dadtrun has (already in user_env).
  for (const auto& [name, value] : config.forward_env) {
    if (value) env[name] = *value;
  }

  env[env::kRank] = rank_s;
  env[env::kSize] = size;
  env[env::kLocalRank] = std::to_string(place.local_rank);
  env[env::kLocalSize] = std::to_string(place.local_size);
  env[env::kCrossRank] = std::to_string(place.cross_rank);
  env[env::kCrossSize] = std::to_string(place.cross_size);
  env[env::kHostname] = place.host.empty() || IsLocalHost(place.host, endpoints.hostname)
                            ? endpoints.hostname
                            : place.host;
  // dadtrun's own spawner runs Gloo jobs ("auto" resolves to gloo when it gets here).
  env[env::kController] = config.controller == "auto" ? "gloo" : config.controller;
  env[env::kRendezvousAddr] = endpoints.rendezvous_addr;
  env[env::kRendezvousPort] = std::to_string(endpoints.rendezvous_port);
  env[env::kSecret] = endpoints.secret;
  if (config.network_interface) env[env::kIface] = *config.network_interface;
  if (config.timeline_filename) {
    // Absolute, so that a rank that changes directory still writes where the user asked.
    std::string path = *config.timeline_filename;
    if (!path.empty() && path[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof(cwd))) path = std::string(cwd) + "/" + path;
    }
    env[env::kTimeline] = path;
    if (config.timeline_mark_cycles) env[env::kTimelineMarkCycles] = "1";
  }
  for (const auto& kv : config.autotune_env) env[kv.first] = kv.second;
  for (const auto& kv : config.stall_env) env[kv.first] = kv.second;

  env[env::kTorchRank] = rank_s;
  env[env::kTorchWorldSize] = size;
  env[env::kTorchLocalRank] = std::to_string(place.local_rank);
  env[env::kTorchLocalWorldSize] = std::to_string(place.local_size);
  env[env::kTorchMasterAddr] = endpoints.master_addr;
  env[env::kTorchMasterPort] = std::to_string(endpoints.master_port);

  if (config.fusion_threshold_bytes) {
    env[env::kFusionThreshold] = std::to_string(*config.fusion_threshold_bytes);
  }
  if (config.cycle_time_ms) {
    std::ostringstream ms;
    ms << std::setprecision(15) << *config.cycle_time_ms;
    env[env::kCycleTime] = ms.str();
  }
  if (config.cache_capacity) env[env::kCacheCapacity] = std::to_string(*config.cache_capacity);
  if (config.start_timeout_seconds) {
    env[env::kStartTimeout] = std::to_string(*config.start_timeout_seconds);
  } else if (env.find(env::kStartTimeout) == env.end()) {
    env[env::kStartTimeout] = std::to_string(env::kDefaultStartTimeoutSeconds);
  }
  if (config.log_level) env[env::kLogLevel] = *config.log_level;
  if (config.hierarchical_allreduce) env[env::kHierarchicalAllreduce] = "1";

  // Ranks sharing a host would otherwise each start one OpenMP thread per core and thrash.
  if (place.local_size > 1 && env.find(env::kOmpNumThreads) == env.end()) {
    env[env::kOmpNumThreads] = "1";
  }
  if (env.find(env::kPythonUnbuffered) == env.end()) env[env::kPythonUnbuffered] = "1";
  if (!UserTunesMalloc(env)) {
    env[env::kMallocMmapThreshold] = std::to_string(env::kWorkerMmapThresholdBytes);
    env[env::kMallocTrimThreshold] = std::to_string(env::kWorkerTrimThresholdBytes);
  }
  return env;
}

std::vector<std::string> ToEnvStrings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

StatusOr<std::string> GenerateSecret() {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return InternalError("cannot open /dev/urandom: " + net::ErrnoText(errno));
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return InternalError("short read from /dev/urandom");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 0xF]);
  }
  return hex;
}

StatusOr<int> FindFreePort(const std::string& addr) {
  int port = 0;
  StatusOr<int> fd = net::ListenTcp(addr, 0, &port);
  if (!fd.ok()) return fd.status();
  ::close(*fd);
  return port;
}

}  // namespace dadtrun
}  // namespace dadt
