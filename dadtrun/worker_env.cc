#include "dadtrun/worker_env.h"

#include <cerrno>
#include <fcntl.h>
#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <utility>
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
  for (const auto& kv : config.liveness_env) env[kv.first] = kv.second;

  env[env::kTorchRank] = rank_s;
  env[env::kTorchWorldSize] = size;
  env[env::kTorchLocalRank] = std::to_string(place.local_rank);
  env[env::kTorchLocalWorldSize] = std::to_string(place.local_size);
  env[env::kTorchMasterAddr] = endpoints.master_addr;
  env[env::kTorchMasterPort] = std::to_string(endpoints.master_port);
  env[kTorchGroupRank] = std::to_string(place.host_index);
  env[kTorchGroupWorldSize] = std::to_string(
      config.hosts.empty() ? 1 : std::max<size_t>(1, UsedHosts(config.hosts, config.num_proc).size()));
  env[kTorchRoleRank] = rank_s;
  env[kTorchRoleWorldSize] = size;
  if (config.network_interface) {
    // torch.distributed's Gloo and NCCL pick their own interface otherwise (often loopback, from
    // the host name), which other hosts cannot reach.
    for (const char* name : {kGlooSocketIfname, kNcclSocketIfname}) {
      if (env.find(name) == env.end()) env[name] = *config.network_interface;
    }
  }

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
  } else if (env::LookupIn(env, env::kStartTimeout).empty()) {  // nor HOROVOD_START_TIMEOUT
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

namespace {

// An Open MPI variable as an int; `*out` is untouched and the result OK when it is not set.
Status MpiInt(const EnvMap& env, const char* name, int* out) {
  auto it = env.find(name);
  if (it == env.end()) return Status::OK();
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || errno != 0 || v < 0 || v > (1 << 30)) {
    return InvalidArgument(std::string(name) + " is not a non-negative integer: '" + it->second +
                           "' (set by mpirun)");
  }
  *out = static_cast<int>(v);
  return Status::OK();
}

}  // namespace

StatusOr<EnvMap> TorchEnvFromMpi(const EnvMap& env) {
  EnvMap out;
  if (env.find("OMPI_COMM_WORLD_RANK") == env.end()) return out;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  const std::pair<const char*, int*> fields[] = {{"OMPI_COMM_WORLD_RANK", &rank},
                                                  {"OMPI_COMM_WORLD_SIZE", &size},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", &local_rank},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", &local_size}};
  for (const auto& [name, field] : fields) {
    Status s = MpiInt(env, name, field);
    if (!s.ok()) return s;
  }
  out[env::kTorchRank] = std::to_string(rank);
  out[env::kTorchWorldSize] = std::to_string(size);
  out[env::kTorchLocalRank] = std::to_string(local_rank);
  out[env::kTorchLocalWorldSize] = std::to_string(local_size);
  out[kTorchRoleRank] = std::to_string(rank);
  out[kTorchRoleWorldSize] = std::to_string(size);
  // dadtrun's plan: the host index of every rank. Use it only where mpirun followed it.
  auto plan_it = env.find(kMpiHostOfRank);
  if (plan_it == env.end()) return out;
  std::vector<int> plan;
  std::istringstream in(plan_it->second);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0) return out;
    plan.push_back(static_cast<int>(v));
  }
  if (static_cast<int>(plan.size()) != size || rank >= size) return out;
  int planned_local_rank = 0, planned_local_size = 0, hosts = 0;
  for (int r = 0; r < size; ++r) {
    hosts = std::max(hosts, plan[r] + 1);
    if (plan[r] != plan[rank]) continue;
    ++planned_local_size;
    if (r < rank) ++planned_local_rank;
  }
  if (planned_local_rank != local_rank || planned_local_size != local_size) return out;
  out[kTorchGroupRank] = std::to_string(plan[rank]);
  out[kTorchGroupWorldSize] = std::to_string(hosts);
  return out;
}

StatusOr<std::string> LaunchAddress(const LaunchConfig& config,
                                    const std::vector<std::string>& remote_hosts) {
  if (remote_hosts.empty()) return std::string("127.0.0.1");
  if (config.network_interface) {
    StatusOr<std::string> addr = net::InterfaceAddress(*config.network_interface);
    if (!addr.ok()) return InvalidArgument("--network-interface: " + addr.status().message());
    return addr;
  }
  StatusOr<std::string> addr = net::RouteSourceAddress(remote_hosts.front());
  if (!addr.ok()) {
    return InvalidArgument("cannot choose an address for the rendezvous server (" +
                           addr.status().message() + "); pass --network-interface IFACE");
  }
  return addr;
}

std::string MasterAddress(const LaunchConfig& config, const std::string& local_hostname,
                          const std::string& launch_addr) {
  if (config.hosts.empty()) return launch_addr;
  const std::string rank0_host = PlaceRanks(config.hosts, config.num_proc).front().host;
  return IsLocalHost(rank0_host, local_hostname) ? launch_addr : rank0_host;
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

StatusOr<JobRendezvous> StartJobRendezvous(const LaunchConfig& config, const std::string& local_hostname,
                                           const std::string& bind_addr, bool torch_master) {
  JobRendezvous job;
  DADT_ASSIGN_OR_RETURN(job.endpoints.secret, GenerateSecret());
  StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::Start(bind_addr, job.endpoints.secret);
  if (!server.ok()) return server.status();
  job.server = std::move(*server);
  job.endpoints.hostname = local_hostname;
  job.endpoints.rendezvous_addr = bind_addr;
  job.endpoints.rendezvous_port = job.server->port();
  if (torch_master) {
    DADT_ASSIGN_OR_RETURN(job.endpoints.master_port, FindFreePort(bind_addr));
    job.endpoints.master_addr = MasterAddress(config, local_hostname, bind_addr);
  }
  return job;
}

}  // namespace dadtrun
}  // namespace dadt
