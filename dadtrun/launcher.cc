#include "dadtrun/launcher.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "dadtrun/console.h"
#include "dadtrun/elastic_launch.h"
#include "dadtrun/local_spawner.h"
#include "dadtrun/mpi_spawner.h"
#include "dadtrun/output_mux.h"
#include "dadtrun/rank_site.h"
#include "dadtrun/rendezvous_server.h"
#include "dadtrun/slurm.h"
#include "dadtrun/srun_spawner.h"
#include "dadtrun/ssh_spawner.h"
#include "dadtrun/supervisor.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {
namespace {

std::string JoinCommand(const std::vector<std::string>& command) {
  std::string s;
  for (const std::string& a : command) s += (s.empty() ? "" : " ") + a;
  return s;
}

int Fail(const Status& s) {
  console::Message(s.message());
  return 1;
}

// Exit code for a launch refused because of what the user asked for (a host that cannot be
// reached, an interface that does not exist, -x of an unset variable): like a bad flag.
int Refuse(const Status& s) {
  console::Message(s.message());
  return 2;
}

std::string JoinHosts(const std::vector<std::string>& hosts) {
  std::string s;
  for (const std::string& h : hosts) s += (s.empty() ? "" : ", ") + h;
  return s;
}

// Inside a Slurm allocation with no -H/--hostfile: the allocation's hosts, ranks through srun (or
// mpirun inside the allocation with --mpi). Sets *handled when it launched or refused.
int LaunchInAllocation(LaunchConfig config, bool* handled) {
  const EnvMap env = CurrentEnvironment();
  *handled = false;
  if (config.hosts_given || !InSlurmAllocation(env)) return 0;
  *handled = true;
  const std::string job = env.at("SLURM_JOB_ID");
  StatusOr<std::optional<SlurmTask>> task = StepTask(env);
  // In a step's task the SLURM_* variables describe the step, not the allocation, and a step of
  // several tasks would run one dadtrun per task.
  if (task.ok() && task->has_value()) {
    return Refuse(InvalidArgument(
        "dadtrun is task " + std::to_string((*task)->rank) + " of Slurm step " + (*task)->step +
        ", which has " + std::to_string((*task)->size) + " task(s); run dadtrun in the allocation "
        "itself (the salloc shell or the sbatch script), where it starts the ranks as one srun "
        "step, or give the hosts with -H/--hostfile"));
  }
  StatusOr<std::vector<HostSlots>> hosts = AllocationHosts(env);
  if (!hosts.ok()) return Refuse(hosts.status());
  const int slots = TotalSlots(*hosts);
  if (config.num_proc > slots) {
    std::string list;
    for (const HostSlots& h : *hosts) {
      list += (list.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
    }
    return Refuse(InvalidArgument(
        "-np " + std::to_string(config.num_proc) + " is more than the " + std::to_string(slots) +
        " task slots of Slurm job " + job + " (" + list + "); lower -np, or ask salloc/sbatch for "
        "more (-N, --ntasks-per-node)"));
  }
  config.hosts = *hosts;
  if (config.controller == "mpi") {
    console::Message("--mpi in Slurm job " + job + ": mpirun inside the allocation starts the "
                     "ranks (Open MPI starts its daemons with srun; no ssh)");
    return LaunchWithMpirun(config);
  }
  if (config.verbose && config.controller == "auto") {
    console::Message("in Slurm job " + job + ": starting the ranks with srun, Gloo controller "
                     "(--mpi for mpirun inside the allocation)");
  }
  config.controller = "gloo";
  return LaunchWithSrun(config);
}

}  // namespace

int Launch(const LaunchConfig& requested) {
  // Elastic jobs have their own driver (elastic_launch.h); they run on Gloo, outside Slurm's srun.
  if (requested.elastic.enabled) return LaunchElastic(requested);
  bool in_allocation = false;
  const int allocation_code = LaunchInAllocation(requested, &in_allocation);
  if (in_allocation) return allocation_code;
  LaunchConfig config = requested;
  config.controller = ResolveController(requested.controller);
  if (config.controller == "mpi") return LaunchWithMpirun(config);
  const std::string local_hostname = LocalHostname();
  const std::vector<RankPlacement> placements = PlaceRanks(config.hosts, config.num_proc);
  std::vector<std::string> remote_hosts;
  for (const HostSlots& h : UsedHosts(config.hosts, config.num_proc)) {
    if (!IsLocalHost(h.host, local_hostname)) remote_hosts.push_back(h.host);
  }
  const EnvMap user_env = CurrentEnvironment();
  Status env_ok = CheckForwardedEnv(config, user_env);
  if (!env_ok.ok()) return Refuse(env_ok);
  const RankSite where = RankSiteFor(config, local_hostname, user_env);
  const SshOptions& ssh = where.ssh;
  const int64_t start_timeout =
      config.start_timeout_seconds.value_or(env::kDefaultStartTimeoutSeconds);
  if (!remote_hosts.empty()) {
    // Every host at once, before anything starts: all unreachable ones are named together.
    console::Message("checking " + std::to_string(remote_hosts.size()) + " host(s) over ssh: " +
                     JoinHosts(remote_hosts));
    Status reached = CheckHostsReachable(remote_hosts, ssh, std::chrono::seconds(start_timeout));
    if (!reached.ok()) return Refuse(reached);
    console::Message("hosts reached: " + std::to_string(remote_hosts.size()) + "/" +
                     std::to_string(remote_hosts.size()));
  }
  // Where the rendezvous server listens (loopback when every rank is here).
  StatusOr<std::string> bind_addr = LaunchAddress(config, remote_hosts);
  if (!bind_addr.ok()) return Refuse(bind_addr.status());

  // Before any thread exists, so every thread inherits the mask and Supervisor::Run can take the
  // signals with sigtimedwait; broken pipes become EPIPE instead of killing dadtrun.
  sigset_t original_mask;
  BlockLauncherSignals(&original_mask);
  std::signal(SIGPIPE, SIG_IGN);
  auto verbose = [&config](const std::string& text) {
    if (config.verbose) console::Message(text);
  };

  StatusOr<JobRendezvous> meeting = StartJobRendezvous(config, local_hostname, *bind_addr, /*torch_master=*/true);
  if (!meeting.ok()) return Fail(meeting.status());
  RendezvousServer* server = meeting->server.get();
  const JobEndpoints& endpoints = meeting->endpoints;
  verbose("rendezvous server listening on " + *bind_addr + ":" + std::to_string(server->port()));

  OutputMux::Options mux_options;
  mux_options.output_dir = config.output_dir;
  StatusOr<std::unique_ptr<OutputMux>> mux = OutputMux::Create(mux_options, config.num_proc);
  if (!mux.ok()) return Fail(mux.status());

  // Ranks start with dadtrun's original mask, except that the signals dadtrun forwards are never
  // blocked in them (an inherited block would turn every stop into a SIGKILL after the grace).
  sigset_t rank_mask = original_mask;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigdelset(&rank_mask, sig);
  const bool stdin_is_tty = ::isatty(STDIN_FILENO);
  // Control pipes of the remote ranks, by rank; closed when dadtrun is done. Stable addresses: the
  // supervisor's signal hooks point into it.
  std::vector<int> control_fds(config.num_proc, -1);
  std::vector<RankProcess> ranks;
  Status spawn_error;
  int spawn_exit_code = 0;
  for (int rank = 0; rank < config.num_proc; ++rank) {
    SpawnRequest request;
    request.rank = rank;
    request.command = config.command;
    request.env = ToEnvStrings(WorkerEnvironment(config, endpoints, user_env, rank));
    request.child_sigmask = rank_mask;
    // Only rank 0 reads dadtrun's stdin, and not from a terminal: ranks are not in the terminal's
    // foreground process group, so reading it would stop them.
    request.inherit_stdin = rank == 0 && !stdin_is_tty;
    const std::string& host = placements[rank].host;
    RankProcess process;
    process.rank = rank;
    if (!remote_hosts.empty()) process.host = host;
    int exec_errno = 0;
    StatusOr<SpawnedRank> spawned = StartRank(request, host, where, &control_fds[rank], &process.signal,
                                              &exec_errno);
    if (!spawned.ok()) {
      spawn_error = spawned.status();
      spawn_exit_code = exec_errno == 0 ? 1 : (exec_errno == ENOENT ? 127 : 126);
      break;
    }
    verbose("started rank " + std::to_string(rank) + " on " + host + " (pid " +
            std::to_string(spawned->pid) + "): " + JoinCommand(config.command));
    (*mux)->AddRank(rank, spawned->stdout_fd, spawned->stderr_fd);
    process.pid = spawned->pid;
    ranks.push_back(std::move(process));
  }
  Status started = (*mux)->Start();
  if (!started.ok()) return Fail(started);

  SupervisorOptions options;
  options.verbose = config.verbose;
  bool all_ready_reported = false;
  int ready_reported = 0;
  auto last_progress = std::chrono::steady_clock::now();
  options.on_tick = [&] {
    const int ready = std::min(server->ReadyCount(), config.num_proc);
    if (!remote_hosts.empty() && ready > ready_reported) {
      // Across hosts, show ranks arriving: at most one line a second, and always the last one.
      const auto now = std::chrono::steady_clock::now();
      if (ready == config.num_proc || now - last_progress >= std::chrono::seconds(1)) {
        console::Message("rendezvous: " + std::to_string(ready) + "/" +
                         std::to_string(config.num_proc) + " ranks");
        ready_reported = ready;
        last_progress = now;
      }
    }
    if (config.verbose && !all_ready_reported && ready >= config.num_proc) {
      all_ready_reported = true;
      verbose("all " + std::to_string(config.num_proc) + " ranks reported ready");
    }
  };
  options.cause_of = [&](int rank) {
    const std::string v = server->Peek("cause/" + std::to_string(rank));
    return v.empty() ? -1 : std::atoi(v.c_str());
  };
  options.unresponsive_of = [&](int rank) {
    return server->Peek("unresponsive/" + std::to_string(rank));
  };
  Supervisor supervisor(ranks, options);
  if (!spawn_error.ok()) {
    console::Message(spawn_error.message() + (ranks.empty() ? "" : "; stopping the other ranks"));
    supervisor.RequestStop(spawn_exit_code);
  }
  int exit_code = supervisor.Run();
  options.on_tick();  // ranks that were ready and done within one tick are reported too
  verbose("all ranks exited; dadtrun exits with code " + std::to_string(exit_code));

  // Every rank is reaped and its process group killed, so the pipes reach EOF as soon as their
  // contents are printed. Only a process that left its rank's group (setsid) could hold one open;
  // do not wait for it forever.
  if (!(*mux)->WaitDrained(std::chrono::milliseconds(3000))) {
    verbose("a process outside the ranks' process groups still holds an output pipe; not waiting");
  }
  (*mux)->Stop();
  server->Stop();
  for (int& fd : control_fds) {
    if (fd >= 0) ::close(fd);
  }
  return exit_code;
}

}  // namespace dadtrun
}  // namespace dadt
