// The elastic flags through the whole command-line parser (dadtrun/elastic_flags.h).
#include "dadtrun/elastic_flags.h"

#include <stdlib.h>

#include <optional>

#include <gtest/gtest.h>

#include "dadtrun/cli.h"

namespace dadt {
namespace dadtrun {
namespace {

using Args = std::vector<std::string>;

LaunchConfig MustParse(const Args& args) {
  StatusOr<CommandLine> cl = ParseCommandLine(args, "node1");
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  return cl.ok() ? cl->config : LaunchConfig{};
}

std::string ErrorOf(const Args& args) {
  StatusOr<CommandLine> cl = ParseCommandLine(args, "node1");
  EXPECT_FALSE(cl.ok()) << "accepted";
  if (cl.ok()) return "";
  EXPECT_EQ(cl.status().message().find('\n'), std::string::npos) << "not one line";
  return cl.status().message();
}

TEST(ElasticFlagsTest, OffWithoutElasticFlags) {
  LaunchConfig c = MustParse({"-np", "2", "python", "x.py"});
  EXPECT_FALSE(c.elastic.enabled);
}

TEST(ElasticFlagsTest, HorovodDefaults) {
  LaunchConfig c = MustParse({"-np", "3", "--host-discovery-script", "./d.sh", "python", "x.py"});
  EXPECT_TRUE(c.elastic.enabled);
  EXPECT_EQ(c.elastic.min_np, 3);  // -np
  EXPECT_EQ(c.elastic.max_np, 0);  // unbounded
  EXPECT_EQ(c.elastic.discovery_script, "./d.sh");
  EXPECT_EQ(c.elastic.slots_per_host, 1);
  EXPECT_EQ(c.elastic.elastic_timeout_seconds, 600);
  EXPECT_EQ(c.elastic.reset_limit, -1);
  EXPECT_FALSE(c.elastic.cooldown_range.has_value());
  EXPECT_TRUE(c.elastic.checkpoint_path.empty());
  EXPECT_TRUE(c.hosts.empty());  // from the script
  EXPECT_EQ(c.command, (Args{"python", "x.py"}));
}

TEST(ElasticFlagsTest, EveryFlag) {
  LaunchConfig c = MustParse({"--min-np", "2", "--max-np", "5", "--host-discovery-script", "d.sh",
                              "--slots-per-host", "4", "--elastic-timeout", "30", "--reset-limit", "3",
                              "--blacklist-cooldown-range", "10", "100", "--elastic-checkpoint", "/s/j.ckpt",
                              "python", "x.py", "--min-np", "9"});
  EXPECT_EQ(c.num_proc, 2);  // no -np: --min-np
  EXPECT_EQ(c.elastic.min_np, 2);
  EXPECT_EQ(c.elastic.max_np, 5);
  EXPECT_EQ(c.elastic.slots_per_host, 4);
  EXPECT_EQ(c.elastic.elastic_timeout_seconds, 30);
  EXPECT_EQ(c.elastic.reset_limit, 3);
  ASSERT_TRUE(c.elastic.cooldown_range.has_value());
  EXPECT_EQ(c.elastic.cooldown_range->first, 10);
  EXPECT_EQ(c.elastic.cooldown_range->second, 100);
  EXPECT_EQ(c.elastic.checkpoint_path, "/s/j.ckpt");
  EXPECT_EQ(c.command, (Args{"python", "x.py", "--min-np", "9"}));
}

TEST(ElasticFlagsTest, MinNpOnFixedHostsIsFaultTolerance) {
  LaunchConfig c = MustParse({"-np", "3", "--min-np", "2", "-H", "a:1,b:1,c:1", "python", "x.py"});
  EXPECT_TRUE(c.elastic.enabled);
  EXPECT_EQ(c.elastic.min_np, 2);
  EXPECT_TRUE(c.elastic.discovery_script.empty());
  EXPECT_EQ(c.hosts.size(), 3u);
  // -np above the slots is fine in elastic mode: --min-np is what must fit.
  c = MustParse({"-np", "4", "--min-np", "2", "-H", "a:1,b:1", "python", "x.py"});
  EXPECT_EQ(c.elastic.min_np, 2);
}

TEST(ElasticFlagsTest, MpiIsRefused) {
  EXPECT_EQ(ErrorOf({"--mpi", "-np", "2", "--min-np", "1", "python", "x.py"}),
            "elastic training needs --gloo: MPI cannot change the size of its world");
  EXPECT_EQ(ErrorOf({"--mpi", "-np", "2", "--host-discovery-script", "d.sh", "python", "x.py"}),
            "elastic training needs --gloo: MPI cannot change the size of its world");
  EXPECT_TRUE(MustParse({"--gloo", "-np", "2", "--min-np", "1", "python", "x.py"}).elastic.enabled);
}

TEST(ElasticFlagsTest, BadValuesNameTheirFlag) {
  EXPECT_NE(ErrorOf({"--min-np", "0", "python", "x.py"}).find("--min-np expects a positive integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--max-np", "x", "--min-np", "1", "python"}).find("--max-np expects"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "4", "--max-np", "2", "--min-np", "3", "-H", "a:4", "python"})
                .find("--max-np 2 is less than --min-np 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--host-discovery-script", "d", "--elastic-timeout", "0", "python"})
                .find("--elastic-timeout expects a whole number of seconds >= 1, got '0'"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--host-discovery-script", "d", "--reset-limit", "-1", "python"})
                .find("--reset-limit expects"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "9", "3", "python"})
                .find("--blacklist-cooldown-range expects MIN MAX"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "9"})
                .find("--blacklist-cooldown-range needs 2 values"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--host-discovery-script", "d", "--slots-per-host", "0", "python"})
                .find("--slots-per-host expects a positive integer"),
            std::string::npos);
}

