// A process set's MPI backend (docs/process-sets.md, "Data plane per set"), under `mpirun -np 4`
// (mpi_conformance_test.sh): only the members create it, through MPI_Comm_create_group over the
// job's communicator (BackendOptions::member_ranks), so disjoint sets are created and reduce at
// the same time, an overlapping set follows, and a set of one rank needs no peer.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/mpi/mpi_env.h"
#include "test/runtime/backends/mpi_test_main.h"
#include "runtime/core/process_sets.h"

namespace dadt {
namespace backends {
namespace {

int WorldRank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// The sum of (global rank + 1) over the members, computed on the set's backend; -1 when this
// process is not a member (it does nothing).
float SumOverSet(core::ProcessSetTable& table, int32_t id) {
  const core::ProcessSet& set = *table.Find(id);
  if (!set.included()) return -1.f;
  BackendOptions job;
  job.rank = job.local_rank = WorldRank();
  job.size = job.local_size = 4;
  auto backend = BackendRegistry::Create("mpi", core::SetBackendOptions(job, set));
  EXPECT_TRUE(backend.ok()) << backend.status().ToString();
  if (!backend.ok()) return -2.f;
  EXPECT_EQ((*backend)->Name(), std::string("MPI"));
  float v = static_cast<float>(WorldRank() + 1);
  Status s = (*backend)->Allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return v;
}

TEST(MpiProcessSetTest, MembersOnlyCreateTheSetsCommunicator) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 4) GTEST_SKIP() << "needs mpirun -np 4, got " << size << " processes";
  const int rank = WorldRank();
  core::ProcessSetTable table(4, rank);
  const int32_t even = *table.Add({0, 2});
  const int32_t odd = *table.Add({1, 3});
  const int32_t upper = *table.Add({1, 2, 3});
  const int32_t alone = *table.Add({3});
  // Each process is in exactly one of the disjoint sets: both are created and used at once.
  EXPECT_EQ(SumOverSet(table, rank % 2 == 0 ? even : odd), rank % 2 == 0 ? 1.f + 3.f : 2.f + 4.f);
  EXPECT_EQ(SumOverSet(table, upper), rank == 0 ? -1.f : 2.f + 3.f + 4.f);
  EXPECT_EQ(SumOverSet(table, alone), rank == 3 ? 4.f : -1.f);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace backends
}  // namespace dadt

int main(int argc, char** argv) { return dadt::testutil::RunTestsUnderMpi(argc, argv); }
