// The ssh spawner's pieces without ssh: quoting through a real /bin/sh, the remote environment
// filter, and the remote wrapper itself run by a local shell exactly as sshd would run it (the
// login shell gets RemoteWrapperCommand as its -c argument and the framed script on stdin).
#include "dadtrun/ssh_spawner.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

const std::vector<std::string> kAwkward = {
    "plain", "a b", "it's", "say \"hi\"", "$HOME", "${X}", "a;b", "`id`", "$(id)", "",
    "*", "two\nlines", "tab\tx", "back\\slash", "-x", "&&", "!", "~", "#c", "'", "''\\'"};

// dadtrun ignores SIGPIPE (a write to the pipe of a wrapper that has exited is EPIPE); so do we.
const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Starts the wrapper as sshd would: `/bin/sh -c <RemoteWrapperCommand>` with `script` framed on its
// stdin. Returns the spawned process and the write end of its stdin (left open).
SpawnedRank StartWrapper(const std::string& script, int* control_fd) {
  int in[2];
  EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
  SpawnRequest req;
  req.rank = 0;
  req.command = {"/bin/sh", "-c", RemoteWrapperCommand(0)};
  sigemptyset(&req.child_sigmask);
  req.stdin_fd = in[0];
  int exec_errno = 0;
  StatusOr<SpawnedRank> r = SpawnLocalRank(req, &exec_errno);
  ::close(in[0]);
  EXPECT_TRUE(r.ok()) << r.status().message();
  const std::string framed = FrameScript(script);
  EXPECT_EQ(::write(in[1], framed.data(), framed.size()), static_cast<ssize_t>(framed.size()));
  *control_fd = in[1];
  return *r;
}

TEST(SshSpawnerTest, ShellQuoteSurvivesTheShell) {
  for (const std::string& s : kAwkward) {
    const std::string cmd = "printf '%s' " + ShellQuote(s);
    FILE* p = ::popen(("/bin/sh -c " + ShellQuote(cmd)).c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    ::pclose(p);
    EXPECT_EQ(out, s);
  }
}

TEST(SshSpawnerTest, SshCommandHasTheOptions) {
  SshOptions o;
  o.port = 2222;
  o.identity_file = "/keys/id";
  o.connect_timeout_seconds = 4;
  EXPECT_EQ(SshCommand(o, "h2"),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=4", "-p",
                                      "2222", "-i", "/keys/id", "-T", "h2"}));
  EXPECT_EQ(SshCommand(SshOptions{}, "h2").back(), "h2");
  EXPECT_EQ(SshCommand(SshOptions{}, "h2").size(), 7u);
}

TEST(SshSpawnerTest, RemoteEnvironmentKeepsTheJobAndDropsTheHost) {
  EnvMap env = {{"DADT_RANK", "3"}, {"DADT_SECRET", "s"}, {"PATH", "/venv/bin:/usr/bin"},
                {"HOME", "/root"}, {"SSH_AUTH_SOCK", "/tmp/x"}, {"PWD", "/here"},
                {"BASH_FUNC_f%%", "() { :; }"}, {"WEIRD-NAME", "x"}, {"MY_VAR", "a b"}};
  EnvMap remote = RemoteEnvironment(env, {});
  EXPECT_EQ(remote, (EnvMap{{"DADT_RANK", "3"}, {"DADT_SECRET", "s"}, {"PATH", "/venv/bin:/usr/bin"},
                            {"MY_VAR", "a b"}}));
  EXPECT_EQ(RemoteEnvironment(env, {"HOME"}).count("HOME"), 1u);  // -x HOME forwards it anyway
  // The secret is in the script (read from stdin), never in the ssh command line.
  const std::string cmd = RemoteWrapperCommand(3);
  EXPECT_EQ(cmd.find("DADT_SECRET"), std::string::npos);
  EXPECT_EQ(cmd.find('\n'), std::string::npos);  // one line for any login shell
}

