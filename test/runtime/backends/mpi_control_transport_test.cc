// The MPI controller transport across incarnations (init, shutdown, init in one process), one
// rank per process under `mpirun -np 4` (mpi_conformance_test.sh runs it). A worker's message that
// an earlier incarnation's coordinator never read must not reach the next incarnation, although
// Open MPI hands a freed communicator's context id, and what arrives for it, to a later one
// (mpi_control_transport.h, "Closing").
#include <mpi.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/backends/control_transport.h"
#include "runtime/backends/mpi/mpi_env.h"

namespace dadt {
namespace backends {
namespace {

std::unique_ptr<ControlTransport> Create() {
  ControlTransportOptions options;
  options.timeout = std::chrono::seconds(20);
  auto t = ControlTransportRegistry::Create("mpi", options);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

// As when another rank's shutdown ends the loops: the coordinator closes at once, while a worker
// still sends a request list (its own shutdown, say) that nobody will read, then closes too.
TEST(MpiControlTransportTest, AnEarlierIncarnationsUnreadMessagesDoNotReachTheNext) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs workers: run under mpirun -np 2 or more";
  for (int k = 0; k < 3; ++k) {
    auto t = Create();
    ASSERT_NE(t, nullptr);
    if (rank != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 is closing by now
      ASSERT_TRUE(t->SendToCoordinator("stale from incarnation " + std::to_string(k)).ok());
    }
    t->Close();
    t.reset();
  }
  auto t = Create();
  ASSERT_NE(t, nullptr);
  if (rank != 0) {
    ASSERT_TRUE(t->SendToCoordinator("fresh from " + std::to_string(rank)).ok());
  } else {
    std::vector<std::pair<int, std::string>> got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (static_cast<int>(got.size()) < size - 1 && std::chrono::steady_clock::now() < deadline) {
      ASSERT_TRUE(t->ReadAvailable(&got).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Anything stale still on its way would have arrived by now.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(t->ReadAvailable(&got).ok());
    ASSERT_EQ(static_cast<int>(got.size()), size - 1);
    for (const auto& m : got) EXPECT_EQ(m.second, "fresh from " + std::to_string(m.first));
  }
  t->Close();
}

// Close returns at once for a lone rank, and is idempotent (the destructor calls it again).
TEST(MpiControlTransportTest, CloseTwiceIsHarmless) {
  auto t = Create();
  ASSERT_NE(t, nullptr);
  const auto start = std::chrono::steady_clock::now();
  t->Close();
  t->Close();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace backends
}  // namespace dadt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto level = dadt::backends::mpi::EnsureInitialized();
  if (!level.ok()) {
    std::fprintf(stderr, "MPI init failed: %s\n", level.status().ToString().c_str());
    return 2;
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Every process exits non-zero when any failed, so mpirun's exit status is the verdict.
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
