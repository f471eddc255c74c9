#include "dadtrun/worker_env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

namespace dadt {
namespace dadtrun {
namespace {

LaunchConfig Config(int np) {
  LaunchConfig c;
  c.num_proc = np;
  c.hosts = {{"localhost", np}};
  c.command = {"python", "train.py"};
  return c;
}

JobEndpoints Endpoints() {
  JobEndpoints e;
  e.hostname = "node1";
  e.rendezvous_addr = "127.0.0.1";
  e.rendezvous_port = 4242;
  e.secret = "cafe";
  e.master_addr = "127.0.0.1";
  e.master_port = 29500;
  return e;
}

TEST(WorkerEnvTest, ContractForEachRank) {
  const EnvMap user = {{"PATH", "/usr/bin"}, {"HOME", "/root"}};
  for (int rank = 0; rank < 3; ++rank) {
    EnvMap env = WorkerEnvironment(Config(3), Endpoints(), user, rank);
    const std::string r = std::to_string(rank);
    EXPECT_EQ(env["DADT_RANK"], r);
    EXPECT_EQ(env["DADT_SIZE"], "3");
    EXPECT_EQ(env["DADT_LOCAL_RANK"], r);
    EXPECT_EQ(env["DADT_LOCAL_SIZE"], "3");
    EXPECT_EQ(env["DADT_CROSS_RANK"], "0");
    EXPECT_EQ(env["DADT_CROSS_SIZE"], "1");
    EXPECT_EQ(env["DADT_HOSTNAME"], "node1");
    EXPECT_EQ(env["DADT_CONTROLLER"], "gloo");
    EXPECT_EQ(env["DADT_RENDEZVOUS_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["DADT_RENDEZVOUS_PORT"], "4242");
    EXPECT_EQ(env["DADT_SECRET"], "cafe");
    EXPECT_EQ(env.count("DADT_IFACE"), 0u);
    EXPECT_EQ(env["RANK"], r);
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_RANK"], r);
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29500");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_RANK"], r);
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env.count("GLOO_SOCKET_IFNAME"), 0u);
    EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME"), 0u);
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
    EXPECT_EQ(env["DADT_START_TIMEOUT"], "30");
    EXPECT_EQ(env["PATH"], "/usr/bin");
    EXPECT_EQ(env["HOME"], "/root");
  }
}

TEST(WorkerEnvTest, UserSettingsWinWhereTheyShould) {
  const EnvMap user = {{"OMP_NUM_THREADS", "4"},      {"PYTHONUNBUFFERED", "0"},
                       {"DADT_CYCLE_TIME", "7"},      {"DADT_FUSION_THRESHOLD", "99"},
                       {"DADT_START_TIMEOUT", "120"}, {"DADT_RANK", "stale"}};
  EnvMap env = WorkerEnvironment(Config(2), Endpoints(), user, 1);
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "0");
  EXPECT_EQ(env["DADT_CYCLE_TIME"], "7");         // no flag: user's value stays
  EXPECT_EQ(env["DADT_FUSION_THRESHOLD"], "99");
  EXPECT_EQ(env["DADT_START_TIMEOUT"], "120");
  EXPECT_EQ(env["DADT_RANK"], "1");  // the contract always wins
}

TEST(WorkerEnvTest, KeepsFreedMemoryUnlessTheUserTunesMalloc) {
  EnvMap env = WorkerEnvironment(Config(1), Endpoints(), {}, 0);
  EXPECT_EQ(env["MALLOC_MMAP_THRESHOLD_"], "33554432");
  EXPECT_EQ(env["MALLOC_TRIM_THRESHOLD_"], "1073741824");

  // Any malloc threshold of the user's own, in either form, leaves both untouched.
  for (const EnvMap& user : {EnvMap{{"MALLOC_TRIM_THRESHOLD_", "131072"}},
                             EnvMap{{"MALLOC_MMAP_THRESHOLD_", "65536"}},
                             EnvMap{{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}}}) {
    env = WorkerEnvironment(Config(2), Endpoints(), user, 1);
    for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
      auto it = user.find(name);
      if (it == user.end()) {
        EXPECT_EQ(env.count(name), 0u) << name;
      } else {
        EXPECT_EQ(env[name], it->second) << name;
      }
    }
  }
  // Tunables that are not malloc's do not count.
  env = WorkerEnvironment(Config(2), Endpoints(), {{"GLIBC_TUNABLES", "glibc.rtld.nns=2"}}, 0);
  EXPECT_EQ(env["MALLOC_TRIM_THRESHOLD_"], "1073741824");
  EXPECT_EQ(env["GLIBC_TUNABLES"], "glibc.rtld.nns=2");
}

TEST(WorkerEnvTest, SingleRankLeavesOmpAlone) {
  EnvMap env = WorkerEnvironment(Config(1), Endpoints(), {}, 0);
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
}

