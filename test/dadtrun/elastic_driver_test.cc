// ElasticDriver with real local processes (sh -c scripts) and an in-test store: the publish order of
// the contract, failures and new rounds, notices and removal, the end rule, the reset limit and the
// elastic time-out. Workers learn the latest round from a file the publish hook writes.
#include "dadtrun/elastic_driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "dadtrun/local_spawner.h"
#include "dadtrun/supervisor.h"

namespace dadt {
namespace dadtrun {
namespace {

using std::chrono::milliseconds;

class ElasticDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sigset_t ignored;
    BlockLauncherSignals(&ignored);
    char dir[] = "/tmp/dadt-elastic-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    options_.failure_grace = milliseconds(1000);
    options_.settle = milliseconds(100);
    hooks_.spawn = [this](const ElasticWorkerSpec& spec) -> StatusOr<ElasticWorkerHandle> {
      if (spec.host == "unreachable") return InvalidArgument("cannot start anything on " + spec.host);
      SpawnRequest req;
      req.command = {"sh", "-c", script_(spec)};
      req.env = {"PATH=/usr/bin:/bin", "R=" + dir_ + "/round"};
      sigemptyset(&req.child_sigmask);
      int exec_errno = 0;
      StatusOr<SpawnedRank> r = SpawnLocalRank(req, &exec_errno);
      if (!r.ok()) return r.status();
      ::close(r->stdout_fd);
      ::close(r->stderr_fd);
      std::lock_guard<std::mutex> lock(mu_);
      spawned_.push_back(spec.id);
      return ElasticWorkerHandle{r->pid, nullptr};
    };
    hooks_.publish = [this](const std::string& key, const std::string& value) {
      std::lock_guard<std::mutex> lock(mu_);
      log_.emplace_back(key, value);
      store_[key] = value;
      if (key == RoundKey()) std::ofstream(dir_ + "/round") << value << "\n";
    };
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  int Run() {
    ElasticDriver driver(options_, hooks_);
    return driver.Run();
  }
  std::string Get(const std::string& key) { return store_.count(key) ? store_[key] : "<unset>"; }
  size_t IndexOf(const std::string& key) {
    for (size_t i = 0; i < log_.size(); ++i) {
      if (log_[i].first == key) return i;
    }
    return log_.size();
  }
  bool Exists(const std::string& name) { return ::access((dir_ + "/" + name).c_str(), F_OK) == 0; }
  // Shell: wait until round N is published.
  static std::string AwaitRound(int n) {
    return "while [ \"$(cat $R 2>/dev/null)\" != " + std::to_string(n) + " ]; do sleep 0.02; done; ";
  }

