// The discovery script runner: parsing, exit codes, time-outs (the whole process group goes), polling.
#include "dadtrun/discovery_script.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace dadt {
namespace dadtrun {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Hosts(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const HostSlots& h : hosts) s += (s.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  return s;
}

TEST(DiscoveryScriptTest, ParsesHostAndHostSlotsLines) {
  StatusOr<std::vector<HostSlots>> h = ParseDiscoveryOutput("h1:2\n\n# comment\n  h2 \n10.0.0.3:4\r\n", 3);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(Hosts(*h), "h1:2,h2:3,10.0.0.3:4");
  EXPECT_EQ(Hosts(*ParseDiscoveryOutput("", 1)), "");
}

// The Kubernetes MPI Operator's discover_hosts.sh prints the running workers' names, one a line,
// without slot counts: each gets --slots-per-host slots (default 1).
TEST(DiscoveryScriptTest, MpiOperatorHostnamesOnly) {
  const std::string out = "job-worker-0.job-worker.default.svc\njob-worker-1.job-worker.default.svc\n";
  EXPECT_EQ(Hosts(*ParseDiscoveryOutput(out, 1)),
            "job-worker-0.job-worker.default.svc:1,job-worker-1.job-worker.default.svc:1");
  EXPECT_EQ(Hosts(*ParseDiscoveryOutput(out, 4)),
            "job-worker-0.job-worker.default.svc:4,job-worker-1.job-worker.default.svc:4");
  StatusOr<std::vector<HostSlots>> run =
      RunDiscoveryScript("echo job-worker-0.job-worker; echo job-worker-1.job-worker", 2,
                         std::chrono::seconds(10));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(Hosts(*run), "job-worker-0.job-worker:2,job-worker-1.job-worker:2");
}

TEST(DiscoveryScriptTest, BadLinesAreNamed) {
  StatusOr<std::vector<HostSlots>> h = ParseDiscoveryOutput("h1:2\nh2:x\n", 1);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "line 2 'h2:x': slots must be a positive integer (write host or host:slots)");
  EXPECT_FALSE(ParseDiscoveryOutput("h1:0\n", 1).ok());
  EXPECT_FALSE(ParseDiscoveryOutput(":2\n", 1).ok());
  EXPECT_FALSE(ParseDiscoveryOutput("two words\n", 1).ok());
}

TEST(DiscoveryScriptTest, RunsAShellCommandLine) {
  StatusOr<std::vector<HostSlots>> h = RunDiscoveryScript("echo a:2; echo b", 1, seconds(10));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(Hosts(*h), "a:2,b:1");
}

TEST(DiscoveryScriptTest, NonZeroExitIsAFailureWithItsLastStderrLine) {
  StatusOr<std::vector<HostSlots>> h = RunDiscoveryScript("echo a; echo 'cannot reach the scheduler' >&2; exit 3", 1,
                                                          seconds(10));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(),
            "host discovery script 'echo a; echo 'cannot reach the scheduler' >&2; exit 3' exited with code 3 "
            "(its last stderr line: 'cannot reach the scheduler')");
  h = RunDiscoveryScript("kill -9 $$", 1, seconds(10));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("was killed by signal 9"), std::string::npos);
  h = RunDiscoveryScript("echo 'a:b'", 1, seconds(10));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("printed line 1 'a:b'"), std::string::npos);
}

TEST(DiscoveryScriptTest, TimeOutKillsTheScriptAndItsChildren) {
  char dir[] = "/tmp/dadt-discovery-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string pidfile = std::string(dir) + "/child.pid";
  const auto start = std::chrono::steady_clock::now();
  // The child keeps stdout open, so only the time-out ends the run.
  StatusOr<std::vector<HostSlots>> h =
      RunDiscoveryScript("sleep 100 & echo $! > " + pidfile + "; echo a; wait", 1, milliseconds(500));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kTimeout);
  EXPECT_NE(h.status().message().find("still running after 0.5 s; killed it"), std::string::npos)
      << h.status().message();
  EXPECT_LT(took, seconds(5));
  std::ifstream in(pidfile);
  pid_t child = 0;
  ASSERT_TRUE(in >> child);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ::kill(child, 0) != 0;
    if (!gone) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the script's child " << child << " outlived the time-out";
  ::unlink(pidfile.c_str());
  ::rmdir(dir);
}

TEST(DiscoveryPollerTest, RunsRepeatedlyAndHandsOverTheLatest) {
  char dir[] = "/tmp/dadt-discovery-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string count = std::string(dir) + "/count";
  DiscoveryPoller poller("echo x >> " + count + "; echo h1:2", 1, seconds(5), milliseconds(50));
  EXPECT_FALSE(poller.Take().has_value());  // nothing before Start
  poller.Start();
  std::optional<StatusOr<std::vector<HostSlots>>> got;
  for (int i = 0; i < 200 && !got; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
    got = poller.Take();
  }
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok());
  EXPECT_EQ(Hosts(**got), "h1:2");
  std::this_thread::sleep_for(milliseconds(400));
  poller.Stop();
  std::ifstream in(count);
  int runs = 0;
  for (std::string line; std::getline(in, line);) ++runs;
  EXPECT_GE(runs, 3);
  ::unlink(count.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