TEST(WorkerEnvTest, FlagsMapToVariables) {
  LaunchConfig c = Config(2);
  c.fusion_threshold_bytes = 64LL * 1024 * 1024;
  c.cycle_time_ms = 0.5;
  c.cache_capacity = 0;
  c.start_timeout_seconds = 90;
  c.log_level = "debug";
  c.network_interface = "eth1";
  const EnvMap user = {{"DADT_CYCLE_TIME", "7"}, {"DADT_START_TIMEOUT", "120"}};
  EnvMap env = WorkerEnvironment(c, Endpoints(), user, 0);
  EXPECT_EQ(env["DADT_FUSION_THRESHOLD"], "67108864");
  EXPECT_EQ(env["DADT_CYCLE_TIME"], "0.5");
  EXPECT_EQ(env["DADT_CACHE_CAPACITY"], "0");
  EXPECT_EQ(env["DADT_START_TIMEOUT"], "90");
  EXPECT_EQ(env["DADT_LOG_LEVEL"], "debug");
  EXPECT_EQ(env["DADT_IFACE"], "eth1");
  // The frameworks' own process groups bind the same interface...
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth1");
  // ...unless the user named one, in the environment or with -x.
  c.forward_env = {{"NCCL_SOCKET_IFNAME", std::string("ib0")}};
  env = WorkerEnvironment(c, Endpoints(), {{"GLOO_SOCKET_IFNAME", "eth9"}}, 0);
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth9");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "ib0");
}

// A Horovod user's HOROVOD_START_TIMEOUT reaches the ranks: dadtrun's default does not cover it
// with a DADT_START_TIMEOUT of its own (the ranks read the alias: runtime/common/env.h).
TEST(WorkerEnvTest, DefaultStartTimeoutLeavesHorovodsAlone) {
  EXPECT_EQ(WorkerEnvironment(Config(2), Endpoints(), {}, 0)["DADT_START_TIMEOUT"], "30");
  EnvMap env = WorkerEnvironment(Config(2), Endpoints(), {{"HOROVOD_START_TIMEOUT", "45"}}, 0);
  EXPECT_EQ(env.count("DADT_START_TIMEOUT"), 0u);
  EXPECT_EQ(env["HOROVOD_START_TIMEOUT"], "45");
}

TEST(WorkerEnvTest, TorchrunNodeRankFollowsTheHosts) {
  LaunchConfig c = Config(5);
  c.hosts = {{"localhost", 2}, {"h2", 2}, {"h3", 2}};
  const char* group[] = {"0", "0", "1", "1", "2"};
  for (int rank = 0; rank < 5; ++rank) {
    EnvMap env = WorkerEnvironment(c, Endpoints(), {}, rank);
    EXPECT_EQ(env["GROUP_RANK"], group[rank]) << rank;
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "3") << rank;
  }
  c.num_proc = 2;  // only the first host is used
  EXPECT_EQ(WorkerEnvironment(c, Endpoints(), {}, 1)["GROUP_WORLD_SIZE"], "1");
}

EnvMap Ompi(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
}

TEST(WorkerEnvTest, TorchEnvFromMpiFollowsOpenMpi) {
  // Not under mpirun: nothing to set.
  StatusOr<EnvMap> none = TorchEnvFromMpi({{"PATH", "/bin"}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  // Rank 3 of 4, second on the second host, as planned.
  EnvMap in = Ompi(3, 4, 1, 2);
  in[kMpiHostOfRank] = "0,0,1,1";
  StatusOr<EnvMap> out = TorchEnvFromMpi(in);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const EnvMap want = {{"RANK", "3"},       {"WORLD_SIZE", "4"},       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"},
                       {"ROLE_RANK", "3"},  {"ROLE_WORLD_SIZE", "4"}};
  EXPECT_EQ(*out, want);

  // Uneven hosts: rank 2 alone on the second host.
  in = Ompi(2, 3, 0, 1);
  in[kMpiHostOfRank] = "0,0,1";
  out = TorchEnvFromMpi(in);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)["GROUP_RANK"], "1");
  EXPECT_EQ((*out)["GROUP_WORLD_SIZE"], "2");
}

TEST(WorkerEnvTest, TorchEnvFromMpiLeavesGroupOutWhenMpirunMappedOtherwise) {
  // --mpi-args "--map-by node": rank 1 landed on the second host as its first rank.
  EnvMap in = Ompi(1, 4, 0, 2);
  in[kMpiHostOfRank] = "0,0,1,1";
  StatusOr<EnvMap> out = TorchEnvFromMpi(in);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)["RANK"], "1");
  EXPECT_EQ((*out)["LOCAL_RANK"], "0");
  EXPECT_EQ(out->count("GROUP_RANK"), 0u);
  EXPECT_EQ(out->count("GROUP_WORLD_SIZE"), 0u);
  // A plan of the wrong length or junk is not used either.
  for (const char* plan : {"0,0,1", "0,x,1,1", ""}) {
    in[kMpiHostOfRank] = plan;
    in["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
    out = TorchEnvFromMpi(in);
    ASSERT_TRUE(out.ok()) << plan;
    EXPECT_EQ(out->count("GROUP_RANK"), 0u) << plan;
  }
}

