// dadtrun --mpi: the mpirun command line and the environment it forwards (pure functions; the
// launches themselves are in test/integration/test_mpi.py).
#include "dadtrun/mpi_spawner.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dadt {
namespace dadtrun {
namespace {

using Args = std::vector<std::string>;

LaunchConfig MpiConfig(int np, std::vector<HostSlots> hosts, Args command) {
  LaunchConfig c;
  c.num_proc = np;
  c.hosts = std::move(hosts);
  c.command = std::move(command);
  c.controller = "mpi";
  return c;
}

bool Contains(const Args& argv, const Args& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

TEST(MpiSpawnerTest, CommandHasHostsRootOversubscribeBindingAndForwardedEnv) {
  LaunchConfig c = MpiConfig(4, {{"localhost", 4}}, {"python", "train.py", "--lr", "0.1"});
  c.mpi_args = "--mca btl self,vader -x 'A B'";
  const EnvMap env = {{"DADT_CONTROLLER", "mpi"}, {"PATH", "/usr/bin"}, {"PWD", "/x"},
                      {"OMPI_COMM_WORLD_RANK", "0"}, {"BASH_FUNC_f%%", "() {}"}};
  auto argv = MpirunCommand(c, env, "/usr/bin/mpirun", /*is_root=*/true, /*cores=*/2);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  const Args& a = *argv;
  EXPECT_EQ(a.front(), "/usr/bin/mpirun");
  EXPECT_TRUE(Contains(a, {"-np", "4"}));
  EXPECT_TRUE(Contains(a, {"-H", "localhost:4"}));
  EXPECT_TRUE(Contains(a, {"--allow-run-as-root"}));
  EXPECT_TRUE(Contains(a, {"--oversubscribe"}));
  EXPECT_TRUE(Contains(a, {"--bind-to", "none"}));
  EXPECT_TRUE(Contains(a, {"-x", "DADT_CONTROLLER"}));
  EXPECT_TRUE(Contains(a, {"-x", "PATH"}));
  EXPECT_FALSE(Contains(a, {"-x", "PWD"}));
  EXPECT_FALSE(Contains(a, {"-x", "OMPI_COMM_WORLD_RANK"}));
  EXPECT_FALSE(Contains(a, {"-x", "BASH_FUNC_f%%"}));
  // --mpi-args (split like a shell), then the command, last and verbatim.
  EXPECT_TRUE(Contains(a, {"--mca", "btl", "self,vader", "-x", "A B", "python", "train.py", "--lr",
                           "0.1"}));
  EXPECT_EQ(a.back(), "0.1");
}

TEST(MpiSpawnerTest, NoRootFlagOrOversubscribeWhenNotNeeded) {
  LaunchConfig c = MpiConfig(2, {{"localhost", 2}}, {"true"});
  auto argv = MpirunCommand(c, {}, "mpirun", /*is_root=*/false, /*cores=*/8);
  ASSERT_TRUE(argv.ok());
  EXPECT_FALSE(Contains(*argv, {"--allow-run-as-root"}));
  EXPECT_FALSE(Contains(*argv, {"--oversubscribe"}));
  // Remote hosts' slots do not count against this machine's cores.
  c = MpiConfig(8, {{"nodeA", 4}, {"nodeB", 4}}, {"true"});
  argv = MpirunCommand(c, {}, "mpirun", false, 2);
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Contains(*argv, {"-H", "nodeA:4,nodeB:4"}));
  EXPECT_FALSE(Contains(*argv, {"--oversubscribe"}));
}

TEST(MpiSpawnerTest, NetworkInterfaceAndSshOptionsReachMpirun) {
  LaunchConfig c = MpiConfig(4, {{"h1", 2}, {"h2", 2}}, {"true"});
  auto argv = MpirunCommand(c, {}, "mpirun", false, 2);
  ASSERT_TRUE(argv.ok());
  EXPECT_FALSE(Contains(*argv, {"--mca", "oob_tcp_if_include"}));
  EXPECT_FALSE(Contains(*argv, {"--mca", "plm_rsh_args"}));
  c.network_interface = "eth1";
  c.ssh_port = 2222;
  c.ssh_identity_file = "/keys/id";
  argv = MpirunCommand(c, {}, "mpirun", false, 2);
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Contains(*argv, {"--mca", "oob_tcp_if_include", "eth1"}));
  EXPECT_TRUE(Contains(*argv, {"--mca", "btl_tcp_if_include", "eth1"}));
  EXPECT_TRUE(Contains(*argv, {"--mca", "plm_rsh_args", "-p 2222 -i /keys/id"}));
}

TEST(MpiSpawnerTest, RanksRunThroughTheLineRelayWhenGiven) {
  LaunchConfig c = MpiConfig(2, {{"localhost", 2}}, {"python", "train.py"});
  auto argv = MpirunCommand(c, {}, "mpirun", false, 2, "/opt/bin/dadtrun");
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Contains(*argv, {"/opt/bin/dadtrun", "--line-relay", "--", "python", "train.py"}));
  EXPECT_EQ(argv->back(), "train.py");
}

