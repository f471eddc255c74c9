#include "dadtrun/mpi_spawner.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <string>
#include <thread>

#include "dadtrun/console.h"
#include "dadtrun/line_relay.h"
#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {
namespace {

// Variables that describe this shell or this launcher process, not the job: never forwarded.
bool Forwardable(const std::string& name) {
  static const char* const kSkip[] = {"_", "PWD", "OLDPWD", "SHLVL", "HOSTNAME", "TERM",
                                      "DISPLAY", "SSH_AUTH_SOCK", "SSH_CLIENT", "SSH_CONNECTION",
                                      "SSH_TTY", "LS_COLORS"};
  for (const char* s : kSkip) {
    if (name == s) return false;
  }
  // mpirun's own variables (OMPI_*, PMIX_*, ...) belong to the launch it makes.
  for (const char* prefix : {"OMPI_", "PMIX_", "PMI_", "BASH_FUNC_", "ORTE_", "OPAL_", "HYDRA_"}) {
    if (name.rfind(prefix, 0) == 0) return false;
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return !name.empty();
}

bool IsExecutable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The interpreter that runs --check-build's probe: the python installed beside dadtrun (pip puts
// both in one bin/), else python3 on PATH.
std::string DefaultPython() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* name : {"/python3", "/python"}) {
      if (IsExecutable(dir + name)) return dir + name;
    }
  }
  return "python3";
}

std::string Mark(bool yes) { return yes ? "    [X] " : "    [ ] "; }

// Where the ranks' liveness check writes the silent rank (DADT_LIVENESS_REPORT): a fresh name in
// TMPDIR (or /tmp) that no rank has written yet.
std::string LivenessReportPath() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
  return dir + "/dadtrun-liveness-" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// The first line a rank wrote there without its leading rank number ("rank 1 on host h stopped
// answering: ..."), or ""; removes the file.
std::string TakeLivenessReport(const std::string& path) {
  std::string line;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[1024];
    if (std::fgets(buf, sizeof(buf), f) != nullptr) line = buf;
    std::fclose(f);
    ::unlink(path.c_str());
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  const size_t space = line.find(' ');
  return space == std::string::npos ? "" : line.substr(space + 1);
}

}  // namespace

