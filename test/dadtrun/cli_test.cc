#include "dadtrun/cli.h"

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

using Args = std::vector<std::string>;

StatusOr<CommandLine> Parse(const Args& args) { return ParseCommandLine(args, "node1"); }

LaunchConfig MustParse(const Args& args) {
  StatusOr<CommandLine> cl = Parse(args);
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  if (!cl.ok()) return {};
  EXPECT_EQ(cl->action, CommandLine::Action::kRun);
  return cl->config;
}

std::string ErrorOf(const Args& args) {
  StatusOr<CommandLine> cl = Parse(args);
  EXPECT_FALSE(cl.ok()) << "accepted";
  if (cl.ok()) return "";
  EXPECT_EQ(cl.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cl.status().message().find('\n'), std::string::npos) << "not one line";
  return cl.status().message();
}

TEST(CliTest, CommandIsPassedThroughVerbatim) {
  LaunchConfig c = MustParse({"-np", "2", "python", "train.py", "--lr", "0.1", "-np", "9", "-H"});
  EXPECT_EQ(c.num_proc, 2);
  EXPECT_EQ(c.command, (Args{"python", "train.py", "--lr", "0.1", "-np", "9", "-H"}));
  EXPECT_EQ(c.controller, "auto");  // no --gloo/--mpi: resolved at launch
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_EQ(c.hosts[0].host, "localhost");
  EXPECT_EQ(c.hosts[0].slots, 2);
  EXPECT_FALSE(c.verbose);
}

TEST(CliTest, DefaultsLeaveTuningUnset) {
  LaunchConfig c = MustParse({"-np", "1", "true"});
  EXPECT_FALSE(c.fusion_threshold_bytes.has_value());
  EXPECT_FALSE(c.cycle_time_ms.has_value());
  EXPECT_FALSE(c.cache_capacity.has_value());
  EXPECT_FALSE(c.start_timeout_seconds.has_value());
  EXPECT_FALSE(c.log_level.has_value());
  EXPECT_FALSE(c.network_interface.has_value());
  EXPECT_TRUE(c.output_dir.empty());
}

TEST(CliTest, AllFlags) {
  LaunchConfig c = MustParse({"--gloo", "--num-proc", "3", "-H", "localhost:2,node1:2",
                              "--fusion-threshold-mb", "1.5", "--cycle-time-ms", "2.5",
                              "--cache-capacity", "0", "--start-timeout", "60", "--verbose",
                              "--log-level", "DEBUG", "--output-filename", "/tmp/out",
                              "--network-interface", "eth0", "sh", "-c", "echo hi"});
  EXPECT_EQ(c.num_proc, 3);
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].host, "node1");
  EXPECT_EQ(*c.fusion_threshold_bytes, 1572864);
  EXPECT_DOUBLE_EQ(*c.cycle_time_ms, 2.5);
  EXPECT_EQ(*c.cache_capacity, 0);
  EXPECT_EQ(*c.start_timeout_seconds, 60);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(*c.log_level, "debug");
  EXPECT_EQ(c.output_dir, "/tmp/out");
  EXPECT_EQ(*c.network_interface, "eth0");
  EXPECT_EQ(c.command, (Args{"sh", "-c", "echo hi"}));
}

TEST(CliTest, AlternativeSpellings) {
  EXPECT_EQ(MustParse({"-np=4", "x"}).num_proc, 4);
  EXPECT_EQ(MustParse({"--num-proc=5", "x"}).num_proc, 5);
  EXPECT_EQ(MustParse({"-np", "2", "-Hlocalhost:2", "x"}).hosts[0].slots, 2);
  EXPECT_EQ(MustParse({"-np", "2", "--hosts=localhost:2", "x"}).hosts[0].slots, 2);
  LaunchConfig c = MustParse({"-np", "2", "--", "-weird-command", "a"});
  EXPECT_EQ(c.command, (Args{"-weird-command", "a"}));
}

