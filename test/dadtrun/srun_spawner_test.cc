#include "dadtrun/srun_spawner.h"

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

LaunchConfig Config(int np, std::vector<HostSlots> hosts) {
  LaunchConfig c;
  c.num_proc = np;
  c.hosts = std::move(hosts);
  c.command = {"python3", "train.py", "--lr", "0.1"};
  return c;
}

TEST(SrunSpawnerTest, OneStepWithKillOnBadExitThroughTheRelay) {
  const LaunchConfig c = Config(3, {{"sn1", 2}, {"sn2", 2}});
  const std::vector<std::string> want = {
      "/usr/bin/srun", "--ntasks=3", "--nodes=2", "--distribution=arbitrary",
      "--kill-on-bad-exit=1", "--label", "--input=none", "/x/dadtrun", "--slurm-rank", "--",
      "python3", "train.py", "--lr", "0.1"};
  EXPECT_EQ(SrunCommand(c, "/usr/bin/srun", "/x/dadtrun"), want);
  // Ranks fill the nodes in order, one line per rank; nodes that get none are not in the step.
  EXPECT_EQ(SrunHostfile(c), "sn1\nsn1\nsn2\n");
  const LaunchConfig one = Config(2, {{"sn1", 2}, {"sn2", 2}});
  EXPECT_EQ(SrunCommand(one, "srun", "d")[2], "--nodes=1");
}

TEST(SrunSpawnerTest, LabelsOfSrunsOutput) {
  int rank = -1;
  std::string text;
  ASSERT_TRUE(ParseSrunLabel("0: epoch 1 loss 0.5", &rank, &text));
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(text, "epoch 1 loss 0.5");
  ASSERT_TRUE(ParseSrunLabel(" 7: x: y", &rank, &text));  // padded when there are 10+ tasks
  EXPECT_EQ(rank, 7);
  EXPECT_EQ(text, "x: y");
  ASSERT_TRUE(ParseSrunLabel("12:", &rank, &text));
  EXPECT_EQ(rank, 12);
  EXPECT_EQ(text, "");
  ASSERT_TRUE(ParseSrunLabel("3: ", &rank, &text));
  EXPECT_EQ(text, "");
  for (const char* own : {"srun: error: sn2: task 3: Killed", "slurmstepd: error: *** STEP",
                          "", "12", "1:x", ": x", "abc: d"}) {
    EXPECT_FALSE(ParseSrunLabel(own, &rank, &text)) << own;
  }
}

TEST(SrunSpawnerTest, FailureNamesTheRankOrTheScheduler) {
  EXPECT_EQ(DescribeSrunFailure({"srun: error: sn2: task 3: Killed",
                                 "srun: error: sn1: task 0: Killed"}),
            "rank 3 on host sn2 was killed (SIGKILL); srun ended the step (--kill-on-bad-exit) "
            "and every rank was stopped");
  EXPECT_EQ(DescribeSrunFailure({"srun: error: sn1: task 1: Exited with exit code 7"}),
            "rank 1 on host sn1 exited with code 7; srun ended the step (--kill-on-bad-exit) and "
            "every rank was stopped");
  EXPECT_NE(DescribeSrunFailure({"srun: error: sn1: tasks 0-1: Terminated"}).find(
                "rank 0 on host sn1 failed (Terminated)"),
            std::string::npos);
  // A rank's failure: srun names the task first, then cancels the step.
  EXPECT_EQ(DescribeSrunFailure({"srun: error: sn2: task 3: Killed",
                                 "srun: launch/slurm: _step_signal: Terminating StepId=9.0",
                                 "slurmstepd-sn1: error: *** STEP 9.0 ON sn1 CANCELLED AT x ***",
                                 "srun: error: sn1: tasks 0-1: Terminated"})
                .rfind("rank 3 on host sn2 was killed", 0),
            0u);
  // scancel (as srun 22.05 reports it): the abort comes before the tasks it ended.
  EXPECT_EQ(DescribeSrunFailure(
                {"srun: Job step aborted: Waiting up to 4 seconds for job step to finish.",
                 "slurmstepd-sn1: error: *** STEP 12.0 ON sn1 CANCELLED AT 2026-11-24T16:20:00 ***",
                 "srun: error: sn2: tasks 2-3: Terminated"}),
            "the scheduler ended the step 12.0 (scancel, or a time limit); every rank was stopped");
  EXPECT_NE(DescribeSrunFailure({"slurmstepd: error: *** JOB 12 ON sn1 CANCELLED AT x ***"})
                .find("ended the job 12"),
            std::string::npos);
  EXPECT_EQ(DescribeSrunFailure({"srun: something else"}), "");
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
