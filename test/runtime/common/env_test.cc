// env::FindOnPath: how dadtrun finds mpirun and srun, as a shell would. Horovod's names for
// dadt's knobs (env::kHorovodAliases): which are there, which name wins, what init says. Which MPI
// launcher started a process (env::DetectMpiLauncher).
#include "runtime/common/env.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dadt {
namespace env {
namespace {

class FindOnPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dadt_env_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    for (const char* d : {"/a", "/b", "/c"}) ASSERT_EQ(::mkdir((root_ + d).c_str(), 0755), 0);
    const char* old = std::getenv("PATH");
    saved_path_ = old ? old : "";
  }
  void TearDown() override {
    ::setenv("PATH", saved_path_.c_str(), 1);
    std::string cmd = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void MakeFile(const std::string& rel, mode_t mode) {
    std::ofstream(root_ + rel) << "#!/bin/sh\n";
    ASSERT_EQ(::chmod((root_ + rel).c_str(), mode), 0);
  }
  std::string root_;
  std::string saved_path_;
};

TEST_F(FindOnPathTest, TakesTheFirstExecutableRegularFileInPathOrder) {
  MakeFile("/a/tool", 0644);                                   // not executable: skipped
  ASSERT_EQ(::mkdir((root_ + "/b/tool").c_str(), 0755), 0);  // a directory: skipped
  MakeFile("/c/tool", 0755);
  ::setenv("PATH", ("::" + root_ + "/a:" + root_ + "/b:" + root_ + "/c").c_str(), 1);
  EXPECT_EQ(FindOnPath("tool"), root_ + "/c/tool");
  MakeFile("/a/tool2", 0755);
  MakeFile("/c/tool2", 0755);
  EXPECT_EQ(FindOnPath("tool2"), root_ + "/a/tool2");
}

TEST_F(FindOnPathTest, EmptyWhenAbsentOrPathUnset) {
  ::setenv("PATH", (root_ + "/a").c_str(), 1);
  EXPECT_EQ(FindOnPath("no-such-tool"), "");
  ::unsetenv("PATH");
  EXPECT_EQ(FindOnPath("sh"), "");
}

// Clears every aliased variable (both names) for the test and puts the old values back after.
class HorovodAliasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const HorovodAlias& a : kHorovodAliases) {
      for (const char* name : {a.dadt, a.horovod}) {
        const char* old = std::getenv(name);
        if (old) saved_.emplace_back(name, old);
        ::unsetenv(name);
      }
    }
    ::unsetenv("HOROVOD_EAGER_THRESHOLD");
  }
  void TearDown() override {
    for (const HorovodAlias& a : kHorovodAliases) {
      ::unsetenv(a.dadt);
      ::unsetenv(a.horovod);
    }
    ::unsetenv("HOROVOD_EAGER_THRESHOLD");
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

// The knobs the issue names, each under the name Horovod gives it (horovod/common/common.h and
// horovodrun's HOROVOD_START_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT), and nothing aliased twice.
TEST_F(HorovodAliasTest, TableHasHorovodsNamesForTheSameKnobs) {
  const std::vector<std::pair<const char*, const char*>> expected = {
      {kTimeline, "HOROVOD_TIMELINE"},
      {kTimelineMarkCycles, "HOROVOD_TIMELINE_MARK_CYCLES"},
      {kFusionThreshold, "HOROVOD_FUSION_THRESHOLD"},
      {kCycleTime, "HOROVOD_CYCLE_TIME"},
      {kCacheCapacity, "HOROVOD_CACHE_CAPACITY"},
      {kHierarchicalAllreduce, "HOROVOD_HIERARCHICAL_ALLREDUCE"},
      {kStallCheckDisable, "HOROVOD_STALL_CHECK_DISABLE"},
      {kStallCheckTime, "HOROVOD_STALL_CHECK_TIME_SECONDS"},
      {kStallShutdownTime, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"},
      {kAutotune, "HOROVOD_AUTOTUNE"},
      {kAutotuneLog, "HOROVOD_AUTOTUNE_LOG"},
      {kAutotuneWarmupSamples, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES"},
      {kAutotuneStepsPerSample, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"},
      {kAutotuneMaxSamples, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"},
      {kAutotuneNoise, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"},
      {kLogLevel, "HOROVOD_LOG_LEVEL"},
      {kGlooTimeout, "HOROVOD_GLOO_TIMEOUT_SECONDS"},
      {kStartTimeout, "HOROVOD_START_TIMEOUT"},
      {kElasticTimeout, "HOROVOD_ELASTIC_TIMEOUT"},
      {kIface, "HOROVOD_GLOO_IFACE"},
  };
  for (const auto& [dadt_name, horovod_name] : expected) {
    ASSERT_NE(HorovodAliasOf(dadt_name), nullptr) << dadt_name;
    EXPECT_STREQ(HorovodAliasOf(dadt_name), horovod_name);
  }
  std::set<std::string> dadt_names, horovod_names;
  for (const HorovodAlias& a : kHorovodAliases) {
    EXPECT_EQ(std::strncmp(a.dadt, "DADT_", 5), 0) << a.dadt;
    EXPECT_EQ(std::strncmp(a.horovod, "HOROVOD_", 8), 0) << a.horovod;
    EXPECT_TRUE(dadt_names.insert(a.dadt).second) << a.dadt << " aliased twice";
    EXPECT_TRUE(horovod_names.insert(a.horovod).second) << a.horovod << " used twice";
  }
  // Launcher -> worker contract and knobs Horovod lacks: no alias.
  for (const char* name : {kRank, kSize, kController, kSecret, kEagerThreshold, kElastic}) {
    EXPECT_EQ(HorovodAliasOf(name), nullptr) << name;
  }
}

TEST_F(HorovodAliasTest, HorovodNameIsReadWhenTheDadtNameIsUnset) {
  ::setenv("HOROVOD_FUSION_THRESHOLD", "1048576", 1);
  ::setenv("HOROVOD_CYCLE_TIME", "2.5", 1);  // milliseconds, as DADT_CYCLE_TIME
  ::setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "1", 1);
  ::setenv("HOROVOD_TIMELINE", "/tmp/tl.json", 1);
  EXPECT_TRUE(IsSet(kFusionThreshold));
  EXPECT_EQ(*GetFusionThreshold(), 1048576);
  EXPECT_EQ(*GetInt(kFusionThreshold, 0), 1048576);
  EXPECT_DOUBLE_EQ(*GetDouble(kCycleTime, kDefaultCycleTimeMs), 2.5);
  EXPECT_TRUE(*GetBool(kHierarchicalAllreduce, false));
  EXPECT_EQ(GetString(kTimeline), "/tmp/tl.json");
  EXPECT_STREQ(Source(kTimeline), "HOROVOD_TIMELINE");
  EXPECT_STREQ(Source(kCacheCapacity), kCacheCapacity);  // neither set: its own name
  EXPECT_FALSE(IsSet(kCacheCapacity));
  EXPECT_EQ(*GetInt(kCacheCapacity, kDefaultCacheCapacity), kDefaultCacheCapacity);
  // A variable without an alias is not looked up under a HOROVOD_ name.
  ::setenv("HOROVOD_EAGER_THRESHOLD", "7", 1);
  EXPECT_FALSE(IsSet(kEagerThreshold));
}

TEST_F(HorovodAliasTest, DadtNameWinsWhenBothAreSet) {
  ::setenv("HOROVOD_CYCLE_TIME", "5", 1);
  ::setenv(kCycleTime, "2", 1);
  EXPECT_DOUBLE_EQ(*GetDouble(kCycleTime, 1.0), 2.0);
  EXPECT_STREQ(Source(kCycleTime), kCycleTime);
  // An empty DADT_ name counts as unset, as everywhere in env.h.
  ::setenv(kCycleTime, "", 1);
  EXPECT_DOUBLE_EQ(*GetDouble(kCycleTime, 1.0), 5.0);
}

TEST_F(HorovodAliasTest, ErrorsNameTheVariableThatWasRead) {
  ::setenv("HOROVOD_FUSION_THRESHOLD", "1e6", 1);
  StatusOr<int64_t> bytes = GetFusionThreshold();
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().message().rfind("HOROVOD_FUSION_THRESHOLD='1e6' is not a number of bytes", 0), 0u)
      << bytes.status().message();
  ::setenv("HOROVOD_CACHE_CAPACITY", "lots", 1);
  StatusOr<int64_t> entries = GetInt(kCacheCapacity, 0);
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().message(), "HOROVOD_CACHE_CAPACITY='lots' is not an integer");
  ::setenv("HOROVOD_STALL_CHECK_DISABLE", "maybe", 1);
  EXPECT_NE(GetBool(kStallCheckDisable, false).status().message().find("HOROVOD_STALL_CHECK_DISABLE"),
            std::string::npos);
}

TEST_F(HorovodAliasTest, LookupInAMapFollowsTheSameRule) {
  std::map<std::string, std::string> env = {{"HOROVOD_START_TIMEOUT", "45"}, {"HOROVOD_EAGER_THRESHOLD", "1"}};
  EXPECT_EQ(LookupIn(env, kStartTimeout), "45");
  EXPECT_EQ(LookupIn(env, kEagerThreshold), "");  // no alias
  env[kStartTimeout] = "";
  EXPECT_EQ(LookupIn(env, kStartTimeout), "45");  // empty counts as unset
  env[kStartTimeout] = "50";
  EXPECT_EQ(LookupIn(env, kStartTimeout), "50");
  EXPECT_EQ(LookupIn(env, kIface), "");
}

TEST_F(HorovodAliasTest, NoticesNameEachAliasTakenOrIgnored) {
  EXPECT_TRUE(HorovodAliasNotices().empty());
  ::setenv("HOROVOD_FUSION_THRESHOLD", "1048576", 1);
  ::setenv("HOROVOD_CYCLE_TIME", "5", 1);
  ::setenv(kCycleTime, "2", 1);
  ::setenv("HOROVOD_TIMELINE", "/tmp/a.json", 1);
  ::setenv(kTimeline, "/tmp/a.json", 1);  // the same value: nothing to say
  EXPECT_EQ(HorovodAliasNotices(),
            (std::vector<std::string>{"HOROVOD_FUSION_THRESHOLD=1048576 taken as DADT_FUSION_THRESHOLD",
                                      "HOROVOD_CYCLE_TIME=5 ignored: DADT_CYCLE_TIME=2 is set"}));
}

// Which MPI launcher started a process (DetectMpiLauncher): the rule that says whether a plain
// launch uses MPI, and which ABI its MPI engine must have.
class MpiLauncherTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {kOmpiWorldSize, kPmiRank, kPmiSize, kHydraLocalRank,
                                          kHydraLocalSize};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      if (old) saved_[v] = old;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  std::map<std::string, std::string> saved_;
};

TEST_F(MpiLauncherTest, OpenMpiHydraOrNone) {
  EXPECT_EQ(DetectMpiLauncher(), MpiLauncher::kNone);
  // MPICH's and Intel MPI's Hydra: mpiexec -n 2 / mpirun -np 2 -ppn 2 -hosts localhost.
  ::setenv(kPmiRank, "1", 1);
  ::setenv(kPmiSize, "2", 1);
  EXPECT_EQ(DetectMpiLauncher(), MpiLauncher::kNone);  // PMI alone: Slurm's srun --mpi=pmi2
  ::setenv(kHydraLocalRank, "1", 1);
  ::setenv(kHydraLocalSize, "2", 1);
  EXPECT_EQ(DetectMpiLauncher(), MpiLauncher::kHydra);
  ::setenv(kOmpiWorldSize, "2", 1);  // Open MPI's mpirun wins when both are there
  EXPECT_EQ(DetectMpiLauncher(), MpiLauncher::kOpenMpi);
  ::unsetenv(kPmiSize);
  EXPECT_EQ(DetectMpiLauncher(), MpiLauncher::kOpenMpi);
  ::setenv(kOmpiWorldSize, "", 1);  // empty counts as unset
  EXPECT_EQ(DetectMpiLauncher(), MpiLauncher::kNone);
}

}  // namespace
}  // namespace env
}  // namespace dadt