// horovodrun takes -H with --host-discovery-script (Horovod's elastic examples give both) and
// discovers with the script alone; dadtrun does the same and says so.
TEST(ElasticFlagsTest, HostsBesideADiscoveryScriptAreIgnoredWithANotice) {
  for (const Args& hosts : {Args{"-H", "a:2,b:2"}, Args{"--hosts", "a:4"}}) {
    Args args = {"-np", "2", "--min-np", "2", "--host-discovery-script", "./d.sh"};
    args.insert(args.end(), hosts.begin(), hosts.end());
    args.insert(args.end(), {"python", "train.py"});
    LaunchConfig c = MustParse(args);
    EXPECT_TRUE(c.elastic.enabled);
    EXPECT_EQ(c.elastic.discovery_script, "./d.sh");
    EXPECT_TRUE(c.hosts.empty());  // from the script
    EXPECT_FALSE(c.hosts_given);
    ASSERT_EQ(c.notices.size(), 1u);
    EXPECT_NE(c.notices[0].find("-H/--hostfile ignored: --host-discovery-script names the hosts"),
              std::string::npos)
        << c.notices[0];
  }
  // Without -H nothing is said.
  EXPECT_TRUE(MustParse({"-np", "2", "--host-discovery-script", "./d.sh", "python"}).notices.empty());
  // A malformed -H is still an error: it was typed, and may be a typo of something else.
  EXPECT_NE(ErrorOf({"-np", "2", "--host-discovery-script", "d", "-H", "a:x", "python"}), "");
}

// horovodrun reads HOROVOD_ELASTIC_TIMEOUT and HOROVOD_START_TIMEOUT when the flags are not given;
// dadtrun reads them or their DADT_ names (runtime/common/env.h), the flag and the DADT_ name first.
TEST(ElasticFlagsTest, TimeoutsComeFromHorovodsVariablesToo) {
  for (const char* name : {"DADT_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT", "DADT_START_TIMEOUT",
                           "HOROVOD_START_TIMEOUT"}) {
    ::unsetenv(name);
  }
  const Args elastic = {"-np", "2", "--host-discovery-script", "d", "python"};
  EXPECT_EQ(MustParse(elastic).elastic.elastic_timeout_seconds, 600);
  EXPECT_FALSE(MustParse(elastic).start_timeout_seconds.has_value());
  ::setenv("HOROVOD_ELASTIC_TIMEOUT", "90", 1);
  ::setenv("HOROVOD_START_TIMEOUT", "45", 1);
  EXPECT_EQ(MustParse(elastic).elastic.elastic_timeout_seconds, 90);
  EXPECT_EQ(MustParse(elastic).start_timeout_seconds, std::optional<int64_t>(45));
  ::setenv("DADT_ELASTIC_TIMEOUT", "120", 1);
  ::setenv("DADT_START_TIMEOUT", "50", 1);
  EXPECT_EQ(MustParse(elastic).elastic.elastic_timeout_seconds, 120);
  EXPECT_EQ(MustParse(elastic).start_timeout_seconds, std::optional<int64_t>(50));
  LaunchConfig flags = MustParse({"-np", "2", "--host-discovery-script", "d", "--elastic-timeout", "7",
                                  "--start-timeout", "8", "python"});
  EXPECT_EQ(flags.elastic.elastic_timeout_seconds, 7);
  EXPECT_EQ(flags.start_timeout_seconds, std::optional<int64_t>(8));
  ::unsetenv("DADT_ELASTIC_TIMEOUT");
  ::unsetenv("DADT_START_TIMEOUT");
  ::setenv("HOROVOD_ELASTIC_TIMEOUT", "soon", 1);
  EXPECT_EQ(ErrorOf(elastic), "HOROVOD_ELASTIC_TIMEOUT expects a whole number of seconds >= 1, got 'soon'");
  ::unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  ::setenv("HOROVOD_START_TIMEOUT", "0", 1);
  EXPECT_EQ(ErrorOf(elastic), "HOROVOD_START_TIMEOUT='0' is not a whole number of seconds >= 1");
  ::unsetenv("HOROVOD_START_TIMEOUT");
}

TEST(ElasticFlagsTest, ConflictsAreRefused) {
  EXPECT_NE(ErrorOf({"-np", "2", "--reset-limit", "3", "python"}).find("are elastic flags"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--elastic-checkpoint", "/s/j.ckpt", "python"}).find("are elastic flags"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--min-np", "1", "--elastic-checkpoint", "/s/", "python"})
                .find("--elastic-checkpoint expects a file path"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--min-np", "2", "-H", "a:2", "--slots-per-host", "2", "python"})
                .find("--slots-per-host applies to --host-discovery-script"),
            std::string::npos);
  EXPECT_EQ(ErrorOf({"-np", "2", "--min-np", "3", "-H", "a:1,b:1", "python"}),
            "--min-np 3 is more than the 2 slots of the fixed host list; lower it, add slots, or use "
            "--host-discovery-script");
  EXPECT_NE(ErrorOf({"--max-np", "3", "python"}).find("-np/--num-proc is required"), std::string::npos);
}

TEST(ElasticFlagsTest, HelpListsTheFlags) {
  const std::string help = UsageText();
  for (const char* flag : {"--min-np", "--max-np", "--host-discovery-script", "--slots-per-host",
                           "--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range",
                           "--elastic-checkpoint"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
