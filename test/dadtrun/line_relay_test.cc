// dadtrun --line-relay: whole lines out, the program's exit status or signal passed through.
#include "dadtrun/line_relay.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace dadt {
namespace dadtrun {
namespace {

TEST(LineRelayTest, TakeCompleteLinesKeepsTheUnfinishedRest) {
  std::string pending = "a b\nc";
  EXPECT_EQ(TakeCompleteLines(&pending), std::vector<std::string>({"a b\n"}));
  EXPECT_EQ(pending, "c");
  pending += "d\n\ne";
  EXPECT_EQ(TakeCompleteLines(&pending), std::vector<std::string>({"cd\n", "\n"}));
  EXPECT_EQ(pending, "e");
  EXPECT_TRUE(TakeCompleteLines(&pending).empty());
}

// Runs the relay in a child with its stdout on a pipe; records every read() the reader saw.
struct Relayed {
  std::vector<std::string> reads;
  int status = 0;
};

Relayed Relay(const std::vector<std::string>& command) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::_exit(RunLineRelay(command));
  }
  ::close(fds[1]);
  Relayed r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) {
    r.reads.emplace_back(buf, static_cast<size_t>(n));
    ::usleep(20000);  // let the writer get ahead: whole lines must still be whole
  }
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

TEST(LineRelayTest, PiecewiseWritesArriveAsWholeLines) {
  // printf in pieces with pauses, as an unbuffered Python print("loss", 0.5) does.
  Relayed r = Relay({"/bin/sh", "-c",
                     "printf loss; sleep 0.05; printf ' '; sleep 0.05; printf '0.5\\n'; "
                     "printf 'x'; sleep 0.05; printf 'y\\nz'"});
  std::string all;
  for (size_t i = 0; i < r.reads.size(); ++i) {
    all += r.reads[i];
    // Only the program's unfinished last line may end a read without a newline, at the very end.
    if (i + 1 < r.reads.size()) {
      EXPECT_EQ(r.reads[i].back(), '\n') << "a read ended mid-line: '" << r.reads[i] << "'";
    }
  }
  EXPECT_EQ(all, "loss 0.5\nxy\nz");  // the unfinished last line is flushed at the end
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
}

TEST(LineRelayTest, ExitCodeAndSignalArePassedThrough) {
  Relayed r = Relay({"/bin/sh", "-c", "exit 7"});
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 7);
  r = Relay({"/bin/sh", "-c", "kill -KILL $$"});
  ASSERT_TRUE(WIFSIGNALED(r.status));
  EXPECT_EQ(WTERMSIG(r.status), SIGKILL);
  r = Relay({"/nonexistent/program"});
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 127);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