TEST(SshSpawnerTest, WrapperRunsTheRankWithEnvironmentArgvAndDirectory) {
  std::vector<std::string> command = {"/bin/sh", "-c",
                                      "printf '[%s]' \"$AWK\" \"$(pwd)\" \"$@\"", "sh"};
  command.insert(command.end(), kAwkward.begin(), kAwkward.end());
  const std::string awkward_value = "v 'q' \"dq\" $PATH ; `x` \\ \n end";
  const std::string script = RemoteRankScript({{"AWK", awkward_value}}, "/tmp", command, "h9");
  int control = -1;
  SpawnedRank r = StartWrapper(script, &control);
  ::close(r.stderr_fd);
  const std::string out = ReadAll(r.stdout_fd);
  ::close(r.stdout_fd);
  ::close(control);
  const int status = Wait(r.pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::string expected = "[" + awkward_value + "][/tmp]";
  for (const std::string& a : kAwkward) expected += "[" + a + "]";
  EXPECT_EQ(out, expected);
}

TEST(SshSpawnerTest, WrapperReportsAMissingDirectoryAndTheExitCode) {
  int control = -1;
  SpawnedRank r = StartWrapper(RemoteRankScript({}, "/no/such/dir", {"true"}, "h9"), &control);
  ::close(r.stdout_fd);
  const std::string err = ReadAll(r.stderr_fd);
  ::close(r.stderr_fd);
  ::close(control);
  const int status = Wait(r.pid);
  EXPECT_EQ(WEXITSTATUS(status), 125);
  EXPECT_EQ(err, "dadtrun: working directory /no/such/dir does not exist on host h9\n");

  r = StartWrapper(RemoteRankScript({}, "/", {"/bin/sh", "-c", "exit 7"}, "h9"), &control);
  ::close(r.stdout_fd);
  ::close(r.stderr_fd);
  EXPECT_EQ(WEXITSTATUS(Wait(r.pid)), 7);
  ::close(control);
}

// A rank that leaves a child behind; returns the child's pid, read from the rank's stdout.
pid_t ReadPid(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line.empty() ? -1 : static_cast<pid_t>(std::stol(line));
}

bool GoneWithin(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (::kill(pid, 0) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(SshSpawnerTest, ControlLinesSignalTheRankGroup) {
  // The rank traps nothing: SIGINT must be at its default (not ignored as in a background job).
  const std::vector<std::string> rank = {"/bin/sh", "-c", "sleep 60 & echo $!; wait"};
  int control = -1;
  SpawnedRank r = StartWrapper(RemoteRankScript({}, "/", rank, "h9"), &control);
  const pid_t child = ReadPid(r.stdout_fd);
  ASSERT_GT(child, 0);
  SignalRemoteRank(&control, SIGINT);
  const int status = Wait(r.pid);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  EXPECT_TRUE(GoneWithin(child, std::chrono::seconds(5))) << "the rank's child survived";
  SignalRemoteRank(&control, SIGKILL);  // closes it
  EXPECT_EQ(control, -1);
  ::close(r.stdout_fd);
  ::close(r.stderr_fd);
}

TEST(SshSpawnerTest, ClosedStdinKillsTheRankGroup) {
  // What happens when dadtrun dies or the ssh connection drops: the wrapper's stdin reaches EOF.
  const std::vector<std::string> rank = {"/bin/sh", "-c", "trap '' TERM; sleep 60 & echo $!; wait"};
  int control = -1;
  SpawnedRank r = StartWrapper(RemoteRankScript({}, "/", rank, "h9"), &control);
  const pid_t child = ReadPid(r.stdout_fd);
  ASSERT_GT(child, 0);
  ::close(control);
  const int status = Wait(r.pid);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL);
  EXPECT_TRUE(GoneWithin(child, std::chrono::seconds(5))) << "the rank's child survived";
  ::close(r.stdout_fd);
  ::close(r.stderr_fd);
}

TEST(SshSpawnerTest, UnreachableHostsAreAllNamed) {
  SshOptions o;
  o.connect_timeout_seconds = 2;
  Status s = CheckHostsReachable({"no-such-host-a.invalid", "no-such-host-b.invalid"}, o,
                                 std::chrono::seconds(10));
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_EQ(m.rfind("cannot reach 2 of 2 host(s) over ssh: no-such-host-a.invalid (", 0), 0u) << m;
  EXPECT_NE(m.find(", no-such-host-b.invalid ("), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
