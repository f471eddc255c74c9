// The backend conformance suite on MPI, one rank per process. Run it under mpirun (the sh_test
// mpi_conformance_test does: `mpirun -np 4`); each world size 1..4 runs on a sub-communicator of
// the first `size` processes while the others wait, so one launch covers every size. Without
// mpirun the process is an MPI singleton and sizes above 1 skip, saying so.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/backends/mpi/mpi_env.h"
#include "test/runtime/backends/backend_conformance.h"
#include "test/runtime/backends/mpi_test_main.h"

namespace dadt {
namespace backends {
namespace conformance {

INSTANTIATE_TEST_SUITE_P(Mpi, BackendConformanceTest,
                         ::testing::Values(Param{"mpi", 1}, Param{"mpi", 2}, Param{"mpi", 3},
                                           Param{"mpi", 4}),
                         ParamName);

namespace {

// Ranks are the processes of MPI_COMM_WORLD; the shared counter lives in POSIX shared memory
// (every rank of this test runs on one host).
class MpiProcessRunner : public testutil::RankRunner {
 public:
  bool Init() {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    long id = world_rank_ == 0 ? static_cast<long>(getpid()) : 0;
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const std::string name = "/dadt_mpi_conformance_" + std::to_string(id);
    int fd = -1;
    if (world_rank_ == 0) {
      fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
      if (fd >= 0 && ftruncate(fd, sizeof(std::atomic<int>)) != 0) fd = -1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank_ != 0) fd = shm_open(name.c_str(), O_RDWR, 0600);
    void* p = fd < 0 ? MAP_FAILED
                     : mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED,
                            fd, 0);
    if (fd >= 0) close(fd);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank_ == 0) shm_unlink(name.c_str());
    if (p == MAP_FAILED) return false;
    counter_ = static_cast<std::atomic<int>*>(p);
    return true;
  }

  int MaxRanks() const override { return world_size_; }
  std::atomic<int>& SharedCounter() override { return *counter_; }

  void Run(const std::string& backend, int size, const testutil::RankBody& body,
           std::chrono::milliseconds timeout) override {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank_ < size ? 0 : MPI_UNDEFINED, world_rank_, &sub);
    if (world_rank_ == 0) counter_->store(0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (sub != MPI_COMM_NULL) {
      BackendOptions options;
      options.rank = world_rank_;
      options.size = size;
      options.timeout = timeout;
      options.native_comm = mpi::NativeFromComm(sub);
      // Every rank is on this host, so allreduces go through dadt's shared memory unless the
      // test runs with DADT_SHM_ALLREDUCE=0 (mpi_conformance_no_shm_test: MPI_Allreduce itself).
      const char* shm = std::getenv("DADT_SHM_ALLREDUCE");
      options.shm_allreduce = shm == nullptr || std::string(shm) != "0";
      auto created = BackendRegistry::Create(backend, options);
      if (created.ok()) {
        body(world_rank_, **created);
      } else {
        ADD_FAILURE() << "rank " << world_rank_ << ": creating backend '" << backend
                      << "' failed: " << created.status().ToString();
      }
      MPI_Barrier(sub);  // every rank's body is done before any backend goes away
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  std::atomic<int>* counter_ = nullptr;
};

}  // namespace
}  // namespace conformance
}  // namespace backends
}  // namespace dadt

int main(int argc, char** argv) {
  dadt::backends::conformance::MpiProcessRunner runner;
  return dadt::testutil::RunTestsUnderMpi(argc, argv, [&runner] {
    if (!runner.Init()) {
      std::fprintf(stderr, "cannot map the shared counter\n");
      return false;
    }
    dadt::testutil::SetRankRunner("mpi", &runner);
    return true;
  });
}