  std::string dir_;
  ElasticDriverOptions options_;
  ElasticDriverHooks hooks_;
  std::function<std::string(const ElasticWorkerSpec&)> script_;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> log_;
  std::map<std::string, std::string> store_;
  std::vector<std::string> spawned_;
};

TEST_F(ElasticDriverTest, PublishesAssignmentsThenSizeThenRoundAndSucceedsWhenAllExitZero) {
  options_.config.min_np = 2;
  options_.initial_hosts = {{"a", 2}, {"b", 1}};
  script_ = [](const ElasticWorkerSpec& s) { return AwaitRound(1) + (s.host == "b" ? "sleep 0.3; " : "") + "exit 0"; };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(spawned_, (std::vector<std::string>{"a/0/1", "a/1/2", "b/0/3"}));
  EXPECT_EQ(Get(AssignKey(1, "a/0/1")), "0 3 0 2 0 2");
  EXPECT_EQ(Get(AssignKey(1, "a/1/2")), "1 3 1 2 0 1");
  EXPECT_EQ(Get(AssignKey(1, "b/0/3")), "2 3 0 1 1 2");
  EXPECT_EQ(Get(RoundSizeKey(1)), "3");
  EXPECT_EQ(Get(RoundKey()), "1");
  EXPECT_LT(IndexOf(AssignKey(1, "b/0/3")), IndexOf(RoundSizeKey(1)));
  EXPECT_LT(IndexOf(RoundSizeKey(1)), IndexOf(RoundKey()));
  EXPECT_EQ(Get(NoticeKey()), "<unset>");  // the first round is no host update
  EXPECT_LT(IndexOf(RoundKey()), IndexOf(RoundFinishedKey(1)));
}

TEST_F(ElasticDriverTest, FailedWorkerIsLeftOutOfTheNextRound) {
  options_.config.min_np = 2;
  options_.config.max_np = 2;
  options_.initial_hosts = {{"a", 1}, {"b", 1}, {"c", 1}};
  script_ = [](const ElasticWorkerSpec& s) {
    return s.host == "b" ? AwaitRound(1) + "exit 3" : AwaitRound(2) + "exit 0";
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(Get(AssignKey(2, "a/0/1")), "0 2 0 1 0 2");  // the survivor keeps rank 0
  EXPECT_EQ(Get(AssignKey(2, "c/0/3")), "1 2 0 1 1 2");  // a new worker on the free host
  EXPECT_EQ(Get(AssignKey(2, "b/0/2")), "<unset>");      // gone, so neither assigned nor removed
  EXPECT_EQ(Get(NoticeKey()), "<unset>");                // a failure is no host update
}

// A worker that stops itself (SIGSTOP) never exits: once a peer's runtime reports it silent
// (UnresponsiveKey of its round and rank), the driver kills it, counts that as a failure of its
// slot, and the job goes on without it. A report of a rank in an earlier round kills nobody.
TEST_F(ElasticDriverTest, WorkerAPeerReportsSilentIsKilledAndLeftOutOfTheNextRound) {
  options_.config.min_np = 2;
  options_.config.max_np = 2;
  options_.initial_hosts = {{"a", 1}, {"b", 1}, {"c", 1}};
  store_[UnresponsiveKey(0, 1)] = "rank 1 on host b stopped answering: no heartbeat for 9.9 s";
  std::atomic<bool> reported{false};
  hooks_.peek = [&](const std::string& key) -> std::string {
    std::lock_guard<std::mutex> lock(mu_);
    // Once round 1 is out, rank 1 of it (b's worker) is reported, as a survivor would.
    if (!reported && store_.count(RoundKey()) && store_[RoundKey()] == "1") {
      store_[UnresponsiveKey(1, 1)] = "rank 1 on host b stopped answering: no heartbeat for 6.0 s";
      reported = true;
    }
    return store_.count(key) ? store_[key] : "";
  };
  script_ = [](const ElasticWorkerSpec& s) {
    return s.host == "b" ? AwaitRound(1) + "kill -STOP $$; exit 0" : AwaitRound(2) + "exit 0";
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_TRUE(reported);
  EXPECT_EQ(Get(AssignKey(2, "a/0/1")), "0 2 0 1 0 2");  // the survivor keeps rank 0
  EXPECT_EQ(Get(AssignKey(2, "c/0/3")), "1 2 0 1 1 2");  // a new worker on the free host
  // Killed and counted lost at once: never assigned again ("removed" if still being reaped).
  EXPECT_TRUE(Get(AssignKey(2, "b/0/2")) == "<unset>" || Get(AssignKey(2, "b/0/2")) == "removed");
}

TEST_F(ElasticDriverTest, DroppedHostGetsANoticeAndItsRemovedWorkerNeverEndsTheJob) {
  options_.config.min_np = 1;
  options_.initial_hosts = {{"a", 1}, {"b", 1}};
  std::atomic<int> polls{0};
  hooks_.poll_discovery = [&]() -> std::optional<StatusOr<std::vector<HostSlots>>> {
    if (++polls < 5) return std::nullopt;
    return StatusOr<std::vector<HostSlots>>(std::vector<HostSlots>{{"a", 1}});
  };
  script_ = [this](const ElasticWorkerSpec& s) {
    // b exits 0 at once when removed; a must still be running afterwards and finish on its own.
    return s.host == "b" ? AwaitRound(2) + "exit 0" : AwaitRound(2) + "sleep 0.5; touch " + dir_ + "/a_done; exit 0";
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_TRUE(Exists("a_done")) << "the job ended before the last worker of the round finished";
  EXPECT_EQ(Get(AssignKey(2, "b/0/2")), "removed");
  EXPECT_EQ(Get(AssignKey(2, "a/0/1")), "0 1 0 1 0 1");
  EXPECT_EQ(Get(NoticeKey()), "1");
  EXPECT_EQ(Get(NoticeKindKey(1)), "removed");
  EXPECT_LT(IndexOf(NoticeKey()), IndexOf(AssignKey(2, "a/0/1")));  // the notice comes first
}

TEST_F(ElasticDriverTest, WorkerRemovedEarlierIsRemovedInEveryLaterRound) {
  options_.config.min_np = 1;
  options_.initial_hosts = {{"a", 1}, {"b", 1}, {"c", 1}};
  std::atomic<int> polls{0};
  hooks_.poll_discovery = [&]() -> std::optional<StatusOr<std::vector<HostSlots>>> {
    ++polls;
    if (polls == 5) return StatusOr<std::vector<HostSlots>>(std::vector<HostSlots>{{"a", 1}, {"c", 1}});
    if (polls == 15) return StatusOr<std::vector<HostSlots>>(std::vector<HostSlots>{{"a", 1}});
    return std::nullopt;
  };
  // b is slow to leave (still running at round 3); a and c follow the rounds.
  script_ = [](const ElasticWorkerSpec& s) { return s.host == "b" ? "exec sleep 100" : AwaitRound(3) + "exit 0"; };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(Get(AssignKey(2, "b/0/2")), "removed");
  EXPECT_EQ(Get(AssignKey(3, "b/0/2")), "removed");
  EXPECT_EQ(Get(AssignKey(3, "c/0/3")), "removed");
  EXPECT_EQ(Get(AssignKey(3, "a/0/1")), "0 1 0 1 0 1");
  EXPECT_EQ(Get(NoticeKey()), "2");
}

TEST_F(ElasticDriverTest, HostThatCannotStartAWorkerCostsNoRound) {
  options_.config.min_np = 1;
  options_.initial_hosts = {{"a", 1}};
  std::atomic<int> polls{0};
  hooks_.poll_discovery = [&]() -> std::optional<StatusOr<std::vector<HostSlots>>> {
    if (++polls == 3) return StatusOr<std::vector<HostSlots>>(std::vector<HostSlots>{{"a", 1}, {"unreachable", 1}});
    return std::nullopt;
  };
  script_ = [this](const ElasticWorkerSpec&) {
    return AwaitRound(1) + "while [ ! -e " + dir_ + "/go ]; do sleep 0.02; done; exit 0";
  };
  hooks_.on_tick = [&] {
    if (polls == 10) std::ofstream(dir_ + "/go") << "\n";  // well after the failed start
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(Get(RoundKey()), "1");
  EXPECT_EQ(Get(NoticeKey()), "<unset>");
  EXPECT_EQ(spawned_, (std::vector<std::string>{"a/0/1"}));
}

TEST_F(ElasticDriverTest, ResetLimitEndsTheJobAndStopsEveryWorker) {
  options_.config.min_np = 1;
  options_.config.reset_limit = 0;
  options_.initial_hosts = {{"a", 1}, {"b", 1}};
  script_ = [](const ElasticWorkerSpec& s) { return s.host == "b" ? AwaitRound(1) + "exit 5" : "exec sleep 100"; };
  const auto start = ElasticClock::now();
  EXPECT_EQ(Run(), 1);
  EXPECT_LT(ElasticClock::now() - start, std::chrono::seconds(10));  // a was stopped, not waited for
  EXPECT_EQ(Get(RoundKey()), "1");
}

TEST_F(ElasticDriverTest, BelowMinNpUntilHostsJoinThenStarts) {
  options_.config.min_np = 2;
  options_.config.elastic_timeout_seconds = 30;
  options_.initial_hosts = {{"a", 1}};
  std::atomic<int> polls{0};
  hooks_.poll_discovery = [&]() -> std::optional<StatusOr<std::vector<HostSlots>>> {
    if (++polls < 5) return std::nullopt;
    return StatusOr<std::vector<HostSlots>>(std::vector<HostSlots>{{"a", 1}, {"b", 1}});
  };
  script_ = [](const ElasticWorkerSpec&) { return AwaitRound(1) + "exit 0"; };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(Get(RoundSizeKey(1)), "2");
}

TEST_F(ElasticDriverTest, ElasticTimeoutBelowMinNp) {
  options_.config.min_np = 3;
  options_.config.elastic_timeout_seconds = 1;
  options_.initial_hosts = {{"a", 2}};
  script_ = [](const ElasticWorkerSpec&) { return "exit 0"; };
  const auto start = ElasticClock::now();
  EXPECT_EQ(Run(), 1);
  EXPECT_GE(ElasticClock::now() - start, std::chrono::seconds(1));
  EXPECT_TRUE(spawned_.empty());
  EXPECT_EQ(Get(RoundKey()), "<unset>");
}

TEST_F(ElasticDriverTest, AJobFatalExitEndsTheJobAtOnceWithoutReplacingTheWorker) {
  // A spare host is there to replace a lost worker; the elastic checkpoint that cannot be written
  // (kJobFatalExitCode) is not a lost host, so the job ends instead, with that code.
  options_.config.min_np = 2;
  options_.config.elastic_timeout_seconds = 600;
  options_.initial_hosts = {{"a", 1}, {"b", 1}, {"c", 1}};
  script_ = [](const ElasticWorkerSpec& s) {
    return s.host == "b" ? AwaitRound(1) + "exit " + std::to_string(kJobFatalExitCode) : "exec sleep 100";
  };
  const auto start = ElasticClock::now();
  EXPECT_EQ(Run(), kJobFatalExitCode);
  EXPECT_LT(ElasticClock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(Get(RoundKey()), "1");  // no second round
}

TEST_F(ElasticDriverTest, FailureAfterTheEndBeganFailsTheJobWithItsCode) {
  options_.config.min_np = 2;
  options_.initial_hosts = {{"a", 1}, {"b", 1}};
  script_ = [](const ElasticWorkerSpec& s) { return AwaitRound(1) + (s.host == "a" ? "exit 0" : "sleep 0.3; exit 7"); };
  EXPECT_EQ(Run(), 7);
  // The first exit 0 marked the round finished, so that a worker waiting for a new round stops.
  EXPECT_EQ(Get(RoundFinishedKey(1)), "rank 0 (worker a/0/1)");
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
