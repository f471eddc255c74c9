#include "dadtrun/srun_spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "dadtrun/console.h"
#include "dadtrun/line_relay.h"
#include "dadtrun/rendezvous_server.h"
#include "dadtrun/slurm_task.h"
#include "dadtrun/worker_env.h"
#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {
namespace {

// How long srun may take to end the step after dadtrun passed it a signal.
constexpr auto kStopGrace = std::chrono::seconds(10);

std::string SelfPath() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string("dadtrun");
}

// Copies one of srun's streams to dadtrun's, one line at a time: labelled lines as
// "[rank]<stdout>:text" (dadtrun's own format), srun's own lines as they are (and kept in
// `*srun_lines` for the failure report).
void Pump(int fd, int out_fd, const char* stream, std::vector<std::string>* srun_lines,
          std::mutex* mu) {
  std::string pending;
  char buf[65536];
  auto emit = [&](const std::string& line) {
    int rank = 0;
    std::string text;
    if (ParseSrunLabel(line, &rank, &text)) {
      console::WriteAll(out_fd, "[" + std::to_string(rank) + "]<" + stream + ">:" + text + "\n");
      // slurmstepd writes its "*** STEP ... CANCELLED ***" into a task's stream.
      if (text.rfind("slurmstepd", 0) == 0) {
        std::lock_guard<std::mutex> lock(*mu);
        srun_lines->push_back(text);
      }
      return;
    }
    console::WriteAll(out_fd, line + "\n");
    std::lock_guard<std::mutex> lock(*mu);
    srun_lines->push_back(line);
  };
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (std::string& line : TakeCompleteLines(&pending)) {
      line.pop_back();
      emit(line);
    }
  }
  if (!pending.empty()) emit(pending);
  ::close(fd);
}

}  // namespace

std::string FindSrun() { return env::FindOnPath("srun"); }

std::vector<std::string> SrunCommand(const LaunchConfig& config, const std::string& srun,
                                     const std::string& relay) {
  const size_t nodes = UsedHosts(config.hosts, config.num_proc).size();
  std::vector<std::string> argv = {srun,
                                   "--ntasks=" + std::to_string(config.num_proc),
                                   "--nodes=" + std::to_string(nodes),
                                   "--distribution=arbitrary",
                                   "--kill-on-bad-exit=1",
                                   "--label",
                                   "--input=none",
                                   relay,
                                   kSlurmRankFlag,
                                   "--"};
  argv.insert(argv.end(), config.command.begin(), config.command.end());
  return argv;
}

std::string SrunHostfile(const LaunchConfig& config) {
  std::string text;
  for (const RankPlacement& p : PlaceRanks(config.hosts, config.num_proc)) text += p.host + "\n";
  return text;
}

bool ParseSrunLabel(const std::string& line, int* rank, std::string* text) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  const size_t digits = i;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
  if (i == digits || i - digits > 9 || i >= line.size() || line[i] != ':') return false;
  if (i + 1 < line.size() && line[i + 1] != ' ') return false;
  *rank = std::atoi(line.substr(digits, i - digits).c_str());
  *text = i + 2 <= line.size() ? line.substr(i + 2) : std::string();
  return true;
}

std::string DescribeSrunFailure(const std::vector<std::string>& srun_lines) {
  static const std::regex kCancelled(R"(\*\*\* (STEP|JOB) ([0-9.]+) ON (\S+) CANCELLED)");
  static const std::regex kTask(R"(srun: error: (\S+): tasks? ([0-9]+)(?:-[0-9]+)?: (.*))");
  std::smatch m;
  std::string cancelled;
  for (const std::string& line : srun_lines) {
    if (cancelled.empty() && std::regex_search(line, m, kCancelled)) {
      cancelled = (m[1] == "JOB" ? "job " : "step ") + m[2].str();
    }
  }
  const std::string scheduler =
      "the scheduler ended the " + (cancelled.empty() ? std::string("step") : cancelled) +
      " (scancel, or a time limit); every rank was stopped";
  // scancel: srun says the step was aborted before it reports the tasks that the cancel ended.
  // --kill-on-bad-exit: srun reports the failed task first, then ends (and cancels) the step.
  for (const std::string& line : srun_lines) {
    if (line.find("srun: Job step aborted") != std::string::npos ||
        line.find("srun: forcing job termination") != std::string::npos) {
      return scheduler;
    }
    if (std::regex_search(line, m, kTask)) {
      std::string what = m[3].str();
      if (!what.empty() && what.back() == '.') what.pop_back();
      std::string how = "failed (" + what + ")";
      if (what == "Killed") how = "was killed (SIGKILL)";
      if (what.rfind("Exited with exit code ", 0) == 0) {
        how = "exited with code " + what.substr(std::strlen("Exited with exit code "));
      }
      return "rank " + m[2].str() + " on host " + m[1].str() + " " + how +
             "; srun ended the step (--kill-on-bad-exit) and every rank was stopped";
    }
  }
  return cancelled.empty() ? "" : scheduler;
}

