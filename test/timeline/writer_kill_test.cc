// A child process writes a trace flat out and is killed with SIGKILL at a random moment; the file
// it leaves must parse, every time (the writer keeps the document closed after every commit).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "test/timeline/trace_util.h"
#include "timeline/chrome_trace_writer.h"

namespace dadt {
namespace timeline {
namespace {

using testing::ParseTrace;
using testing::ReadTrace;
using testing::TempPath;

// The child: never returns. Tells the parent through `ready_fd` once the file exists.
[[noreturn]] void WriteForever(const std::string& path, int ready_fd) {
  ChromeTraceWriterOptions opts;
  opts.flush_interval = std::chrono::milliseconds(1);
  opts.flush_events = 512;
  opts.queue_capacity = 1 << 16;
  ChromeTraceWriter w(opts);
  if (!w.Start(path).ok()) _exit(3);
  if (write(ready_fd, "r", 1) != 1) _exit(4);
  // Long names make commits span several pages, the case a torn write would hurt most.
  const std::string pad(300, 'p');
  for (int64_t i = 0;; ++i) {
    const std::string name = "grad." + std::to_string(i % 97) + "." + pad + "\"\\\n";
    w.Consume({i, Phase::kBegin, name, BackendActivity("gloo", "allreduce"), ""});
    w.Consume({i + 1, Phase::kEnd, name, BackendActivity("gloo", "allreduce"),
               TensorArgs("float32", {i % 7, 3})});
    if (i % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

TEST(WriterKillTest, FileParsesAfterSigkillAtRandomMoments) {
  const unsigned seed = static_cast<unsigned>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_us(0, 150000);
  for (int round = 0; round < 16; ++round) {
    const std::string path = TempPath("kill");
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(pipefd[0]);
      WriteForever(path, pipefd[1]);
    }
    close(pipefd[1]);
    char c = 0;
    ASSERT_EQ(read(pipefd[0], &c, 1), 1) << "the child could not start its writer";
    close(pipefd[0]);
    const int delay = delay_us(rng);
    std::this_thread::sleep_for(std::chrono::microseconds(delay));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    const std::string text = ReadTrace(path, /*lock=*/false);  // nobody writes any more
    std::string error;
    const auto doc = ParseTrace(text, &error);
    ASSERT_FALSE(doc.is_discarded()) << "seed " << seed << ", round " << round << ", killed after "
                                     << delay << " us, " << text.size() << " bytes: " << error;
    ASSERT_TRUE(doc.is_array());
    std::printf("round %2d: killed after %6d us, %8zu bytes, %6zu entries\n", round, delay,
                text.size(), doc.size());
    unlink(path.c_str());
  }
}

}  // namespace
}  // namespace timeline
}  // namespace dadt