TEST(MpiSpawnerTest, SplitArgsQuotesAndErrors) {
  auto w = SplitArgs(R"(  a "b c" 'd e' f\ g "h\"i" )");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (Args{"a", "b c", "d e", "f g", "h\"i"}));
  EXPECT_TRUE(SplitArgs("").ok() && SplitArgs("")->empty());
  auto bad = SplitArgs("--mca 'oops");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unterminated"), std::string::npos);
  LaunchConfig c = MpiConfig(1, {{"localhost", 1}}, {"true"});
  c.mpi_args = "\"x";
  EXPECT_FALSE(MpirunCommand(c, {}, "mpirun", false, 2).ok());
}

TEST(MpiSpawnerTest, WorkerEnvironmentIsJobWideOnly) {
  LaunchConfig c = MpiConfig(3, {{"localhost", 3}}, {"true"});
  c.fusion_threshold_bytes = 1024;
  c.hierarchical_allreduce = true;
  EnvMap env = MpiWorkerEnvironment(c, {{"PATH", "/usr/bin"}});
  EXPECT_EQ(env["DADT_CONTROLLER"], "mpi");
  EXPECT_EQ(env["DADT_FUSION_THRESHOLD"], "1024");
  EXPECT_EQ(env["DADT_HIERARCHICAL_ALLREDUCE"], "1");
  EXPECT_EQ(env["PATH"], "/usr/bin");
  for (const char* per_rank : {"DADT_RANK", "DADT_LOCAL_RANK", "DADT_SIZE", "RANK", "LOCAL_RANK",
                               "DADT_SECRET", "DADT_RENDEZVOUS_ADDR", "MASTER_PORT",
                               "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE"}) {
    EXPECT_EQ(env.count(per_rank), 0u) << per_rank;
  }
  EXPECT_EQ(env["DADT_MPI_HOST_OF_RANK"], "0,0,0");
}

TEST(MpiSpawnerTest, WorkerEnvironmentCarriesTorchrunsMasterAndThePlan) {
  LaunchConfig c = MpiConfig(5, {{"h1", 2}, {"h2", 2}, {"h3", 2}}, {"true"});
  c.network_interface = "dadt0";
  // A stale RANK in dadtrun's own environment must not reach every rank.
  EnvMap env = MpiWorkerEnvironment(c, {{"RANK", "7"}, {"MASTER_ADDR", "old"}}, "h1", 29501);
  EXPECT_EQ(env["MASTER_ADDR"], "h1");
  EXPECT_EQ(env["MASTER_PORT"], "29501");
  EXPECT_EQ(env.count("RANK"), 0u);
  EXPECT_EQ(env["DADT_MPI_HOST_OF_RANK"], "0,0,1,1,2");
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "dadt0");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "dadt0");
  // ...and every one of them is forwarded to the ranks by mpirun.
  auto argv = MpirunCommand(c, env, "mpirun", false, 2);
  ASSERT_TRUE(argv.ok());
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "DADT_MPI_HOST_OF_RANK",
                           "GLOO_SOCKET_IFNAME"}) {
    bool found = false;
    for (size_t i = 1; i < argv->size(); ++i) {
      if ((*argv)[i - 1] == "-x" && (*argv)[i] == name) found = true;
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(MpiSpawnerTest, AutoPicksMpiOnlyWithMpirunOnPath) {
  EXPECT_EQ(ResolveController("gloo"), "gloo");
  EXPECT_EQ(ResolveController("mpi"), "mpi");
  EXPECT_EQ(ResolveController("auto"), MpiBuilt() && !FindMpirun().empty() ? "mpi" : "gloo");
  const char* path = std::getenv("PATH");
  const std::string saved = path ? path : "";
  ::setenv("PATH", "/nonexistent-dadt-dir", 1);
  EXPECT_EQ(ResolveController("auto"), "gloo");
  ::setenv("PATH", saved.c_str(), 1);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