TEST(CliTest, HelpAndVersion) {
  StatusOr<CommandLine> help = Parse({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_EQ(help->action, CommandLine::Action::kHelp);
  EXPECT_NE(help->text.find("-np, --num-proc"), std::string::npos);
  EXPECT_NE(help->text.find("DADT_FUSION_THRESHOLD"), std::string::npos);
  EXPECT_EQ(Parse({"-h"})->action, CommandLine::Action::kHelp);
  StatusOr<CommandLine> version = Parse({"--version"});
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->action, CommandLine::Action::kVersion);
  EXPECT_EQ(version->text, std::string("dadtrun ") + kVersion + "\n");
}

TEST(CliTest, MissingOrBadNumProc) {
  EXPECT_NE(ErrorOf({"python", "x.py"}).find("-np/--num-proc is required"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "0", "x"}).find("positive integer, got '0'"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "-3", "x"}).find("-np"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "two", "x"}).find("got 'two'"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2.5", "x"}).find("got '2.5'"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np"}).find("needs a value"), std::string::npos);
}

TEST(CliTest, MissingCommand) {
  EXPECT_NE(ErrorOf({"-np", "2"}).find("no command given"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--"}).find("no command given"), std::string::npos);
}

TEST(CliTest, UnknownFlag) {
  EXPECT_NE(ErrorOf({"--bogus", "-np", "2", "x"}).find("unknown flag '--bogus'"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "-y", "cmd"}).find("unknown flag '-y'"), std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--mpi", "--gloo", "cmd"}).find("exclude each other"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "2", "--gloo", "--mpi-args", "-x A", "cmd"}).find("--mpi-args"),
            std::string::npos);
}

TEST(CliTest, BadTuningValues) {
  EXPECT_NE(ErrorOf({"-np", "1", "--fusion-threshold-mb", "big", "x"}).find("--fusion-threshold-mb"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--fusion-threshold-mb", "-1", "x"}).find(">= 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--cycle-time-ms", "0", "x"}).find("--cycle-time-ms"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--cycle-time-ms", "nan", "x"}).find("--cycle-time-ms"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--cache-capacity", "-5", "x"}).find("--cache-capacity"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--start-timeout", "0", "x"}).find("--start-timeout"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--log-level", "loud", "x"})
                .find("one of trace|debug|info|warning|error, got 'loud'"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"-np", "1", "--output-filename"}).find("needs a value"), std::string::npos);
}

TEST(CliTest, NumProcOverSlots) {
  std::string e = ErrorOf({"-np", "5", "-H", "localhost:2,127.0.0.1:2", "x"});
  EXPECT_NE(e.find("-np 5"), std::string::npos) << e;
  EXPECT_NE(e.find("4 slots"), std::string::npos) << e;
  EXPECT_EQ(MustParse({"-np", "4", "-H", "localhost:2,127.0.0.1:2", "x"}).num_proc, 4);
  EXPECT_EQ(MustParse({"-np", "1", "-H", "localhost:2", "x"}).num_proc, 1);
}

TEST(CliTest, RemoteHostsAndSshFlags) {
  LaunchConfig c = MustParse({"-np", "3", "-H", "localhost:1,gpu-box:2", "-p", "2222", "-i",
                              "/k/id", "x"});
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].host, "gpu-box");
  EXPECT_EQ(c.ssh_port, 2222);
  EXPECT_EQ(c.ssh_identity_file, "/k/id");
  EXPECT_NE(ErrorOf({"-np", "2", "-H", "localhost:x", "x"}).find("slot count"), std::string::npos);
  EXPECT_EQ(ErrorOf({"-np", "1", "-p", "99999", "x"}),
            "-p/--ssh-port expects a TCP port number 1-65535, got '99999'");
  EXPECT_EQ(ErrorOf({"-np", "1", "-H", "a:1", "--hostfile", "f", "x"}),
            "-H/--hosts and --hostfile both given; use one of them");
}

TEST(CliTest, EnvForwarding) {
  LaunchConfig c = MustParse({"-np", "1", "-x", "A=1 2", "-x", "B", "-x", "C=", "python", "-x"});
  ASSERT_EQ(c.forward_env.size(), 3u);
  EXPECT_EQ(c.forward_env[0].first, "A");
  EXPECT_EQ(*c.forward_env[0].second, "1 2");
  EXPECT_FALSE(c.forward_env[1].second.has_value());
  EXPECT_EQ(*c.forward_env[2].second, "");
  EXPECT_EQ(c.command, (std::vector<std::string>{"python", "-x"}));
  EXPECT_EQ(ErrorOf({"-np", "1", "-x", "1A=b", "x"}),
            "-x expects NAME or NAME=VALUE with NAME a variable name, got '1A=b'");
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
