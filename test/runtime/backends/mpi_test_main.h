// The main() of the C++ tests that run as the processes of one `mpirun` (or `mpiexec.mpich`)
// launch: MPI initialised as the runtime does it, an optional set-up, then every test, and one
// verdict for the whole launch.
//
//   int main(int argc, char** argv) { return dadt::testutil::RunTestsUnderMpi(argc, argv); }
//
// Every process exits non-zero when a test failed on any of them, so the launcher's exit status
// is the verdict (a process whose own tests passed would otherwise exit 0 and hide its peer's
// failure). Exit 2: MPI or the set-up failed. Header-only: each test binary links its own MPI
// (Open MPI's or the MPICH ABI's build of //runtime/backends/mpi), and this compiles against it.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <functional>

#include "gtest/gtest.h"
#include "runtime/backends/mpi/mpi_env.h"

namespace dadt {
namespace testutil {

// `setup` runs after MPI is initialised and before the tests; false (it says why) fails the launch.
inline int RunTestsUnderMpi(int argc, char** argv, const std::function<bool()>& setup = nullptr) {
  ::testing::InitGoogleTest(&argc, argv);
  auto level = backends::mpi::EnsureInitialized();
  if (!level.ok()) {
    std::fprintf(stderr, "MPI init failed: %s\n", level.status().ToString().c_str());
    return 2;
  }
  if (setup && !setup()) return 2;
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}

}  // namespace testutil
}  // namespace dadt