TEST(WorkerEnvTest, TorchEnvFromMpiRefusesJunk) {
  EnvMap in = Ompi(0, 2, 0, 2);
  in["OMPI_COMM_WORLD_SIZE"] = "two";
  StatusOr<EnvMap> out = TorchEnvFromMpi(in);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("OMPI_COMM_WORLD_SIZE"), std::string::npos);
  EXPECT_NE(out.status().message().find("'two'"), std::string::npos);
}

TEST(WorkerEnvTest, MasterAddressIsRankZerosHost) {
  LaunchConfig c = Config(4);
  c.hosts = {{"h1", 2}, {"h2", 2}};
  EXPECT_EQ(MasterAddress(c, "node1", "10.0.0.1"), "h1");
  c.hosts = {{"node1", 2}, {"h2", 2}};
  EXPECT_EQ(MasterAddress(c, "node1", "10.0.0.1"), "10.0.0.1");
  c.hosts.clear();
  EXPECT_EQ(MasterAddress(c, "node1", "127.0.0.1"), "127.0.0.1");
}

TEST(WorkerEnvTest, LaunchAddressIsLoopbackWhenEveryRankIsHere) {
  StatusOr<std::string> addr = LaunchAddress(Config(2), {});
  ASSERT_TRUE(addr.ok());
  EXPECT_EQ(*addr, "127.0.0.1");
  LaunchConfig c = Config(2);
  c.network_interface = "no-such-iface0";
  addr = LaunchAddress(c, {"h2"});
  ASSERT_FALSE(addr.ok());
  EXPECT_NE(addr.status().message().find("--network-interface"), std::string::npos);
}

TEST(WorkerEnvTest, ToEnvStrings) {
  EXPECT_EQ(ToEnvStrings({{"A", "1"}, {"B", "x=y"}}), (std::vector<std::string>{"A=1", "B=x=y"}));
}

TEST(WorkerEnvTest, CurrentEnvironmentSnapshot) {
  ::setenv("DADT_TEST_SNAPSHOT", "a=b", 1);
  EnvMap env = CurrentEnvironment();
  EXPECT_EQ(env["DADT_TEST_SNAPSHOT"], "a=b");
}

TEST(WorkerEnvTest, SecretIs32RandomBytesInHex) {
  StatusOr<std::string> a = GenerateSecret();
  StatusOr<std::string> b = GenerateSecret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
  EXPECT_GE(std::set<char>(a->begin(), a->end()).size(), 6u);
}

TEST(WorkerEnvTest, FindFreePortGivesABindablePort) {
  StatusOr<int> port = FindFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  EXPECT_GT(*port, 0);
  EXPECT_LE(*port, 65535);
}

TEST(WorkerEnvTest, GeometryFollowsTheHosts) {
  LaunchConfig c = Config(5);
  c.hosts = {{"localhost", 2}, {"h2", 2}, {"h3", 2}};
  c.forward_env = {{"A", std::string("x y")}, {"B", std::nullopt}};
  const EnvMap user = {{"B", "from-user"}};
  struct Want { const char* host; const char* lr; const char* ls; const char* cr; const char* cs; };
  const Want want[] = {{"node1", "0", "2", "0", "3"}, {"node1", "1", "2", "0", "2"},
                       {"h2", "0", "2", "1", "3"},    {"h2", "1", "2", "1", "2"},
                       {"h3", "0", "1", "2", "3"}};
  for (int rank = 0; rank < 5; ++rank) {
    EnvMap env = WorkerEnvironment(c, Endpoints(), user, rank);
    EXPECT_EQ(env["DADT_HOSTNAME"], want[rank].host) << rank;
    EXPECT_EQ(env["DADT_LOCAL_RANK"], want[rank].lr) << rank;
    EXPECT_EQ(env["LOCAL_RANK"], want[rank].lr) << rank;
    EXPECT_EQ(env["DADT_LOCAL_SIZE"], want[rank].ls) << rank;
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], want[rank].ls) << rank;
    EXPECT_EQ(env["DADT_CROSS_RANK"], want[rank].cr) << rank;
    EXPECT_EQ(env["DADT_CROSS_SIZE"], want[rank].cs) << rank;
    EXPECT_EQ(env["DADT_SIZE"], "5");
    EXPECT_EQ(env["A"], "x y");
    EXPECT_EQ(env["B"], "from-user");
  }
  // Alone on its host: no OMP_NUM_THREADS=1.
  EXPECT_EQ(WorkerEnvironment(c, Endpoints(), user, 4).count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(WorkerEnvironment(c, Endpoints(), user, 3)["OMP_NUM_THREADS"], "1");
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
