#include "dadtrun/slurm.h"

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

using Names = std::vector<std::string>;

Names Expand(const std::string& list) {
  StatusOr<Names> out = ExpandNodeList(list);
  EXPECT_TRUE(out.ok()) << list << ": " << out.status().message();
  return out.ok() ? *out : Names{};
}

TEST(SlurmNodeListTest, SingleHostsAndPlainLists) {
  EXPECT_EQ(Expand("node1"), Names({"node1"}));
  EXPECT_EQ(Expand("a,b,c"), Names({"a", "b", "c"}));
  EXPECT_EQ(Expand("gpu-node-7.cluster"), Names({"gpu-node-7.cluster"}));
}

TEST(SlurmNodeListTest, RangesAndZeroPadding) {
  EXPECT_EQ(Expand("sn[1-2]"), Names({"sn1", "sn2"}));
  EXPECT_EQ(Expand("node[01-04,07]"), Names({"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(Expand("n[8-11]"), Names({"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(Expand("n[08-11]"), Names({"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(Expand("n[098-101]"), Names({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(Expand("n[5]"), Names({"n5"}));
  EXPECT_EQ(Expand("n[1,3,5-6]"), Names({"n1", "n3", "n5", "n6"}));
}

TEST(SlurmNodeListTest, SeveralPrefixesAndGroups) {
  EXPECT_EQ(Expand("gpu[1-2],cpu[03-04],login"),
            Names({"gpu1", "gpu2", "cpu03", "cpu04", "login"}));
  // Several groups in one name: the rightmost varies fastest.
  EXPECT_EQ(Expand("rack[1-2]-n[1-2]"), Names({"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(Expand("n[1-2]x"), Names({"n1x", "n2x"}));
}

TEST(SlurmNodeListTest, BadListsAreNamed) {
  for (const char* bad : {"n[1-2", "n1-2]", "n[]", "n[2-1]", "n[a-b]", "n[1-2],,m", "", "n[[1]]",
                          "n[1-]", "n[1,]"}) {
    StatusOr<Names> out = ExpandNodeList(bad);
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_NE(out.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << out.status().message();
  }
}

TEST(SlurmNodeListTest, TasksPerNode) {
  EXPECT_EQ(*ExpandTasksPerNode("2(x2)"), std::vector<int>({2, 2}));
  EXPECT_EQ(*ExpandTasksPerNode("2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(*ExpandTasksPerNode("4"), std::vector<int>({4}));
  EXPECT_EQ(*ExpandTasksPerNode("1,3(x2),2"), std::vector<int>({1, 3, 3, 2}));
  for (const char* bad : {"", "0", "2(x0)", "2(x", "x", "2(x2", "2,,1", "-1"}) {
    EXPECT_FALSE(ExpandTasksPerNode(bad).ok()) << bad;
  }
}

EnvMap Step(const std::string& procid, const std::string& localid, const std::string& nodeid) {
  return {{"SLURM_JOB_ID", "42"},          {"SLURM_STEP_ID", "3"},
          {"SLURM_PROCID", procid},        {"SLURM_LOCALID", localid},
          {"SLURM_NODEID", nodeid},        {"SLURM_STEP_NUM_TASKS", "5"},
          {"SLURM_STEP_NODELIST", "sn[1-3]"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}};
}

TEST(SlurmTaskTest, GeometryOfEveryTask) {
  struct Want { const char* procid; const char* localid; const char* nodeid; int ls, cr, cs; const char* node; };
  const Want want[] = {{"0", "0", "0", 2, 0, 3, "sn1"}, {"1", "1", "0", 2, 0, 2, "sn1"},
                       {"2", "0", "1", 2, 1, 3, "sn2"}, {"3", "1", "1", 2, 1, 2, "sn2"},
                       {"4", "0", "2", 1, 2, 3, "sn3"}};
  for (const Want& w : want) {
    StatusOr<std::optional<SlurmTask>> t = StepTask(Step(w.procid, w.localid, w.nodeid));
    ASSERT_TRUE(t.ok()) << t.status().message();
    ASSERT_TRUE(t->has_value());
    const SlurmTask& task = **t;
    EXPECT_EQ(task.rank, std::stoi(w.procid));
    EXPECT_EQ(task.size, 5);
    EXPECT_EQ(task.local_rank, std::stoi(w.localid));
    EXPECT_EQ(task.local_size, w.ls) << w.procid;
    EXPECT_EQ(task.cross_rank, w.cr) << w.procid;
    EXPECT_EQ(task.cross_size, w.cs) << w.procid;
    EXPECT_EQ(task.node, w.node);
    EXPECT_EQ(task.rank0_node, "sn1");
    EXPECT_EQ(task.num_nodes, 3);
    EXPECT_EQ(task.step, "42.3");
    EnvMap env = SlurmRankEnvironment(task);
    EXPECT_EQ(env["DADT_RANK"], w.procid);
    EXPECT_EQ(env["RANK"], w.procid);
    EXPECT_EQ(env["DADT_SIZE"], "5");
    EXPECT_EQ(env["WORLD_SIZE"], "5");
    EXPECT_EQ(env["LOCAL_RANK"], w.localid);
    EXPECT_EQ(env["DADT_LOCAL_SIZE"], std::to_string(w.ls));
    EXPECT_EQ(env["DADT_CROSS_RANK"], std::to_string(w.cr));
    EXPECT_EQ(env["GROUP_RANK"], w.nodeid);
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "3");
    EXPECT_EQ(env["DADT_HOSTNAME"], w.node);
  }
}

TEST(SlurmTaskTest, NotATaskOutsideAStep) {
  // salloc's shell and an sbatch script: a job, no step.
  EnvMap env = {{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}};
  StatusOr<std::optional<SlurmTask>> t = StepTask(env);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has_value());
  EXPECT_TRUE(InSlurmAllocation(env));
  EXPECT_FALSE(InSlurmAllocation({{"PATH", "/bin"}}));
}

TEST(SlurmTaskTest, BrokenStepVariablesAreNamed) {
  EnvMap env = Step("0", "0", "0");
  env.erase("SLURM_LOCALID");
  StatusOr<std::optional<SlurmTask>> t = StepTask(env);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("SLURM_LOCALID"), std::string::npos);
  env = Step("5", "0", "0");  // rank 5 of 5
  ASSERT_FALSE(StepTask(env).ok());
  env = Step("0", "0", "0");
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";  // two counts for three nodes
  t = StepTask(env);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("SLURM_STEP_TASKS_PER_NODE"), std::string::npos);
  env = Step("0", "x", "0");
  t = StepTask(env);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("SLURM_LOCALID='x'"), std::string::npos);
}

TEST(SlurmAllocationTest, HostsAndSlotsFromTheAllocation) {
  EnvMap env = {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "node[01-03]"},
                {"SLURM_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_JOB_CPUS_PER_NODE", "4(x3)"}};
  StatusOr<std::vector<HostSlots>> hosts = AllocationHosts(env);
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].host, "node01");
  EXPECT_EQ((*hosts)[0].slots, 2);
  EXPECT_EQ((*hosts)[2].host, "node03");
  EXPECT_EQ((*hosts)[2].slots, 1);
  // No task count asked for: the CPUs are the slots.
  env.erase("SLURM_TASKS_PER_NODE");
  hosts = AllocationHosts(env);
  ASSERT_TRUE(hosts.ok());
  EXPECT_EQ(TotalSlots(*hosts), 12);
  // Counts that do not match the nodes.
  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  hosts = AllocationHosts(env);
  ASSERT_FALSE(hosts.ok());
  EXPECT_NE(hosts.status().message().find("SLURM_TASKS_PER_NODE='2(x2)'"), std::string::npos);
  env.erase("SLURM_JOB_NODELIST");
  EXPECT_FALSE(AllocationHosts(env).ok());
}

TEST(SlurmDirectLaunchTest, PortIsTheUsersOrDerivedFromTheStep) {
  SlurmTask t = **StepTask(Step("0", "0", "0"));
  StatusOr<int> port = DirectLaunchPort({}, t);
  ASSERT_TRUE(port.ok());
  EXPECT_GE(*port, 20000);
  EXPECT_LT(*port, 40000);
  SlurmTask next = t;
  next.step = "42.4";
  EXPECT_NE(*DirectLaunchPort({}, next), *port);  // another step of the job at the same time
  EXPECT_EQ(*DirectLaunchPort({{"DADT_RENDEZVOUS_PORT", "31000"}}, t), 31000);
  EXPECT_FALSE(DirectLaunchPort({{"DADT_RENDEZVOUS_PORT", "99999"}}, t).ok());
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
