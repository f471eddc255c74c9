#include "dadtrun/local_spawner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace dadt {
namespace dadtrun {
namespace {

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

SpawnRequest Request(std::vector<std::string> command, std::vector<std::string> env = {}) {
  SpawnRequest r;
  r.rank = 0;
  r.command = std::move(command);
  r.env = std::move(env);
  if (r.env.empty()) r.env = {"PATH=/usr/bin:/bin"};
  sigemptyset(&r.child_sigmask);
  return r;
}

int Wait(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST(LocalSpawnerTest, RunsWithExactlyTheGivenEnvironmentAndPipes) {
  ::setenv("DADT_SPAWNER_TEST_PARENT_ONLY", "leak", 1);
  int exec_errno = -1;
  StatusOr<SpawnedRank> r = SpawnLocalRank(
      Request({"sh", "-c", "echo \"$FOO|$DADT_SPAWNER_TEST_PARENT_ONLY\"; echo oops >&2; exit 4"},
              {"PATH=/usr/bin:/bin", "FOO=bar baz"}),
      &exec_errno);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(exec_errno, 0);
  EXPECT_EQ(ReadAll(r->stdout_fd), "bar baz|\n");
  EXPECT_EQ(ReadAll(r->stderr_fd), "oops\n");
  int status = Wait(r->pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 4);
}

TEST(LocalSpawnerTest, RankLeadsItsOwnProcessGroup) {
  int exec_errno = 0;
  StatusOr<SpawnedRank> r = SpawnLocalRank(Request({"sleep", "5"}), &exec_errno);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(::getpgid(r->pid), r->pid);
  EXPECT_NE(::getpgid(r->pid), ::getpgrp());
  ::kill(-r->pid, SIGKILL);
  int status = Wait(r->pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  ::close(r->stdout_fd);
  ::close(r->stderr_fd);
}

TEST(LocalSpawnerTest, ChildGetsTheOriginalSignalMaskAndDefaultSigpipe) {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigset_t old;
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  ::signal(SIGPIPE, SIG_IGN);
  int exec_errno = 0;
  StatusOr<SpawnedRank> r = SpawnLocalRank(
      Request({"sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"}), &exec_errno);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ASSERT_TRUE(r.ok());
  const std::string out = ReadAll(r->stdout_fd);
  ::close(r->stderr_fd);
  Wait(r->pid);
  EXPECT_NE(out.find("SigBlk:\t0000000000000000"), std::string::npos) << out;
  // SIGPIPE (13) is bit 12: not ignored in the rank.
  const size_t ign = out.find("SigIgn:\t");
  ASSERT_NE(ign, std::string::npos);
  const unsigned long long mask = std::stoull(out.substr(ign + 8, 16), nullptr, 16);
  EXPECT_EQ(mask & (1ULL << (SIGPIPE - 1)), 0u) << out;
}

TEST(LocalSpawnerTest, StdinIsDevNullUnlessInherited) {
  int exec_errno = 0;
  StatusOr<SpawnedRank> r =
      SpawnLocalRank(Request({"sh", "-c", "cat; readlink /proc/self/fd/0"}), &exec_errno);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(ReadAll(r->stdout_fd), "/dev/null\n");
  ::close(r->stderr_fd);
  Wait(r->pid);
}

TEST(LocalSpawnerTest, MissingCommandIsReportedWithErrno) {
  int exec_errno = 0;
  StatusOr<SpawnedRank> r = SpawnLocalRank(Request({"no-such-command-dadt"}), &exec_errno);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(exec_errno, ENOENT);
  EXPECT_NE(r.status().message().find("cannot execute 'no-such-command-dadt'"), std::string::npos)
      << r.status().message();
  // The failed child was reaped.
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(LocalSpawnerTest, NonExecutableFileIsReported) {
  int exec_errno = 0;
  StatusOr<SpawnedRank> r = SpawnLocalRank(Request({"/dev/null"}), &exec_errno);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(exec_errno, EACCES);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
