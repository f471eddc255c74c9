// The MPI controller transport across incarnations (init, shutdown, init in one process), one
// rank per process under `mpirun -np 4` (mpi_conformance_test.sh runs it). A worker's message that
// an earlier incarnation's coordinator never read must not reach the next incarnation, on the
// communicator every incarnation shares (mpi_control_transport.h, "Closing"); and the communicator
// cache that makes it shared (mpi_env.h, JobComm).
#include <mpi.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/backends/control_transport.h"
#include "runtime/backends/mpi/mpi_env.h"
#include "test/runtime/backends/mpi_test_main.h"

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

std::vector<std::pair<int, std::string>> ReadFromEveryWorker(ControlTransport* t, int size) {
  std::vector<std::pair<int, std::string>> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (static_cast<int>(got.size()) < size - 1 && std::chrono::steady_clock::now() < deadline) {
    EXPECT_TRUE(t->ReadAvailable(&got).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // anything more would be in
  EXPECT_TRUE(t->ReadAvailable(&got).ok());
  return got;
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
    auto got = ReadFromEveryWorker(t.get(), size);  // anything stale would be in by then
    ASSERT_EQ(static_cast<int>(got.size()), size - 1);
    for (const auto& m : got) EXPECT_EQ(m.second, "fresh from " + std::to_string(m.first));
  }
  t->Close();
}

// The communicator is kept across incarnations, so a worker that got the coordinator's bye may
// start its next incarnation, and send to the coordinator, while the coordinator still awaits
// another worker's bye: that message belongs to the next incarnation and must reach it.
TEST(MpiControlTransportTest, AWorkersNextIncarnationMayStartWhileTheCoordinatorStillCloses) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 3) GTEST_SKIP() << "needs two workers: run under mpirun -np 3 or more";
  auto t = Create();
  ASSERT_NE(t, nullptr);
  if (rank == size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // late bye
  t->Close();
  t = Create();
  ASSERT_NE(t, nullptr);
  if (rank != 0) {
    ASSERT_TRUE(t->SendToCoordinator("next from " + std::to_string(rank)).ok());
  } else {
    auto got = ReadFromEveryWorker(t.get(), size);
    ASSERT_EQ(static_cast<int>(got.size()), size - 1);
    for (const auto& m : got) EXPECT_EQ(m.second, "next from " + std::to_string(m.first));
  }
  t->Close();
}

// JobComm: one private communicator per (job communicator, purpose), the same one every time,
// congruent with the job's; freed with a user's job communicator (its attribute's delete
// callback), after which a new communicator gets fresh ones.
TEST(MpiEnvTest, JobCommIsCreatedOncePerCommunicatorAndPurpose) {
  for (int round = 0; round < 2; ++round) {
    MPI_Comm user = MPI_COMM_NULL;
    ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &user), MPI_SUCCESS);
    const auto native = reinterpret_cast<uintptr_t>(user);
    auto a = mpi::JobComm(native, "controller");
    auto b = mpi::JobComm(native, "controller");
    auto c = mpi::JobComm(native, "backend");
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *c);
    int same = MPI_UNEQUAL;
    MPI_Comm_compare(*a, user, &same);
    EXPECT_EQ(same, MPI_CONGRUENT);
    MPI_Comm_compare(*a, *c, &same);
    EXPECT_EQ(same, MPI_CONGRUENT);
    auto g1 = mpi::JobGeometryOf(native);
    auto g2 = mpi::JobGeometryOf(native);
    ASSERT_TRUE(g1.ok() && g2.ok());
    int rank = -1, size = 0;
    MPI_Comm_rank(user, &rank);
    MPI_Comm_size(user, &size);
    EXPECT_EQ(g1->rank, rank);
    EXPECT_EQ(g1->size, size);
    EXPECT_EQ(g2->local_size, g1->local_size);
    // Sub-groups: the evens and the odds; each rank's own group, the same one every time.
    auto s1 = mpi::JobSubComm(native, "backend", "parity/", rank % 2);
    auto s2 = mpi::JobSubComm(native, "backend", "parity/", rank % 2);
    ASSERT_TRUE(s1.ok() && s2.ok());
    EXPECT_EQ(*s1, *s2);
    int sub_size = 0;
    MPI_Comm_size(*s1, &sub_size);
    EXPECT_EQ(sub_size, rank % 2 == 0 ? (size + 1) / 2 : size / 2);
    int one = 1, sum = 0;  // the kept communicators work
    ASSERT_EQ(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, *c), MPI_SUCCESS);
    EXPECT_EQ(sum, size);
    ASSERT_EQ(MPI_Comm_free(&user), MPI_SUCCESS);  // frees dadt's (the delete callback)
  }
  auto world = mpi::JobComm(0, "controller");
  ASSERT_TRUE(world.ok());
  EXPECT_EQ(*world, *mpi::JobComm(0, "controller"));
  EXPECT_FALSE(mpi::JobComm(reinterpret_cast<uintptr_t>(MPI_COMM_NULL), "controller").ok());
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

int main(int argc, char** argv) { return dadt::testutil::RunTestsUnderMpi(argc, argv); }
