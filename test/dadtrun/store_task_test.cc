// dadtrun/store_task.h: the store a torchrun job's rank 0 serves, in process (StartTaskStore), and
// the real `dadtrun --serve-store` (a data dependency) as init() runs it: its stdout contract.
#include "dadtrun/store_task.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/common/rendezvous/client.h"

namespace dadt {
namespace dadtrun {
namespace {

using std::chrono::milliseconds;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

TEST(StartTaskStoreTest, ServesOnAFreePortWithTheSecret) {
  auto server = StartTaskStore({}, kSecret, 0);
  ASSERT_TRUE(server.ok()) << server.status().message();
  ASSERT_GT((*server)->port(), 0);
  auto client = rendezvous::RendezvousClient::Connect("127.0.0.1", (*server)->port(), kSecret,
                                                      milliseconds(5000));
  ASSERT_TRUE(client.ok()) << client.status().message();
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  auto got = (*client)->Get("k", milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "v");
}

TEST(StartTaskStoreTest, AnUnknownInterfaceIsNamed) {
  auto server = StartTaskStore({{"DADT_IFACE", "no-such-if0"}}, kSecret, 0);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("DADT_IFACE"), std::string::npos)
      << server.status().message();
}

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // its stdout
  int in = -1;          // its stdin
};

// Starts `dadtrun --serve-store` with DADT_SECRET=`secret`, stdin and stdout piped.
Child StartServeStore(const std::string& secret) {
  int to_child[2], from_child[2];
  EXPECT_EQ(::pipe(to_child), 0);
  EXPECT_EQ(::pipe(from_child), 0);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(to_child[0], STDIN_FILENO);
    ::dup2(from_child[1], STDOUT_FILENO);
    ::close(to_child[1]);
    ::close(from_child[0]);
    ::setenv("DADT_SECRET", secret.c_str(), 1);
    ::unsetenv("DADT_RENDEZVOUS_PORT");
    ::unsetenv("DADT_IFACE");
    ::execl("dadtrun/dadtrun", "dadtrun", kServeStoreFlag, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  c.in = to_child[1];
  c.out = ::fdopen(from_child[0], "r");
  return c;
}

std::vector<std::string> ReadLines(FILE* f) {
  std::vector<std::string> lines;
  char buf[1024];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) {
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    lines.push_back(line);
    if (line == "READY" || line.rfind("ERROR\t", 0) == 0) break;
  }
  return lines;
}

int ExitCode(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ServeStoreTest, PrintsItsPortThenServesUntilStdinCloses) {
  Child c = StartServeStore(kSecret);
  std::vector<std::string> lines = ReadLines(c.out);
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_EQ(lines[0].rfind("DADT_RENDEZVOUS_PORT=", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1], "READY");
  const int port = std::stoi(lines[0].substr(lines[0].find('=') + 1));
  auto client =
      rendezvous::RendezvousClient::Connect("127.0.0.1", port, kSecret, milliseconds(5000));
  ASSERT_TRUE(client.ok()) << client.status().message();
  EXPECT_TRUE((*client)->Set("ready/0", "1").ok());
  ::close(c.in);  // the rank that started it has exited
  EXPECT_EQ(ExitCode(c.pid), 0);
  std::fclose(c.out);
}

TEST(ServeStoreTest, AShortSecretIsAnError) {
  Child c = StartServeStore("short");
  std::vector<std::string> lines = ReadLines(c.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("ERROR\t", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("DADT_SECRET"), std::string::npos) << lines[0];
  ::close(c.in);
  EXPECT_EQ(ExitCode(c.pid), 2);
  std::fclose(c.out);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
