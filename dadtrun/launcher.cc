#include "dadtrun/launcher.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include "dadtrun/console.h"
#include "dadtrun/local_spawner.h"
#include "dadtrun/mpi_spawner.h"
#include "dadtrun/output_mux.h"
#include "dadtrun/rendezvous_server.h"
#include "dadtrun/supervisor.h"
#include "dadtrun/worker_env.h"

namespace dadt {
namespace dadtrun {
namespace {

constexpr char kLoopback[] = "127.0.0.1";

std::string JoinCommand(const std::vector<std::string>& command) {
  std::string s;
  for (const std::string& a : command) s += (s.empty() ? "" : " ") + a;
  return s;
}

int Fail(const Status& s) {
  console::Message(s.message());
  return 1;
}

}  // namespace

int Launch(const LaunchConfig& requested) {
  LaunchConfig config = requested;
  config.controller = ResolveController(requested.controller);
  if (config.controller == "mpi") return LaunchWithMpirun(config);
  // Before any thread exists, so every thread inherits the mask and Supervisor::Run can take the
  // signals with sigtimedwait; broken pipes become EPIPE instead of killing dadtrun.
  sigset_t original_mask;
  BlockLauncherSignals(&original_mask);
  std::signal(SIGPIPE, SIG_IGN);
  auto verbose = [&config](const std::string& text) {
    if (config.verbose) console::Message(text);
  };

  StatusOr<std::string> secret = GenerateSecret();
  if (!secret.ok()) return Fail(secret.status());
  StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::Start(kLoopback, *secret);
  if (!server.ok()) return Fail(server.status());
  verbose("rendezvous server listening on " + std::string(kLoopback) + ":" +
          std::to_string((*server)->port()));
  StatusOr<int> master_port = FindFreePort(kLoopback);
  if (!master_port.ok()) return Fail(master_port.status());

  JobEndpoints endpoints;
  endpoints.hostname = LocalHostname();
  endpoints.rendezvous_addr = kLoopback;
  endpoints.rendezvous_port = (*server)->port();
  endpoints.secret = *secret;
  endpoints.master_addr = kLoopback;
  endpoints.master_port = *master_port;

  OutputMux::Options mux_options;
  mux_options.output_dir = config.output_dir;
  StatusOr<std::unique_ptr<OutputMux>> mux = OutputMux::Create(mux_options, config.num_proc);
  if (!mux.ok()) return Fail(mux.status());

  // Ranks start with dadtrun's original mask, except that the signals dadtrun forwards are never
  // blocked in them (an inherited block would turn every stop into a SIGKILL after the grace).
  sigset_t rank_mask = original_mask;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigdelset(&rank_mask, sig);
  const EnvMap user_env = CurrentEnvironment();
  const bool stdin_is_tty = ::isatty(STDIN_FILENO);
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
    int exec_errno = 0;
    StatusOr<SpawnedRank> spawned = SpawnLocalRank(request, &exec_errno);
    if (!spawned.ok()) {
      spawn_error = spawned.status();
      spawn_exit_code = exec_errno == 0 ? 1 : (exec_errno == ENOENT ? 127 : 126);
      break;
    }
    verbose("started rank " + std::to_string(rank) + " (pid " + std::to_string(spawned->pid) +
            "): " + JoinCommand(config.command));
    (*mux)->AddRank(rank, spawned->stdout_fd, spawned->stderr_fd);
    ranks.push_back({rank, spawned->pid});
  }
  Status started = (*mux)->Start();
  if (!started.ok()) return Fail(started);

  SupervisorOptions options;
  options.verbose = config.verbose;
  bool all_ready_reported = false;
  options.on_tick = [&] {
    if (config.verbose && !all_ready_reported && (*server)->ReadyCount() >= config.num_proc) {
      all_ready_reported = true;
      verbose("all " + std::to_string(config.num_proc) + " ranks reported ready");
    }
  };
  options.cause_of = [&](int rank) {
    const std::string v = (*server)->Peek("cause/" + std::to_string(rank));
    return v.empty() ? -1 : std::atoi(v.c_str());
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
  (*server)->Stop();
  return exit_code;
}

}  // namespace dadtrun
}  // namespace dadt
