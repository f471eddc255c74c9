// A peer process killed with SIGKILL in the middle of an allreduce must turn into kAborted on the
// survivor within seconds -- not a hang until the (here 60 s) timeout. Rank 1 is a forked child
// (as in Gloo's MultiProcTest) so the kernel really tears down a dead process's sockets; the two
// processes rendezvous through a directory of files, since they share no memory.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backends/backend.h"

namespace dadt {
namespace backends {
namespace gloo {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// KeyValueStore over a directory: one file per key, published with an atomic rename.
class FileKeyValueStore : public KeyValueStore {
 public:
  explicit FileKeyValueStore(std::string dir) : dir_(std::move(dir)) {}

  Status Set(const std::string& key, const std::string& value) override {
    const std::string tmp = Path(key) + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f << value;
      if (!f) return InternalError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), Path(key).c_str()) != 0) return InternalError("rename " + tmp);
    return Status::OK();
  }

  StatusOr<std::string> Get(const std::string& key, milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::ifstream f(Path(key), std::ios::binary);
      if (f) {
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
      }
      if (Clock::now() >= deadline) return TimeoutError("no key '" + key + "'");
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

 private:
  std::string Path(const std::string& key) const {
    std::string name = key;
    for (char& c : name) c = c == '/' ? '_' : c;
    return dir_ + "/" + name;
  }

  const std::string dir_;
};

BackendOptions Options(int rank, KeyValueStore* store) {
  BackendOptions o;
  o.rank = o.local_rank = rank;
  o.size = o.local_size = 2;
  o.store = store;
  o.store_prefix = "kill/";
  o.timeout = milliseconds(60000);
  return o;
}

TEST(GlooPeerKillTest, KilledPeerAbortsSurvivorQuickly) {
  std::string dir = ::testing::TempDir() + "/gloo_kill_XXXXXX";
  ASSERT_NE(mkdtemp(&dir[0]), nullptr);
  std::vector<float> buf(1 << 22, 1.0f);  // 16 MiB: each allreduce takes a while

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 1: join, then die by SIGKILL while allreducing
    FileKeyValueStore store(dir);
    auto b = BackendRegistry::Create("gloo", Options(1, &store));
    if (!b.ok()) _exit(2);
    std::thread killer([] {
      std::this_thread::sleep_for(milliseconds(300));
      raise(SIGKILL);
    });
    for (;;) (void)(*b)->Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  }

  FileKeyValueStore store(dir);
  auto b = BackendRegistry::Create("gloo", Options(0, &store));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Status s;
  double seconds = 0;
  for (int i = 0; s.ok() && i < 10000; ++i) {
    const auto start = Clock::now();
    s = (*b)->Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("allreduce"), std::string::npos) << s.ToString();
  EXPECT_LT(seconds, 5.0) << "the failing allreduce took " << seconds << " s";

  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << "child status " << wstatus;
}

}  // namespace
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
