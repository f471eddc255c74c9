// dadtrun's stall-check flags: parsing, errors, and the DADT_STALL_* variables each rank gets.
#include <gtest/gtest.h>

#include "dadtrun/cli.h"
#include "dadtrun/worker_env.h"

namespace dadt {
namespace dadtrun {
namespace {

using Args = std::vector<std::string>;

// The variables rank 0 sees for `flags` (the user's environment sets DADT_STALL_CHECK_TIME_SECONDS=9).
StatusOr<EnvMap> RankEnv(Args flags) {
  flags.insert(flags.begin(), {"-np", "2"});
  flags.push_back("true");
  StatusOr<CommandLine> cl = ParseCommandLine(flags, "node1");
  if (!cl.ok()) return cl.status();
  JobEndpoints e;
  e.rendezvous_addr = "127.0.0.1";
  e.rendezvous_port = 1;
  e.secret = "s";
  return WorkerEnvironment(cl->config, e, {{"DADT_STALL_CHECK_TIME_SECONDS", "9"}}, 0);
}

TEST(StallFlagsTest, UnsetFlagsLeaveTheUsersEnvironment) {
  auto env = RankEnv({});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ((*env)["DADT_STALL_CHECK_TIME_SECONDS"], "9");
  EXPECT_EQ(env->count("DADT_STALL_SHUTDOWN_TIME_SECONDS"), 0u);
  EXPECT_EQ(env->count("DADT_STALL_CHECK_DISABLE"), 0u);
}

TEST(StallFlagsTest, EachFlagMapsToItsVariable) {
  auto env = RankEnv({"--stall-check-warning-time-seconds", "2.5", "--stall-check-shutdown-time-seconds=30"});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ((*env)["DADT_STALL_CHECK_TIME_SECONDS"], "2.5");
  EXPECT_EQ((*env)["DADT_STALL_SHUTDOWN_TIME_SECONDS"], "30");
  auto off = RankEnv({"--no-stall-check"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ((*off)["DADT_STALL_CHECK_DISABLE"], "1");
  EXPECT_TRUE(RankEnv({"--stall-check-shutdown-time-seconds", "0"}).ok()) << "0 = never";
}

TEST(StallFlagsTest, BadValuesGetOneLineNamingTheFlag) {
  struct Case { Args flags; std::string flag; };
  for (const Case& c : {Case{{"--stall-check-warning-time-seconds", "0"}, "--stall-check-warning-time-seconds"},
                        Case{{"--stall-check-warning-time-seconds", "soon"}, "--stall-check-warning-time-seconds"},
                        Case{{"--stall-check-shutdown-time-seconds", "-1"}, "--stall-check-shutdown-time-seconds"},
                        Case{{"--no-stall-check", "--stall-check-warning-time-seconds", "5"}, "--no-stall-check"}}) {
    auto env = RankEnv(c.flags);
    ASSERT_FALSE(env.ok()) << c.flags[0];
    EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(env.status().message().find(c.flag), std::string::npos) << env.status().message();
    EXPECT_EQ(env.status().message().find('\n'), std::string::npos) << env.status().message();
  }
}

TEST(StallFlagsTest, HelpListsTheFlags) {
  const std::string usage = UsageText();
  for (const char* f : {"--no-stall-check", "--stall-check-warning-time-seconds",
                        "--stall-check-shutdown-time-seconds", "DADT_STALL_CHECK_TIME_SECONDS"}) {
    EXPECT_NE(usage.find(f), std::string::npos) << f;
  }
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
