#include "dadtrun/config_file.h"

#include <gtest/gtest.h>

#include <tuple>

#include "dadtrun/cli.h"

namespace dadt {
namespace dadtrun {
namespace {

std::vector<std::pair<std::string, std::string>> Flags(const std::string& yaml) {
  StatusOr<std::vector<ConfigFlag>> f = ParseConfigText(yaml, "'t.yaml'");
  EXPECT_TRUE(f.ok()) << f.status().message();
  std::vector<std::pair<std::string, std::string>> out;
  if (f.ok()) {
    for (const ConfigFlag& c : *f) out.emplace_back(c.flag, c.value);
  }
  return out;
}

std::string ErrorOf(const std::string& yaml) {
  StatusOr<std::vector<ConfigFlag>> f = ParseConfigText(yaml, "'t.yaml'");
  return f.ok() ? "" : f.status().message();
}

TEST(ConfigFileTest, SectionsMapToFlags) {
  EXPECT_EQ(Flags("num_proc: 4\n"
                  "hosts: [h1:2, {host: h2, slots: 2}]\n"
                  "ssh: {port: 2222, identity_file: /k}\n"
                  "network_interface: eth1\n"
                  "env: {A: 1, B: null}\n"
                  "tuning: {fusion_threshold_mb: 32}\n"
                  "logging: {verbose: true, log_level: debug}\n"
                  "timeline: {mark_cycles: false}\n"),
            (std::vector<std::pair<std::string, std::string>>{
                {"--num-proc", "4"}, {"--hosts", "h1:2,h2:2"}, {"--ssh-port", "2222"},
                {"--ssh-identity-file", "/k"}, {"--network-interface", "eth1"}, {"-x", "A=1"},
                {"-x", "B"}, {"--fusion-threshold-mb", "32"}, {"--verbose", "true"},
                {"--log-level", "debug"}}));
  EXPECT_TRUE(Flags("").empty());
  EXPECT_TRUE(Flags("# only a comment\n").empty());
}

TEST(ConfigFileTest, ElasticSection) {
  EXPECT_EQ(Flags("elastic: {min_np: 2, max_np: 8, host_discovery_script: ./d.sh, slots_per_host: 2,\n"
                  "          timeout: 30, reset_limit: 5, blacklist_cooldown_range: [10, 300],\n"
                  "          checkpoint: /shared/j.ckpt}\n"),
            (std::vector<std::pair<std::string, std::string>>{
                {"--min-np", "2"}, {"--max-np", "8"}, {"--host-discovery-script", "./d.sh"},
                {"--slots-per-host", "2"}, {"--elastic-timeout", "30"}, {"--reset-limit", "5"},
                {"--blacklist-cooldown-range", "10 300"}, {"--elastic-checkpoint", "/shared/j.ckpt"}}));
  EXPECT_EQ(Flags("elastic: {blacklist_cooldown_range: 5 50}\n"),
            (std::vector<std::pair<std::string, std::string>>{{"--blacklist-cooldown-range", "5 50"}}));
  EXPECT_EQ(ErrorOf("elastic: {blacklist_cooldown_range: [10]}\n"),
            "config file 't.yaml': 'elastic.blacklist_cooldown_range' must be two values, e.g. [10, 300]");
  EXPECT_EQ(ErrorOf("elastic: {min_nps: 2}\n"),
            "config file 't.yaml': 'elastic.min_nps' is not a known setting; see docs/running.md for the list");
}

TEST(ConfigFileTest, ErrorsNameTheKey) {
  EXPECT_EQ(ErrorOf("num_procs: 4\n"),
            "config file 't.yaml': 'num_procs' is not a known setting; see docs/running.md for the list");
  EXPECT_EQ(ErrorOf("ssh: {prot: 1}\n"),
            "config file 't.yaml': 'ssh.prot' is not a known setting; see docs/running.md for the list");
  EXPECT_EQ(ErrorOf("logging: {verbose: maybe}\n"),
            "config file 't.yaml': 'logging.verbose' must be true or false, got 'maybe'");
  EXPECT_EQ(ErrorOf("- a\n- b\n"),
            "config file 't.yaml' the top level must be a mapping of keys to values");
  EXPECT_NE(ErrorOf("num_proc: [1\n").find("is not valid YAML"), std::string::npos);
}

// Writes `yaml` to a temporary file, parses `args` (with --config-file FILE in front), removes it.
StatusOr<CommandLine> ParseWithConfig(const std::string& yaml, std::vector<std::string> args,
                                      std::string* path_out = nullptr) {
  char path[] = "/tmp/dadt_config_test_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, yaml.data(), yaml.size()), static_cast<ssize_t>(yaml.size()));
  ::close(fd);
  args.insert(args.begin(), {"--config-file", path});
  StatusOr<CommandLine> cl = ParseCommandLine(args, "node1");
  ::unlink(path);
  if (path_out != nullptr) *path_out = path;
  return cl;
}

TEST(ConfigFileTest, BadValueNamesTheFile) {
  std::string path;
  StatusOr<CommandLine> cl = ParseWithConfig("start_timeout: soon\n", {"-np", "1", "x"}, &path);
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().message(), "--start-timeout expects a whole number of seconds >= 1, got 'soon' "
                                   "(from config file '" + path + "')");
}

TEST(ConfigFileTest, CommandLineOverridesTheFile) {
  StatusOr<CommandLine> cl =
      ParseWithConfig("num_proc: 2\nhosts: localhost:8\nstart_timeout: 7\nenv: {A: file, B: file}\n"
                      "logging: {verbose: true}\n",
                      {"-np", "3", "-x", "B=flag", "python"});
  ASSERT_TRUE(cl.ok()) << cl.status().message();
  const LaunchConfig& c = cl->config;
  EXPECT_EQ(c.num_proc, 3);
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_EQ(c.hosts[0].slots, 8);
  EXPECT_EQ(*c.start_timeout_seconds, 7);
  ASSERT_EQ(c.forward_env.size(), 3u);  // the file's first, then the command line's: last wins
  EXPECT_EQ(c.forward_env[2].first, "B");
  EXPECT_EQ(*c.forward_env[2].second, "flag");
  EXPECT_TRUE(c.verbose);
  // Every elastic flag from the file; the command line's --max-np and cooldown win.
  cl = ParseWithConfig("elastic: {min_np: 2, max_np: 6, host_discovery_script: d.sh, slots_per_host: 3, timeout: 40,\n"
                       "          reset_limit: 4, blacklist_cooldown_range: [10, 100], checkpoint: /s/j.ckpt}\n",
                       {"--max-np", "5", "--blacklist-cooldown-range", "1", "2", "python"});
  ASSERT_TRUE(cl.ok()) << cl.status().message();
  const ElasticConfig& e = cl->config.elastic;
  EXPECT_TRUE(e.enabled);
  EXPECT_EQ(cl->config.num_proc, 2);  // no -np: --min-np, from the file
  // min_np, max_np, the script, slots_per_host, the timeout, reset_limit:
  EXPECT_EQ(std::make_tuple(e.min_np, e.max_np, e.discovery_script, e.slots_per_host, e.elastic_timeout_seconds,
                            e.reset_limit),
            std::make_tuple(2, 5, std::string("d.sh"), 3, int64_t{40}, 4));
  ASSERT_TRUE(e.cooldown_range.has_value());
  EXPECT_EQ(*e.cooldown_range, std::make_pair(int64_t{1}, int64_t{2}));
  EXPECT_EQ(e.checkpoint_path, "/s/j.ckpt");
  cl = ParseWithConfig("elastic: {min_np: 2, host_discovery_script: d.sh, blacklist_cooldown_range: [10, 100]}\n",
                       {"python"});
  ASSERT_TRUE(cl.ok()) << cl.status().message();
  EXPECT_EQ(*cl->config.elastic.cooldown_range, std::make_pair(int64_t{10}, int64_t{100}));
  StatusOr<CommandLine> missing = ParseCommandLine({"--config-file", "/no/such.yaml", "-np", "1", "x"}, "n");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message().rfind("cannot read config file '/no/such.yaml'", 0), 0u);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
