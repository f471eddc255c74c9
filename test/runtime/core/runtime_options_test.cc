// RuntimeOptions::FromEnv: the Gloo knobs' values reach the options, and junk is refused with a
// message that names the variable.
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "gtest/gtest.h"
#include "runtime/common/env.h"
#include "runtime/core/runtime.h"

namespace dadt {
namespace core {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(RuntimeOptionsTest, GlooSegmentBytesDefaultsToTheEngineAndReachesTheOptions) {
  auto defaults = RuntimeOptions::FromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->segment_bytes, 0);  // 0: the engine's own (Gloo: sized to the link)

  ScopedEnv set("DADT_GLOO_SEGMENT_BYTES", "262144");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->segment_bytes, 262144);
}

// Each of `bad` as `name` is refused with a message that names the variable.
void ExpectRefused(const char* name, std::initializer_list<const char*> bad) {
  for (const char* value : bad) {
    ScopedEnv set(name, value);
    auto options = RuntimeOptions::FromEnv();
    ASSERT_FALSE(options.ok()) << name << "=" << value;
    EXPECT_EQ(options.status().code(), StatusCode::kInvalidArgument) << name << "=" << value;
    EXPECT_NE(options.status().message().find(name), std::string::npos)
        << options.status().ToString();
  }
}

TEST(RuntimeOptionsTest, ACycleTimeInTheEnvironmentCountsAsChosen) {
  auto defaults = RuntimeOptions::FromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_FALSE(defaults->cycle_time_given);
  EXPECT_EQ(defaults->cycle_time_ms, 1.0);

  ScopedEnv set("DADT_CYCLE_TIME", "1");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_TRUE(options->cycle_time_given);  // even the default's value: kept, not measured
}

TEST(RuntimeOptionsTest, BadGlooSegmentBytesNameTheVariable) {
  ExpectRefused("DADT_GLOO_SEGMENT_BYTES", {"-1", "abc", "1.5x"});
}

TEST(RuntimeOptionsTest, GlooThreadsDefaultsToTwoAndReachesTheOptions) {
  auto defaults = RuntimeOptions::FromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->gloo_threads, 2);

  ScopedEnv set("DADT_GLOO_THREADS", "1");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->gloo_threads, 1);
}

TEST(RuntimeOptionsTest, BadGlooThreadsNameTheVariable) {
  ExpectRefused("DADT_GLOO_THREADS", {"0", "-2", "16", "two"});
}

TEST(RuntimeOptionsTest, FusionThresholdIsAnIntegerNumberOfBytes) {
  auto defaults = RuntimeOptions::FromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->fusion_threshold_bytes, env::kDefaultFusionThresholdBytes);
  ScopedEnv set("DADT_FUSION_THRESHOLD", "0");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->fusion_threshold_bytes, 0);
}

// The Python training modes read the variable with the same function (dadt_env_fusion_threshold).
TEST(RuntimeOptionsTest, BadFusionThresholdIsRefusedWithOneMessage) {
  ExpectRefused("DADT_FUSION_THRESHOLD", {"1e6", "-1", "64MB", "1.5"});
  ScopedEnv set("DADT_FUSION_THRESHOLD", "1e6");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().message(), env::GetFusionThreshold().status().message());
  EXPECT_NE(options.status().message().find("'1e6' is not a number of bytes"), std::string::npos)
      << options.status().message();
}

TEST(RuntimeOptionsTest, RealtimeThreadsAreOptIn) {
  auto defaults = RuntimeOptions::FromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_FALSE(defaults->realtime_threads);
  ScopedEnv set("DADT_REALTIME_THREADS", "1");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_TRUE(options->realtime_threads);
}