bool MpiBuilt() {
#ifdef DADT_BUILT_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::string FindMpirun() { return env::FindOnPath("mpirun"); }

std::string ResolveController(const std::string& requested) {
  if (requested != "auto") return requested;
  return MpiBuilt() && !FindMpirun().empty() ? "mpi" : "gloo";
}

EnvMap MpiWorkerEnvironment(const LaunchConfig& config, const EnvMap& user_env,
                            const std::string& master_addr, int master_port) {
  JobEndpoints none;
  none.hostname = LocalHostname();
  EnvMap env = WorkerEnvironment(config, none, user_env, 0);
  // Per-rank names and the TCP rendezvous do not apply: MPI knows each rank's place, and the
  // relay that starts each rank sets torchrun's per-rank names from Open MPI's (TorchEnvFromMpi).
  for (const char* name : {env::kRank, env::kSize, env::kLocalRank, env::kLocalSize,
                           env::kCrossRank, env::kCrossSize, env::kHostname, env::kRendezvousAddr,
                           env::kRendezvousPort, env::kSecret}) {
    if (user_env.count(name) == 0) env.erase(name);
  }
  for (const char* name : {env::kTorchRank, env::kTorchWorldSize, env::kTorchLocalRank,
                           env::kTorchLocalWorldSize, kTorchGroupRank, kTorchGroupWorldSize,
                           kTorchRoleRank, kTorchRoleWorldSize, env::kTorchMasterAddr,
                           env::kTorchMasterPort}) {
    env.erase(name);
  }
  if (!master_addr.empty()) {
    env[env::kTorchMasterAddr] = master_addr;
    env[env::kTorchMasterPort] = std::to_string(master_port);
  }
  std::string plan;
  if (config.hosts.empty()) {
    for (int r = 0; r < config.num_proc; ++r) plan += r == 0 ? "0" : ",0";
  } else {
    for (const RankPlacement& p : PlaceRanks(config.hosts, config.num_proc)) {
      plan += (plan.empty() ? "" : ",") + std::to_string(p.host_index);
    }
  }
  env[kMpiHostOfRank] = plan;
  env[env::kController] = "mpi";
  return env;
}

StatusOr<std::vector<std::string>> SplitArgs(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        word.push_back(text[++i]);
      } else {
        word.push_back(c);
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word.push_back(text[++i]);
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (quote) return InvalidArgument("--mpi-args has an unterminated " + std::string(1, quote) +
                                    " quote: " + text);
  if (in_word) words.push_back(word);
  return words;
}

StatusOr<std::vector<std::string>> MpirunCommand(const LaunchConfig& config,
                                                 const EnvMap& worker_env,
                                                 const std::string& mpirun, bool is_root,
                                                 int cores, const std::string& relay) {
  std::vector<std::string> argv = {mpirun, "-np", std::to_string(config.num_proc)};
  std::string hosts;
  int local_slots = 0;
  const std::string local = LocalHostname();
  for (const HostSlots& h : config.hosts) {
    hosts += (hosts.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
    if (IsLocalHost(h.host, local)) local_slots += h.slots;
  }
  if (!hosts.empty()) {
    argv.push_back("-H");
    argv.push_back(hosts);
  }
  if (is_root) argv.push_back("--allow-run-as-root");
  // Ranks placed on this machine beyond its cores: mpirun refuses unless told.
  if (local_slots > cores) {
    argv.push_back("--oversubscribe");
  }
  for (const char* a : {"--bind-to", "none", "--map-by", "slot", "--tag-output"}) argv.push_back(a);
  // --network-interface: MPI's out-of-band channel and its TCP transport use that NIC only, as
  // dadtrun's rendezvous and Gloo do.
  if (config.network_interface) {
    for (const char* component : {"oob_tcp_if_include", "btl_tcp_if_include"}) {
      argv.insert(argv.end(), {"--mca", component, *config.network_interface});
    }
  }
  // -p/-i: mpirun starts its daemons over ssh; give its agent the same port and key.
  std::string rsh_args;
  if (config.ssh_port > 0) rsh_args += "-p " + std::to_string(config.ssh_port);
  if (!config.ssh_identity_file.empty()) {
    rsh_args += (rsh_args.empty() ? "" : " ") + std::string("-i ") + config.ssh_identity_file;
  }
  if (!rsh_args.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", rsh_args});
  for (const auto& kv : worker_env) {
    if (!Forwardable(kv.first)) continue;
    argv.push_back("-x");
    argv.push_back(kv.first);
  }
  if (!config.mpi_args.empty()) {
    auto extra = SplitArgs(config.mpi_args);
    if (!extra.ok()) return extra.status();
    argv.insert(argv.end(), extra->begin(), extra->end());
  }
  if (!relay.empty()) argv.insert(argv.end(), {relay, kLineRelayFlag, "--"});
  argv.insert(argv.end(), config.command.begin(), config.command.end());
  return argv;
}

int LaunchWithMpirun(const LaunchConfig& config) {
  if (!config.output_dir.empty()) {  // the ranks' output goes through mpirun, not dadtrun's mux
    console::Message("--output-filename is not available for a launch through mpirun (--mpi, or MPI chosen "
                     "because it is built and mpirun is on PATH); add --gloo, or give mpirun's own "
                     "--output-filename with --mpi-args");
    return 2;
  }
  const std::string mpirun = FindMpirun();
  if (mpirun.empty()) {
    console::Message("--mpi needs Open MPI's mpirun on PATH (Debian: apt-get install openmpi-bin); "
                     "or launch with --gloo");
    return 1;
  }
  if (!MpiBuilt()) {
    console::Message("this dadtrun was built without MPI; launch with --gloo");
    return 1;
  }
  // torchrun's MASTER_ADDR/MASTER_PORT, as dadtrun's own spawners set them: rank 0's host and a
  // port that is free here.
  std::vector<std::string> remote_hosts;
  const std::string local_hostname = LocalHostname();
  for (const HostSlots& h : UsedHosts(config.hosts, config.num_proc)) {
    if (!IsLocalHost(h.host, local_hostname)) remote_hosts.push_back(h.host);
  }
  StatusOr<std::string> launch_addr = LaunchAddress(config, remote_hosts);
  if (!launch_addr.ok()) {
    console::Message(launch_addr.status().message());
    return 2;
  }
  StatusOr<int> master_port = FindFreePort(*launch_addr);
  if (!master_port.ok()) {
    console::Message(master_port.status().message());
    return 1;
  }
  EnvMap env =
      MpiWorkerEnvironment(config, CurrentEnvironment(),
                           MasterAddress(config, local_hostname, *launch_addr), *master_port);
  // Without a rendezvous server, the ranks' liveness check names a silent rank in this file
  // (one host, or a shared /tmp); read after mpirun exits.
  const std::string liveness_report = LivenessReportPath();
  env[env::kLivenessReport] = liveness_report;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string relay = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  auto argv = MpirunCommand(config, env, mpirun, ::geteuid() == 0, cores, relay);
  if (!argv.ok()) {
    console::Message(argv.status().message());
    return 2;
  }
  if (config.verbose) {
    std::string line;
    for (const std::string& a : *argv) line += (line.empty() ? "" : " ") + a;
    console::Message("handing the launch to mpirun: " + line);
  }
  std::vector<std::string> envs = ToEnvStrings(env);

  // Signals to forward arrive by sigwait; block them before forking so none is lost.
  sigset_t forwarded, original;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&forwarded, sig);
  sigprocmask(SIG_BLOCK, &forwarded, &original);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    console::Message(std::string("cannot fork mpirun: ") + std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // dadtrun gone: mpirun (and so every rank) goes too
    if (::getppid() != parent) ::_exit(1);
    sigprocmask(SIG_SETMASK, &original, nullptr);
    std::vector<char*> cargv, cenv;
    for (auto& a : *argv) cargv.push_back(&a[0]);
    cargv.push_back(nullptr);
    for (auto& e : envs) cenv.push_back(&e[0]);
    cenv.push_back(nullptr);
    // Open MPI takes an absolute argv[0] as an implied --prefix and puts that prefix's bin/ first
    // on the ranks' PATH, so `python3` would become /usr/bin/python3 instead of the user's. Run
    // the resolved path under its bare name, as a user typing `mpirun` does.
    const std::string path = (*argv)[0];
    std::string bare = path.substr(path.rfind('/') + 1);
    cargv[0] = &bare[0];
    ::execve(path.c_str(), cargv.data(), cenv.data());
    std::fprintf(stderr, "dadtrun: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (true) {
    int sig = 0;
    sigwait(&forwarded, &sig);
    if (sig != SIGCHLD) {
      ::kill(pid, sig);  // mpirun stops every rank and exits
      continue;
    }
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
  }
  sigprocmask(SIG_SETMASK, &original, nullptr);
  const std::string silent = TakeLivenessReport(liveness_report);
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code != 0 && !silent.empty()) {
      console::Message(silent + "; the other ranks ended the job because of it (mpirun exited "
                       "with code " + std::to_string(code) + ", every rank has been stopped)");
    } else if (code != 0) {
      console::Message("mpirun exited with code " + std::to_string(code) +
                       "; its report above names the rank that failed, and every rank has "
                       "been stopped");
    }
    return code;
  }
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  console::Message("mpirun was killed by signal " + std::to_string(sig) + " (" +
                   strsignal(sig) + ")");
  return 128 + sig;
}

std::string CheckBuildText(const std::string& python_in) {
  const std::string python = python_in.empty() ? DefaultPython() : python_in;
  // One interpreter start: which frameworks import, and what dadt._core was built with.
  const std::string probe =
      "'" + python + "' -c \"import importlib.util as u\n"
      "for m in ('torch','tensorflow','jax'): print('fw', m, int(u.find_spec(m) is not None))\n"
      "try:\n"
      "    from dadt import _core; print('ops', ','.join(_core.built_backends()))\n"
      "except Exception as e: print('ops', '')\n\" 2>/dev/null";
  bool fw[3] = {false, false, false};
  std::string ops;
  bool probed = false;
  if (FILE* p = ::popen(probe.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), p)) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      probed = true;
      if (l.rfind("fw ", 0) == 0) {
        const char* names[3] = {"torch", "tensorflow", "jax"};
        for (int i = 0; i < 3; ++i) {
          if (l == std::string("fw ") + names[i] + " 1") fw[i] = true;
        }
      } else if (l.rfind("ops ", 0) == 0) {
        ops = "," + l.substr(4) + ",";
      }
    }
    ::pclose(p);
  }
  auto has = [&ops](const char* name) { return ops.find(std::string(",") + name + ",") != std::string::npos; };
  const std::string mpirun = FindMpirun();
  std::string out = std::string("dadt v") + kVersion + ":\n\n";
  if (!probed) out += "(could not run " + python + " to look for frameworks)\n\n";
  out += "Available Frameworks:\n";
  out += Mark(fw[0]) + "PyTorch\n" + Mark(fw[1]) + "TensorFlow\n" + Mark(fw[2]) + "JAX\n\n";
  out += "Available Controllers:\n";
  out += Mark(MpiBuilt()) + "MPI" +
         (MpiBuilt() ? (mpirun.empty() ? "  (mpirun not found on PATH)" : "  (" + mpirun + ")")
                     : std::string()) +
         "\n";
  out += Mark(true) + "Gloo\n\n";
  out += "Available Tensor Operations:\n";
  out += Mark(has("nccl")) + "NCCL\n" + Mark(false) + "DDL\n" + Mark(false) + "CCL\n" +
         Mark(has("mpi")) + "MPI\n" + Mark(has("gloo")) + "Gloo\n";
  if (ops.empty()) out += "(tensor operations: dadt._core is not importable by " + python + ")\n";
  return out;
}

}  // namespace dadtrun
}  // namespace dadt
