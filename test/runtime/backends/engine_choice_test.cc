// ChooseEngines as a table: each row is a request, an environment, a build and the GPUs, and the
// engines it must give or the error it must give (code and a part of the message). The rows cover
// every rule of runtime/backends/engine_choice.h and every launch the test tiers use today:
// dadtrun --gloo/--mpi, plain mpirun, a lone process, init(comm=...), each executor by name.
#include "runtime/backends/engine_choice.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dadt {
namespace backends {
namespace {

using Built = std::vector<std::string>;
const Built kCpu = {"gloo", "mpi"};
const Built kCuda = {"gloo", "mpi", "nccl"};
const Built kGlooOnly = {"gloo"};
constexpr ControlPlane kTcp = ControlPlane::kTcpStar;
constexpr ControlPlane kMpi = ControlPlane::kMpi;

EngineEnvironment Dadtrun(const char* controller, int size) {
  EngineEnvironment e;
  e.controller = controller;
  e.has_rendezvous = true;
  e.size = size;
  return e;
}
EngineEnvironment Mpirun() {
  EngineEnvironment e;
  e.under_mpirun = true;
  return e;
}
EngineEnvironment Lone() { return EngineEnvironment{}; }
EngineEnvironment WithDevice(EngineEnvironment e, const char* device) {
  e.device_data_plane = device;
  return e;
}
DeviceFacts Gpus(int visible, int local_ranks) {
  DeviceFacts d;
  d.visible_gpus = visible;
  d.why_none = visible ? "" : "no CUDA device visible";
  d.local_ranks = local_ranks;
  return d;
}
EngineRequest Executor(const char* name, bool mpi_comm = false) { return {name, mpi_comm}; }

struct Row {
  const char* what;
  EngineRequest request;
  EngineEnvironment environment;
  Built built;
  DeviceFacts devices;
  // Expected: the engines, or (error != kOk) the code and a part of the message.
  ControlPlane control = kTcp;
  const char* host = "gloo";
  const char* device = "";
  StatusCode error = StatusCode::kOk;
  const char* message = "";
};

const Row kRows[] = {
    // Launches with no executor named: the launcher's choice.
    {"dadtrun --gloo, CPU build", {}, Dadtrun("gloo", 2), kCpu, Gpus(0, 2), kTcp, "gloo", ""},
    {"dadtrun --mpi, CPU build", {}, Dadtrun("mpi", 2), kCpu, Gpus(0, 0), kMpi, "mpi", ""},
    {"plain mpirun", {}, Mpirun(), kCpu, Gpus(0, 0), kMpi, "mpi", ""},
    {"lone process", {}, Lone(), kCpu, Gpus(0, 1), kTcp, "gloo", ""},
    {"dadtrun --gloo, CUDA build, a GPU per rank", {}, Dadtrun("gloo", 2), kCuda, Gpus(2, 2),
     kTcp, "gloo", "nccl"},
    {"dadtrun --mpi, CUDA build, ranks per host not known yet", {}, Dadtrun("mpi", 2), kCuda,
     Gpus(1, 0), kMpi, "mpi", "nccl"},
    {"CUDA build, one GPU for two ranks: staged", {}, Dadtrun("gloo", 2), kCuda, Gpus(1, 2), kTcp,
     "gloo", ""},
    {"CUDA build, no GPU: staged", {}, Dadtrun("gloo", 2), kCuda, Gpus(0, 2), kTcp, "gloo", ""},
    {"DADT_DEVICE_BACKEND=none", {}, WithDevice(Dadtrun("gloo", 2), "none"), kCuda, Gpus(2, 2),
     kTcp, "gloo", ""},
    {"DADT_DEVICE_BACKEND=nccl", {}, WithDevice(Dadtrun("gloo", 2), "nccl"), kCuda, Gpus(2, 2),
     kTcp, "gloo", "nccl"},
    // Executors by name.
    {"gloo under dadtrun --gloo", Executor("gloo"), Dadtrun("gloo", 2), kCuda, Gpus(2, 2), kTcp,
     "gloo", ""},
    {"gloo under dadtrun --mpi: MPI negotiates, Gloo carries", Executor("gloo"),
     Dadtrun("mpi", 2), kCpu, Gpus(0, 0), kMpi, "gloo", ""},
    {"mpi under dadtrun --mpi", Executor("mpi"), Dadtrun("mpi", 2), kCuda, Gpus(2, 2), kMpi, "mpi",
     ""},
    {"mpi in a lone process: an MPI singleton", Executor("mpi"), Lone(), kCpu, Gpus(0, 1), kMpi,
     "mpi", ""},
    {"nccl under dadtrun --gloo: host tensors on Gloo", Executor("nccl"), Dadtrun("gloo", 2),
     kCuda, Gpus(2, 2), kTcp, "gloo", "nccl"},
    {"nccl under dadtrun --mpi: host tensors on MPI", Executor("nccl"), Dadtrun("mpi", 2), kCuda,
     Gpus(2, 2), kMpi, "mpi", "nccl"},
    {"nccl by name is not staged for want of GPUs", Executor("nccl"), Dadtrun("gloo", 2), kCuda,
     Gpus(1, 2), kTcp, "gloo", "nccl"},
    {"empty executor: the launcher's choice", Executor(""), Dadtrun("gloo", 2), kCpu, Gpus(0, 2),
     kTcp, "gloo", ""},
    // init(comm=...).
    {"communicator, no executor", Executor("", true), Dadtrun("gloo", 2), kCpu, Gpus(0, 0), kMpi,
     "mpi", ""},
    {"communicator and gloo", Executor("gloo", true), Mpirun(), kCpu, Gpus(0, 0), kMpi, "gloo",
     ""},
    {"communicator without MPI built", Executor("", true), Lone(), kGlooOnly, Gpus(0, 1), kTcp,
     "", "", StatusCode::kInvalidArgument, "needs MPI"},
    // Refusals.
    {"junk DADT_CONTROLLER", {}, Dadtrun("tcp", 2), kCpu, Gpus(0, 2), kTcp, "", "",
     StatusCode::kInvalidArgument, "DADT_CONTROLLER must be 'gloo' or 'mpi', got 'tcp'"},
    {"junk DADT_DEVICE_BACKEND", {}, WithDevice(Dadtrun("gloo", 2), "cuda"), kCuda, Gpus(2, 2),
     kTcp, "", "", StatusCode::kInvalidArgument, "DADT_DEVICE_BACKEND must be 'none' or 'nccl'"},
    {"DADT_DEVICE_BACKEND=nccl without NCCL", {}, WithDevice(Dadtrun("gloo", 2), "nccl"), kCpu,
     Gpus(0, 2), kTcp, "", "", StatusCode::kInvalidArgument, "this build has no NCCL"},
    {"unknown executor", Executor("tcp"), Dadtrun("gloo", 2), kCpu, Gpus(0, 2), kTcp, "", "",
     StatusCode::kInvalidArgument, "'tcp' is not an executor; use one of 'gloo', 'mpi'"},
    {"mpicuda is never built", Executor("mpicuda"), Dadtrun("gloo", 2), kCuda, Gpus(2, 2), kTcp,
     "", "", StatusCode::kInvalidArgument, "no CUDA-aware MPI path"},
    {"nccl without NCCL built", Executor("nccl"), Dadtrun("gloo", 2), kCpu, Gpus(0, 2), kTcp, "",
     "", StatusCode::kInvalidArgument, "this build of dadt has: gloo, mpi"},
    {"mpi without MPI built", Executor("mpi"), Lone(), kGlooOnly, Gpus(0, 1), kTcp, "", "",
     StatusCode::kInvalidArgument, "needs dadt built with MPI"},
    {"nccl without a GPU", Executor("nccl"), Dadtrun("gloo", 2), kCuda, Gpus(0, 2), kTcp, "", "",
     StatusCode::kPreconditionFailed, "the nccl executor needs a GPU: no CUDA device visible"},
    {"mpi under dadtrun --gloo", Executor("mpi"), Dadtrun("gloo", 2), kCpu, Gpus(0, 2), kTcp, "",
     "", StatusCode::kPreconditionFailed, "needs MPI as the controller"},
    {"mpi in a lone process of dadtrun --gloo -np 1", Executor("mpi"), Dadtrun("gloo", 1), kCpu,
     Gpus(0, 1), kTcp, "", "", StatusCode::kPreconditionFailed, "mpirun"},
};

class EngineChoiceTest : public ::testing::TestWithParam<Row> {};

TEST_P(EngineChoiceTest, GivesTheEnginesOrTheError) {
  const Row& row = GetParam();
  auto choice = ChooseEngines(row.request, row.environment, row.built, row.devices);
  if (row.error != StatusCode::kOk) {
    ASSERT_FALSE(choice.ok()) << "chose host " << choice->host_data_plane;
    EXPECT_EQ(choice.status().code(), row.error) << choice.status().ToString();
    EXPECT_NE(choice.status().message().find(row.message), std::string::npos)
        << choice.status().ToString();
    return;
  }
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_EQ(ControlPlaneName(choice->control_plane), std::string(ControlPlaneName(row.control)));
  EXPECT_EQ(choice->host_data_plane, row.host);
  EXPECT_EQ(choice->device_data_plane, row.device);
}

INSTANTIATE_TEST_SUITE_P(Table, EngineChoiceTest, ::testing::ValuesIn(kRows),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return "row" + std::to_string(info.index);
                         });

// Why GPU tensors are staged is said (for the log) only when there are GPUs, but too few.
TEST(EngineChoiceTest, SaysWhyGpuTensorsAreStaged) {
  auto short_of_gpus = ChooseEngines({}, Dadtrun("gloo", 4), kCuda, Gpus(2, 4));
  ASSERT_TRUE(short_of_gpus.ok());
  EXPECT_EQ(short_of_gpus->staged_because,
            "2 GPU(s) for 4 ranks on this host: GPU tensors are staged through host memory");
  auto no_gpu = ChooseEngines({}, Dadtrun("gloo", 4), kCuda, Gpus(0, 4));
  ASSERT_TRUE(no_gpu.ok());
  EXPECT_EQ(no_gpu->staged_because, "");
}

}  // namespace
}  // namespace backends
}  // namespace dadt
