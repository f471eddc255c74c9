// The environment of an elastic worker (ElasticWorkerEnvironment): the contract's variables, and none
// of the ones a round assigns.
#include "dadtrun/elastic_launch.h"

#include <gtest/gtest.h>

#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {
namespace {

LaunchConfig Config() {
  LaunchConfig c;
  c.num_proc = 2;
  c.hosts = {{"h1", 2}, {"h2", 1}};
  c.command = {"python", "x.py"};
  c.controller = "auto";
  c.elastic.enabled = true;
  c.elastic.min_np = 2;
  c.elastic.elastic_timeout_seconds = 42;
  return c;
}

JobEndpoints Endpoints() {
  JobEndpoints e;
  e.hostname = "launcher";
  e.rendezvous_addr = "10.0.0.1";
  e.rendezvous_port = 1234;
  e.secret = "s3cret";
  e.master_addr = "10.0.0.1";
  e.master_port = 999;
  return e;
}

TEST(ElasticLaunchTest, WorkerGetsTheContractAndNoGeometry) {
  EnvMap user = {{"PATH", "/bin"}, {"RANK", "7"}, {"DADT_RANK", "7"}};
  EnvMap env = ElasticWorkerEnvironment(Config(), Endpoints(), user, {"h2/0/5", "h2", 0, 1});
  EXPECT_EQ(env.at(env::kElastic), "1");
  EXPECT_EQ(env.at(env::kElasticWorkerId), "h2/0/5");
  EXPECT_EQ(env.at(env::kElasticTimeout), "42");
  EXPECT_EQ(env.at(env::kController), "gloo");
  EXPECT_EQ(env.at(env::kHostname), "h2");
  EXPECT_EQ(env.at(env::kRendezvousAddr), "10.0.0.1");
  EXPECT_EQ(env.at(env::kRendezvousPort), "1234");
  EXPECT_EQ(env.at(env::kSecret), "s3cret");
  EXPECT_EQ(env.at("PATH"), "/bin");
  for (const char* name : {"DADT_RANK", "DADT_SIZE", "DADT_LOCAL_RANK", "DADT_LOCAL_SIZE", "DADT_CROSS_RANK",
                           "DADT_CROSS_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                           "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE"}) {
    EXPECT_EQ(env.count(name), 0u) << name;
  }
  EXPECT_EQ(env.count(env::kOmpNumThreads), 0u);  // alone on its host
  EXPECT_EQ(env.count(env::kElasticCheckpoint), 0u);  // none named
  LaunchConfig with_checkpoint = Config();
  with_checkpoint.elastic.checkpoint_path = "/shared/j.ckpt";
  env = ElasticWorkerEnvironment(with_checkpoint, Endpoints(), user, {"h2/0/5", "h2", 0, 1});
  EXPECT_EQ(env.at(env::kElasticCheckpoint), "/shared/j.ckpt");
}

TEST(ElasticLaunchTest, LocalHostNameAndSharedHost) {
  EnvMap env = ElasticWorkerEnvironment(Config(), Endpoints(), {}, {"localhost/1/2", "localhost", 1, 2});
  EXPECT_EQ(env.at(env::kHostname), "launcher");
  EXPECT_EQ(env.at(env::kOmpNumThreads), "1");
  env = ElasticWorkerEnvironment(Config(), Endpoints(), {{"OMP_NUM_THREADS", "4"}}, {"h1/1/2", "h1", 1, 2});
  EXPECT_EQ(env.at(env::kOmpNumThreads), "4");  // the user's choice stands
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