int LaunchWithSrun(const LaunchConfig& config) {
  const std::string srun = FindSrun();
  if (srun.empty()) {
    console::Message("inside a Slurm allocation (SLURM_JOB_ID is set) but srun is not on PATH; "
                     "add Slurm's bin directory to PATH, or give the hosts with -H/--hostfile");
    return 2;
  }
  if (!config.output_dir.empty()) {
    console::Message("--output-filename is not available under Slurm; use srun's own "
                     "--output through sbatch, or run dadtrun outside the allocation");
    return 2;
  }
  const EnvMap user_env = CurrentEnvironment();
  const std::string local_hostname = LocalHostname();
  std::vector<std::string> remote_hosts;
  for (const HostSlots& h : UsedHosts(config.hosts, config.num_proc)) {
    if (!IsLocalHost(h.host, local_hostname)) remote_hosts.push_back(h.host);
  }
  StatusOr<std::string> bind_addr = LaunchAddress(config, remote_hosts);
  if (!bind_addr.ok()) {
    console::Message(bind_addr.status().message());
    return 2;
  }
  StatusOr<JobRendezvous> meeting = StartJobRendezvous(config, local_hostname, *bind_addr, /*torch_master=*/true);
  if (!meeting.ok()) {
    console::Message(meeting.status().message());
    return 1;
  }
  RendezvousServer* server = meeting->server.get();
  const JobEndpoints& endpoints = meeting->endpoints;
  // Rank 0's environment is the job-wide part; the relay on each task overwrites the per-rank names.
  EnvMap env = WorkerEnvironment(config, endpoints, user_env, 0);

  char hostfile[] = "/tmp/dadtrun-slurm-hosts-XXXXXX";
  const int hfd = ::mkstemp(hostfile);
  if (hfd < 0) {
    console::Message(std::string("cannot write srun's host file: ") + std::strerror(errno));
    return 1;
  }
  const std::string hosts_text = SrunHostfile(config);
  console::WriteAll(hfd, hosts_text);
  ::close(hfd);
  env["SLURM_HOSTFILE"] = hostfile;
  const std::vector<std::string> argv = SrunCommand(config, srun, SelfPath());
  if (config.verbose) {
    std::string line;
    for (const std::string& a : argv) line += (line.empty() ? "" : " ") + a;
    console::Message("starting the ranks as one srun step in Slurm job " +
                     (user_env.count("SLURM_JOB_ID") ? user_env.at("SLURM_JOB_ID") : "?") + ": " +
                     line);
  }
  const std::vector<std::string> envs = ToEnvStrings(env);

  sigset_t handled, original;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, sig);
  sigprocmask(SIG_BLOCK, &handled, &original);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    console::Message(std::string("pipe: ") + std::strerror(errno));
    return 1;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    console::Message(std::string("cannot fork srun: ") + std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // dadtrun gone: srun ends the step
    if (::getppid() != parent) ::_exit(1);
    sigprocmask(SIG_SETMASK, &original, nullptr);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    std::vector<char*> cargv, cenv;
    for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const std::string& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    ::execve(argv[0].c_str(), cargv.data(), cenv.data());
    std::fprintf(stderr, "dadtrun: cannot run %s: %s\n", argv[0].c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  std::vector<std::string> srun_lines;
  std::mutex lines_mu;
  std::thread out_thread(Pump, out_pipe[0], STDOUT_FILENO, "stdout", &srun_lines, &lines_mu);
  std::thread err_thread(Pump, err_pipe[0], STDERR_FILENO, "stderr", &srun_lines, &lines_mu);

  int status = 0;
  bool signalled = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() >= stop_deadline) {
      console::Message("srun did not end the step within 10 s of the signal; killing srun");
      ::kill(pid, SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    timespec tick = {0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&handled, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (!signalled) console::Message(std::string("got ") + strsignal(sig) + "; stopping every rank");
      signalled = true;
      ::kill(pid, SIGTERM);  // srun passes it to every task
      if (stop_deadline == std::chrono::steady_clock::time_point::max()) {
        stop_deadline = std::chrono::steady_clock::now() + kStopGrace;
      }
    }
  }
  out_thread.join();
  err_thread.join();
  sigprocmask(SIG_SETMASK, &original, nullptr);
  ::unlink(hostfile);
  server->Stop();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) {
    std::string why = DescribeSrunFailure(srun_lines);
    console::Message((why.empty() ? "srun ended the step" : why) + "; srun exited with code " +
                     std::to_string(code));
  }
  return code;
}

}  // namespace dadtrun
}  // namespace dadt
