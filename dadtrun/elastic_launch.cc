#include "dadtrun/elastic_launch.h"

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <deque>
#include <memory>

#include "dadtrun/console.h"
#include "dadtrun/discovery_script.h"
#include "dadtrun/output_mux.h"
#include "dadtrun/rank_site.h"
#include "dadtrun/rendezvous_server.h"
#include "dadtrun/supervisor.h"
#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {

EnvMap ElasticWorkerEnvironment(const LaunchConfig& config, const JobEndpoints& endpoints, const EnvMap& user_env,
                                const ElasticWorkerSpec& worker) {
  LaunchConfig one = config;  // geometry-free: one rank on one host
  one.num_proc = 1;
  one.hosts.clear();
  one.controller = "gloo";
  EnvMap env = WorkerEnvironment(one, endpoints, user_env, 0);
  for (const char* name : {env::kRank, env::kSize, env::kLocalRank, env::kLocalSize, env::kCrossRank,
                           env::kCrossSize, env::kTorchRank, env::kTorchWorldSize, env::kTorchLocalRank,
                           env::kTorchLocalWorldSize, env::kTorchMasterAddr, env::kTorchMasterPort,
                           kTorchGroupRank, kTorchGroupWorldSize, kTorchRoleRank, kTorchRoleWorldSize}) {
    env.erase(name);
  }
  env[env::kElastic] = "1";
  env[env::kElasticWorkerId] = worker.id;
  env[env::kElasticTimeout] = std::to_string(config.elastic.elastic_timeout_seconds);
  if (!config.elastic.checkpoint_path.empty()) env[env::kElasticCheckpoint] = config.elastic.checkpoint_path;
  env[env::kHostname] = IsLocalHost(worker.host, endpoints.hostname) ? endpoints.hostname : worker.host;
  if (worker.workers_on_host > 1 && user_env.find(env::kOmpNumThreads) == user_env.end()) {
    env[env::kOmpNumThreads] = "1";
  }
  return env;
}

int LaunchElastic(const LaunchConfig& config) {
  const EnvMap user_env = CurrentEnvironment();
  Status env_ok = CheckForwardedEnv(config, user_env);
  if (!env_ok.ok()) {
    console::Message(env_ok.message());
    return 2;
  }
  const ElasticConfig& ec = config.elastic;
  const std::chrono::seconds script_timeout(kDiscoveryScriptTimeoutSeconds);
  std::vector<HostSlots> initial = config.hosts;
  if (!ec.discovery_script.empty()) {
    // The first run decides whether the job can start at all.
    StatusOr<std::vector<HostSlots>> found = RunDiscoveryScript(ec.discovery_script, ec.slots_per_host, script_timeout);
    if (!found.ok()) {
      console::Message(found.status().message() + " on its first run; not starting the job");
      return 1;
    }
    initial = *found;
  }
  const std::string local_hostname = LocalHostname();
  std::vector<std::string> remote_hosts;
  for (const HostSlots& h : initial) {
    if (!IsLocalHost(h.host, local_hostname)) remote_hosts.push_back(h.host);
  }
  // Hosts that join later must reach this address too: with only local hosts at the start it is
  // loopback, unless --network-interface names one (docs/elastic.md).
  StatusOr<std::string> bind_addr = LaunchAddress(config, remote_hosts);
  if (!bind_addr.ok()) {
    console::Message(bind_addr.status().message());
    return 2;
  }
  sigset_t original_mask;
  BlockLauncherSignals(&original_mask);
  std::signal(SIGPIPE, SIG_IGN);
  StatusOr<JobRendezvous> meeting = StartJobRendezvous(config, local_hostname, *bind_addr, /*torch_master=*/false);
  if (!meeting.ok()) {
    console::Message(meeting.status().message());
    return 1;
  }
  RendezvousServer* server = meeting->server.get();
  const JobEndpoints& endpoints = meeting->endpoints;
  if (config.verbose) console::Message("rendezvous server listening on " + *bind_addr + ":" + std::to_string(server->port()));

  sigset_t worker_mask = original_mask;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigdelset(&worker_mask, sig);
  const RankSite where = RankSiteFor(config, local_hostname, user_env);
  std::deque<int> control_fds;  // stable addresses: the signal hooks point into it
  std::vector<std::unique_ptr<OutputMux>> muxes;
  OutputMux::Options mux_options;  // no --output-filename files: refused for elastic jobs in cli

  ElasticDriverHooks hooks;
  const bool loopback_only = *bind_addr == "127.0.0.1";
  hooks.spawn = [&](const ElasticWorkerSpec& spec) -> StatusOr<ElasticWorkerHandle> {
    if (loopback_only && !IsLocalHost(spec.host, local_hostname)) {
      return InvalidArgument("host " + spec.host + " cannot reach the rendezvous server, which listens on "
                             "127.0.0.1 because every first host was this machine; start dadtrun with "
                             "--network-interface IFACE when the discovery script may add other hosts");
    }
    SpawnRequest request;
    request.rank = 0;
    request.command = config.command;
    request.env = ToEnvStrings(ElasticWorkerEnvironment(config, endpoints, user_env, spec));
    request.child_sigmask = worker_mask;
    control_fds.push_back(-1);
    ElasticWorkerHandle handle;
    int exec_errno = 0;
    StatusOr<SpawnedRank> spawned = StartRank(request, spec.host, where, &control_fds.back(), &handle.signal,
                                              &exec_errno);
    if (!spawned.ok()) return spawned.status();
    StatusOr<std::unique_ptr<OutputMux>> mux = OutputMux::Create(mux_options, 0);
    if (!mux.ok()) return mux.status();
    (*mux)->AddRank(0, spawned->stdout_fd, spawned->stderr_fd, spec.id);
    Status started = (*mux)->Start();
    if (!started.ok()) return started;
    muxes.push_back(std::move(*mux));
    handle.pid = spawned->pid;
    return handle;
  };
  hooks.publish = [&server](const std::string& key, const std::string& value) { server->Put(key, value); };
  hooks.peek = [&server](const std::string& key) { return server->Peek(key); };
  std::unique_ptr<DiscoveryPoller> poller;
  if (!ec.discovery_script.empty()) {
    poller = std::make_unique<DiscoveryPoller>(ec.discovery_script, ec.slots_per_host, script_timeout,
                                               std::chrono::seconds(1));
    poller->Start();
    hooks.poll_discovery = [&poller] { return poller->Take(); };
  }
  ElasticDriverOptions options;
  options.config = ec;
  options.initial_hosts = initial;
  options.verbose = config.verbose;
  ElasticDriver driver(options, hooks);
  const int exit_code = driver.Run();
  if (poller) poller->Stop();
  // Every worker is reaped and its process group killed; the pipes end as soon as they are read.
  for (auto& mux : muxes) {
    if (!mux->WaitDrained(std::chrono::milliseconds(3000))) break;
  }
  for (auto& mux : muxes) mux->Stop();
  server->Stop();
  for (int fd : control_fds) {
    if (fd >= 0) ::close(fd);
  }
  if (config.verbose) console::Message("elastic: dadtrun exits with code " + std::to_string(exit_code));
  return exit_code;
}

}  // namespace dadtrun
}  // namespace dadt