// The engines as the environment alone chooses them (backends/engine_choice.h), refused early.
TEST(RuntimeOptionsTest, EnginesComeFromTheEnvironmentAndJunkIsRefused) {
  ExpectRefused("DADT_CONTROLLER", {"tcp", "nccl"});
  ExpectRefused("DADT_DEVICE_BACKEND", {"cuda"});
  auto tcp = RuntimeOptions::FromEnv();
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  EXPECT_EQ(tcp->engines.control_plane, backends::ControlPlane::kTcpStar);
  EXPECT_EQ(tcp->engines.host_data_plane, "gloo");
  ScopedEnv mpirun("OMPI_COMM_WORLD_SIZE", "4");  // plain mpirun: MPI, geometry from MPI later
  ScopedEnv size("DADT_SIZE", "4");
  auto mpi = RuntimeOptions::FromEnv();
  ASSERT_TRUE(mpi.ok()) << mpi.status().ToString();
  EXPECT_EQ(mpi->engines.control_plane, backends::ControlPlane::kMpi);
  EXPECT_EQ(mpi->engines.host_data_plane, "mpi");
  EXPECT_EQ(mpi->size, 1);
}

// MPICH's and Intel MPI's Hydra launchers (mpiexec -n 2 python3 train.py) choose MPI the same way.
TEST(RuntimeOptionsTest, AHydraLauncherChoosesMpiToo) {
  ScopedEnv pmi_rank("PMI_RANK", "1");
  ScopedEnv pmi_size("PMI_SIZE", "2");
  auto alone = RuntimeOptions::FromEnv();  // PMI_* alone (srun --mpi=pmi2) is no launcher of MPI
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->engines.control_plane, backends::ControlPlane::kTcpStar);
  ScopedEnv local_rank("MPI_LOCALRANKID", "1");
  ScopedEnv local_size("MPI_LOCALNRANKS", "2");
  auto mpi = RuntimeOptions::FromEnv();
  ASSERT_TRUE(mpi.ok()) << mpi.status().ToString();
  EXPECT_EQ(mpi->engines.control_plane, backends::ControlPlane::kMpi);
  EXPECT_EQ(mpi->engines.host_data_plane, "mpi");
  ScopedEnv dadtrun("DADT_RANK", "1");  // a launcher that set dadt's contract decides instead
  ScopedEnv dadtrun_size("DADT_SIZE", "2");
  ScopedEnv rendezvous("DADT_RENDEZVOUS_ADDR", "127.0.0.1");
  auto tcp = RuntimeOptions::FromEnv();
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  EXPECT_EQ(tcp->engines.control_plane, backends::ControlPlane::kTcpStar);
}

TEST(RuntimeOptionsTest, ElasticWorkersNeedAnIdAndATcpControllerAndReadTheirTimeout) {
  ScopedEnv elastic("DADT_ELASTIC", "1");
  {
    auto options = RuntimeOptions::FromEnv();
    ASSERT_FALSE(options.ok());
    EXPECT_NE(options.status().message().find("DADT_ELASTIC_WORKER_ID"), std::string::npos)
        << options.status().ToString();
  }
  ScopedEnv id("DADT_ELASTIC_WORKER_ID", "h1/0/7");
  ScopedEnv rendezvous("DADT_RENDEZVOUS_ADDR", "127.0.0.1");
  ScopedEnv controller("DADT_CONTROLLER", "gloo");
  ScopedEnv timeout("DADT_ELASTIC_TIMEOUT", "42");
  auto options = RuntimeOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_TRUE(options->elastic);
  EXPECT_EQ(options->elastic_worker_id, "h1/0/7");
  EXPECT_EQ(options->elastic_timeout, std::chrono::seconds(42));
  ExpectRefused("DADT_ELASTIC_TIMEOUT", {"0", "-5", "soon"});
  {
    ScopedEnv mpi("DADT_CONTROLLER", "mpi");
    auto refused = RuntimeOptions::FromEnv();
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("MPI cannot change the size of its world"),
              std::string::npos) << refused.status().ToString();
  }
}

}  // namespace
}  // namespace core
}  // namespace dadt
