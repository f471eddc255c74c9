// Supervisor with real processes (started by SpawnLocalRank) and short grace periods.
#include "dadtrun/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "dadtrun/local_spawner.h"

namespace dadt {
namespace dadtrun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sigset_t ignored;
    BlockLauncherSignals(&ignored);
    sigemptyset(&rank_mask_);  // ranks must be able to receive SIGTERM
  }

  RankProcess Start(int rank, const std::string& script) {
    SpawnRequest req;
    req.rank = rank;
    req.command = {"sh", "-c", script};
    req.env = {"PATH=/usr/bin:/bin"};
    req.child_sigmask = rank_mask_;
    int exec_errno = 0;
    StatusOr<SpawnedRank> r = SpawnLocalRank(req, &exec_errno);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    ::close(r->stdout_fd);
    ::close(r->stderr_fd);
    return {rank, r->pid};
  }

  static bool Gone(pid_t pid) { return ::kill(pid, 0) != 0; }

  static SupervisorOptions Fast() {
    SupervisorOptions o;
    // Long enough that finishing well before it proves SIGTERM (not SIGKILL) ended a rank.
    o.failure_grace = milliseconds(1000);
    o.signal_grace = milliseconds(1000);
    return o;
  }

  sigset_t rank_mask_;
};

TEST_F(SupervisorTest, AllRanksSucceed) {
  Supervisor s({Start(0, "exit 0"), Start(1, "sleep 0.1")}, Fast());
  EXPECT_EQ(s.Run(), 0);
}

TEST_F(SupervisorTest, FirstFailureDecidesTheCodeAndStopsTheOthers) {
  RankProcess sleeper = Start(0, "exec sleep 100");
  RankProcess failer = Start(1, "sleep 0.1; exit 3");
  auto start = Clock::now();
  Supervisor s({sleeper, failer}, Fast());
  EXPECT_EQ(s.Run(), 3);
  EXPECT_LT(Clock::now() - start, milliseconds(900));
  EXPECT_TRUE(Gone(sleeper.pid));  // reaped by Run()
}

TEST_F(SupervisorTest, DeathBySignalIs128PlusSignal) {
  Supervisor s({Start(0, "kill -9 $$"), Start(1, "exec sleep 100")}, Fast());
  EXPECT_EQ(s.Run(), 128 + SIGKILL);
}

TEST_F(SupervisorTest, RankIgnoringSigtermIsKilledAfterTheGrace) {
  RankProcess stubborn = Start(0, "trap '' TERM; while :; do sleep 0.05; done");
  RankProcess failer = Start(1, "sleep 0.2; exit 1");
  auto start = Clock::now();
  Supervisor s({stubborn, failer}, Fast());
  EXPECT_EQ(s.Run(), 1);
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, milliseconds(1150));  // 200 ms before the failure + 1000 ms grace
  EXPECT_LT(elapsed, milliseconds(3000));
}

TEST_F(SupervisorTest, ForwardsSigtermToEveryRank) {
  RankProcess a = Start(0, "exec sleep 100");
  RankProcess b = Start(1, "exec sleep 100");
  std::thread sender([] {
    std::this_thread::sleep_for(milliseconds(100));
    ::kill(::getpid(), SIGTERM);  // blocked everywhere: only Run() takes it
  });
  auto start = Clock::now();
  Supervisor s({a, b}, Fast());
  EXPECT_EQ(s.Run(), 128 + SIGTERM);
  sender.join();
  EXPECT_LT(Clock::now() - start, milliseconds(900));
}

TEST_F(SupervisorTest, ChildrenLeftByAFinishedRankAreKilled) {
  // The rank exits 0 at once, leaving a background child in its process group.
  std::string pidfile = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                        "/supervisor_bg_" + std::to_string(::getpid());
  RankProcess r = Start(0, "sleep 100 & echo $! > " + pidfile + "; exit 0");
  Supervisor s({r}, Fast());
  EXPECT_EQ(s.Run(), 0);
  FILE* f = std::fopen(pidfile.c_str(), "r");
  ASSERT_NE(f, nullptr);
  int bg = 0;
  ASSERT_EQ(std::fscanf(f, "%d", &bg), 1);
  std::fclose(f);
  // Killed; it is not our child, so it may linger briefly as a zombie of init.
  bool dead = false;
  for (int i = 0; i < 200 && !dead; ++i) {
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/stat", bg);
    FILE* st = std::fopen(path, "r");
    if (st == nullptr) {
      dead = true;
      break;
    }
    char state = '?';
    int ignored_pid;
    char comm[256];
    if (std::fscanf(st, "%d %255s %c", &ignored_pid, comm, &state) == 3 && state == 'Z') dead = true;
    std::fclose(st);
    if (!dead) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(dead);
}

TEST_F(SupervisorTest, RequestStopEndsTheJobWithTheGivenCode) {
  Supervisor s({Start(0, "exec sleep 100")}, Fast());
  s.RequestStop(127);
  auto start = Clock::now();
  EXPECT_EQ(s.Run(), 127);
  EXPECT_LT(Clock::now() - start, milliseconds(900));
}

TEST(SignalNameTest, Names) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
}

TEST_F(SupervisorTest, RanksWithASignalHookAreSignalledThroughIt) {
  // A remote rank: the supervisor must not signal the local process group, only call the hook.
  RankProcess remote = Start(0, "trap '' TERM INT; while :; do sleep 0.05; done");
  std::vector<int> hooked;
  const pid_t pid = remote.pid;
  remote.host = "h2";
  remote.signal = [&hooked, pid](int sig) {
    hooked.push_back(sig);
    if (sig == SIGKILL) ::kill(-pid, SIGKILL);  // what dadtrun's hook does to the ssh process
  };
  RankProcess failer = Start(1, "sleep 0.1; exit 2");
  Supervisor s({remote, failer}, Fast());
  EXPECT_EQ(s.Run(), 2);
  EXPECT_EQ(hooked, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_TRUE(Gone(pid));
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
