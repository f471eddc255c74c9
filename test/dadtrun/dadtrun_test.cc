// End-to-end: runs the real dadtrun binary (a data dependency) with small shell commands.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kDadtrun[] = "dadtrun/dadtrun";  // relative to the runfiles root (the test's cwd)

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool WaitForFile(const std::string& path, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (!ReadFile(path).empty()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

// A pid is gone once it does not exist or is a zombie (killed, waiting for init to reap it).
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool EventuallyGone(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

pid_t PidFrom(const std::string& path) {
  EXPECT_TRUE(WaitForFile(path, milliseconds(10000))) << path;
  return static_cast<pid_t>(std::atoi(ReadFile(path).c_str()));
}

struct Result {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

// Runs dadtrun with `args`; `env` entries are set (or unset when the value is empty) in its
// environment; `during` runs while it is running (with its pid). `block_sigterm` starts dadtrun
// with SIGTERM blocked, as a careless parent might.
Result RunDadtrun(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& env = {},
                  const std::function<void(pid_t)>& during = nullptr, bool block_sigterm = false) {
  static int counter = 0;
  const std::string base = TmpDir() + "/run" + std::to_string(counter++);
  const std::string out_path = base + ".out", err_path = base + ".err";
  // --gloo: these tests are about dadtrun's own spawner (without it dadtrun may pick mpirun).
  std::vector<std::string> argv_s = {kDadtrun, "--gloo"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) {
      if (value.empty()) {
        ::unsetenv(name.c_str());
      } else {
        ::setenv(name.c_str(), value.c_str(), 1);
      }
    }
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (block_sigterm) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGTERM);
      ::sigprocmask(SIG_BLOCK, &set, nullptr);
    }
    ::execv(kDadtrun, argv.data());
    ::_exit(99);
  }
  if (during) during(pid);
  Result r;
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (Clock::now() - start > std::chrono::seconds(30)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "dadtrun did not finish within 30 s";
      break;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

int CountLines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(DadtrunTest, BinaryIsThere) { ASSERT_EQ(::access(kDadtrun, X_OK), 0) << kDadtrun; }

TEST(DadtrunTest, ThreeRanksPrintPrefixedLines) {
  Result r = RunDadtrun({"-np", "3", "sh", "-c", "echo hi $DADT_RANK; echo warn $DADT_RANK >&2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_NE(r.out.find("[" + n + "]<stdout>:hi " + n + "\n"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("[" + n + "]<stderr>:warn " + n + "\n"), std::string::npos) << r.err;
  }
  EXPECT_EQ(CountLines(r.out), 3) << r.out;
  EXPECT_EQ(CountLines(r.err), 3) << r.err;
}

TEST(DadtrunTest, WorkerEnvironment) {
  Result r = RunDadtrun({"-np", "2", "--cycle-time-ms", "2.5", "sh", "-c",
                  "echo \"$DADT_RANK $DADT_SIZE $DADT_LOCAL_RANK $DADT_LOCAL_SIZE $DADT_CROSS_RANK "
                  "$DADT_CROSS_SIZE $DADT_CONTROLLER $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
                  "$MASTER_ADDR $OMP_NUM_THREADS $PYTHONUNBUFFERED $DADT_RENDEZVOUS_ADDR "
                  "$DADT_CYCLE_TIME $DADT_FUSION_THRESHOLD ${#DADT_SECRET} "
                  "[$DADT_IFACE] $USER_KEEPS\""},
                 {{"OMP_NUM_THREADS", ""}, {"DADT_IFACE", ""}, {"USER_KEEPS", "kept"},
                  {"DADT_FUSION_THRESHOLD", "1234"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[0]<stdout>:0 2 0 2 0 1 gloo 0 2 0 2 127.0.0.1 1 1 127.0.0.1 2.5 1234 64 [] "
                       "kept\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[1]<stdout>:1 2 1 2 0 1 gloo 1 2 1 2 127.0.0.1 1 1 127.0.0.1 2.5 1234 64 [] "
                       "kept\n"),
            std::string::npos)
      << r.out;
}

TEST(DadtrunTest, PortsAreNumbersAndTheSecretIsNotInAnyArgv) {
  Result r = RunDadtrun({"-np", "2", "sh", "-c",
                  "echo \"ports $DADT_RENDEZVOUS_PORT $MASTER_PORT\"; echo \"secret $DADT_SECRET\"; "
                  "echo \"parent $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"; "
                  "echo \"self $(tr '\\0' ' ' < /proc/$$/cmdline)\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t s = r.out.find("[0]<stdout>:secret ");
  ASSERT_NE(s, std::string::npos) << r.out;
  const std::string secret = r.out.substr(s + 19, 64);
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
  EXPECT_NE(r.out.find("[1]<stdout>:secret " + secret), std::string::npos) << "ranks differ";
  EXPECT_NE(r.out.find("<stdout>:parent dadtrun/dadtrun --gloo -np 2 sh -c"), std::string::npos) << r.out;
  // The secret appears exactly on the two "secret" lines, nowhere in a command line.
  size_t count = 0;
  for (size_t pos = r.out.find(secret); pos != std::string::npos; pos = r.out.find(secret, pos + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 2u) << r.out;
  int rdzv = 0, master = 0;
  const size_t p = r.out.find("[0]<stdout>:ports ");
  ASSERT_NE(p, std::string::npos);
  ASSERT_EQ(std::sscanf(r.out.c_str() + p, "[0]<stdout>:ports %d %d", &rdzv, &master), 2);
  EXPECT_GT(rdzv, 0);
  EXPECT_GT(master, 0);
  EXPECT_NE(rdzv, master);
}

TEST(DadtrunTest, RanksMeetThroughTheRendezvousServer) {
  Result r = RunDadtrun({"-np", "3", "--verbose", "test/dadtrun/rendezvous_rank"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.out.find("[" + std::to_string(rank) + "]<stdout>:rank " + std::to_string(rank) +
                         " of 3 saw 2 peers\n"),
              std::string::npos)
        << r.out;
  }
  EXPECT_NE(r.err.find("dadtrun: all 3 ranks reported ready"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dadtrun: rendezvous server listening on 127.0.0.1:"), std::string::npos);
}

TEST(DadtrunTest, FailingRankStopsTheJobAndNothingIsLeftBehind) {
  const std::string dir = TmpDir() + "/fail";
  ::mkdir(dir.c_str(), 0755);
  // Rank 0 writes both pid files before rank 1 fails (rank 1 waits for the second): the SIGTERM
  // that follows rank 1's exit may come at once.
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then while [ ! -s " + dir + "/bg ]; do sleep 0.01; done; exit 3; fi; "
      "echo $$ > " + dir + "/sh; "
      "sleep 100 & echo $! > " + dir + "/bg.tmp; mv " + dir + "/bg.tmp " + dir + "/bg; wait";
  // Even with SIGTERM blocked in dadtrun's parent, the ranks can receive it: the job ends well
  // inside the 3 s grace, so SIGTERM (not the SIGKILL after it) stopped rank 0.
  Result r = RunDadtrun({"-np", "2", "sh", "-c", script}, {}, nullptr, /*block_sigterm=*/true);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(r.seconds, 2.5);
  EXPECT_NE(r.err.find("dadtrun: rank 1 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") exited with code 3; stopping the other ranks\n"), std::string::npos)
      << r.err;
  EXPECT_TRUE(EventuallyGone(PidFrom(dir + "/sh")));
  EXPECT_TRUE(EventuallyGone(PidFrom(dir + "/bg")));  // the rank's child, via its process group
}

TEST(DadtrunTest, BackgroundChildOfAFinishedRankNeitherHangsNorSurvives) {
  const std::string pidfile = TmpDir() + "/leftover_bg";
  // The background sleep holds the rank's stdout pipe open.
  RunDadtrun({"-np", "1", "true"});  // warm-up so timing below is not the first exec
  Result r = RunDadtrun({"-np", "1", "sh", "-c", "sleep 100 & echo $! > " + pidfile + "; echo done"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 2.5);
  EXPECT_EQ(r.out, "[0]<stdout>:done\n");
  EXPECT_TRUE(EventuallyGone(PidFrom(pidfile)));
}

TEST(DadtrunTest, RankKilledBySignal) {
  const std::string pidfile = TmpDir() + "/sigkill_sleeper";
  Result r = RunDadtrun({"-np", "2", "sh", "-c",
                  "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; echo $$ > " + pidfile +
                      "; exec sleep 100"});
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("rank 1 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  if (!ReadFile(pidfile).empty()) {
    EXPECT_TRUE(EventuallyGone(PidFrom(pidfile)));
  }
}

TEST(DadtrunTest, RankIgnoringSigtermIsKilledAfterTheGrace) {
  const std::string ready = TmpDir() + "/stubborn_ready";
  Result r = RunDadtrun({"-np", "2", "sh", "-c",
                  "if [ \"$RANK\" = 0 ]; then trap '' TERM; echo $$ > " + ready +
                      "; while :; do sleep 1; done; fi; while [ ! -s " + ready +
                      " ]; do sleep 0.01; done; exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_GE(r.seconds, 2.9);  // the 3 s grace
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_TRUE(EventuallyGone(PidFrom(ready)));
}

TEST(DadtrunTest, SigtermToDadtrunStopsEveryRank) {
  const std::string dir = TmpDir() + "/term";
  ::mkdir(dir.c_str(), 0755);
  std::vector<pid_t> ranks;
  Result r = RunDadtrun({"-np", "3", "sh", "-c", "echo $$ > " + dir + "/r$RANK; exec sleep 100"}, {},
                 [&](pid_t dadtrun) {
                   for (int i = 0; i < 3; ++i) ranks.push_back(PidFrom(dir + "/r" + std::to_string(i)));
                   ::kill(dadtrun, SIGTERM);
                 });
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("received SIGTERM"), std::string::npos) << r.err;
  ASSERT_EQ(ranks.size(), 3u);
  for (pid_t pid : ranks) EXPECT_TRUE(EventuallyGone(pid)) << pid;
}

TEST(DadtrunTest, SigkillOfDadtrunTakesTheRanksDown) {
  const std::string dir = TmpDir() + "/pdeath";
  ::mkdir(dir.c_str(), 0755);
  std::vector<pid_t> ranks;
  Result r = RunDadtrun({"-np", "2", "sh", "-c", "echo $$ > " + dir + "/r$RANK; exec sleep 100"}, {},
                 [&](pid_t dadtrun) {
                   for (int i = 0; i < 2; ++i) ranks.push_back(PidFrom(dir + "/r" + std::to_string(i)));
                   ::kill(dadtrun, SIGKILL);
                 });
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  for (pid_t pid : ranks) EXPECT_TRUE(EventuallyGone(pid)) << pid;
}

TEST(DadtrunTest, OutputFilenameWritesPerRankFiles) {
  const std::string dir = TmpDir() + "/outdir/deeper";
  Result r = RunDadtrun({"--output-filename", dir, "-np", "2", "sh", "-c",
                  "echo out $RANK; echo err $RANK >&2; printf tail"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir + "/rank.0/stdout"), "out 0\ntail");
  EXPECT_EQ(ReadFile(dir + "/rank.0/stderr"), "err 0\n");
  EXPECT_EQ(ReadFile(dir + "/rank.1/stdout"), "out 1\ntail");
  EXPECT_EQ(ReadFile(dir + "/rank.1/stderr"), "err 1\n");
  // The terminal copy is still there, and the partial last line is completed.
  EXPECT_NE(r.out.find("[1]<stdout>:tail\n"), std::string::npos) << r.out;
}

TEST(DadtrunTest, AllOutputIsDrainedBeforeExit) {
  Result r = RunDadtrun({"-np", "2", "sh", "-c", "seq 1 20000; seq 1 5000 >&2; exit 0"});
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 200);
  EXPECT_EQ(CountLines(r.out), 40000);
  EXPECT_EQ(CountLines(r.err), 10000);
  EXPECT_NE(r.out.find("[0]<stdout>:20000\n"), std::string::npos);
  EXPECT_NE(r.out.find("[1]<stdout>:20000\n"), std::string::npos);
}

TEST(DadtrunTest, CommandThatCannotBeExecuted) {
  Result r = RunDadtrun({"-np", "2", "no-such-program-dadt", "--flag"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("dadtrun: cannot execute 'no-such-program-dadt': No such file or directory"),
            std::string::npos)
      << r.err;
}

TEST(DadtrunTest, BadFlagsExitWithTwoAndOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--bogus", "-np", "2", "true"},
           {"true"},
           {"-np", "2", "--log-level", "chatty", "true"},
           {"-np", "3", "-H", "localhost:2", "true"}}) {
    Result r = RunDadtrun(args);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("dadtrun: ", 0), 0u) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  // A host that does not resolve: the ssh check names it, in one error line after the progress.
  Result remote = RunDadtrun({"-np", "2", "--start-timeout", "5", "-H", "no-such-host.invalid:2", "true"});
  EXPECT_EQ(remote.exit_code, 2);
  EXPECT_NE(remote.err.find("dadtrun: cannot reach 1 of 1 host(s) over ssh: no-such-host.invalid ("),
            std::string::npos)
      << remote.err;
  EXPECT_TRUE(remote.out.empty());
}

TEST(DadtrunTest, HelpAndVersion) {
  Result help = RunDadtrun({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: dadtrun"), std::string::npos);
  Result version = RunDadtrun({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("dadtrun ", 0), 0u);
}

}  // namespace
