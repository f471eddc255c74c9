#include "dadtrun/hosts.h"

#include <gtest/gtest.h>

namespace dadt {
namespace dadtrun {
namespace {

TEST(HostsTest, ParsesHostsAndSlots) {
  StatusOr<std::vector<HostSlots>> h = ParseHosts("localhost:4,127.0.0.1,node-b:2");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->size(), 3u);
  EXPECT_EQ((*h)[0].host, "localhost");
  EXPECT_EQ((*h)[0].slots, 4);
  EXPECT_EQ((*h)[1].host, "127.0.0.1");
  EXPECT_EQ((*h)[1].slots, 1);
  EXPECT_EQ((*h)[2].host, "node-b");
  EXPECT_EQ(TotalSlots(*h), 7);
}

TEST(HostsTest, BracketedIpv6) {
  StatusOr<std::vector<HostSlots>> h = ParseHosts("[::1]:3");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ((*h)[0].host, "::1");
  EXPECT_EQ((*h)[0].slots, 3);
}

TEST(HostsTest, RejectsMalformedEntries) {
  for (const char* bad : {"", "a:0", "a:-1", "a:x", "a:", ":2", "a:2,,b:1", "a:2,", "[::1:2",
                          "a:1.5", "a:99999999999"}) {
    StatusOr<std::vector<HostSlots>> h = ParseHosts(bad);
    EXPECT_FALSE(h.ok()) << "accepted '" << bad << "'";
    if (!h.ok()) {
      EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(HostsTest, LocalHostNames) {
  EXPECT_TRUE(IsLocalHost("localhost", "node1.example.com"));
  EXPECT_TRUE(IsLocalHost("LOCALHOST", "node1.example.com"));
  EXPECT_TRUE(IsLocalHost("127.0.0.1", "node1.example.com"));
  EXPECT_TRUE(IsLocalHost("::1", "node1.example.com"));
  EXPECT_TRUE(IsLocalHost("node1.example.com", "node1.example.com"));
  EXPECT_TRUE(IsLocalHost("node1", "node1.example.com"));
  EXPECT_FALSE(IsLocalHost("node2", "node1.example.com"));
  EXPECT_FALSE(IsLocalHost("node", "node1.example.com"));
  EXPECT_FALSE(IsLocalHost("10.0.0.1", "node1"));
  EXPECT_TRUE(IsLocalHost(LocalHostname(), LocalHostname()));
  EXPECT_FALSE(LocalHostname().empty());
}

TEST(HostsTest, HostfileLinesAndComments) {
  StatusOr<std::vector<HostSlots>> h = ParseHostfileText(
      "# cluster\n"
      "h1 slots=4\n"
      "\n"
      "  h2\tslots=2   # the small one\n"
      "h3\n",
      "hostfile 'x'");
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->size(), 3u);
  EXPECT_EQ((*h)[0].host, "h1");
  EXPECT_EQ((*h)[0].slots, 4);
  EXPECT_EQ((*h)[1].host, "h2");
  EXPECT_EQ((*h)[1].slots, 2);
  EXPECT_EQ((*h)[2].slots, 1);
}

TEST(HostsTest, BadHostfileLineNamesTheLine) {
  EXPECT_EQ(ParseHostfileText("h1 slots=2\nh2 slots=two\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 2: the slot count in 'slots=two' must be a positive integer, e.g. "
            "slots=4");
  EXPECT_EQ(ParseHostfileText("h1 cpus=2\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 1: expected 'HOST slots=N' or 'HOST:N', got 'h1 cpus=2'");
  EXPECT_EQ(ParseHostfileText("h1 slots=2 extra\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 1: expected 'HOST slots=N' or 'HOST:N', got 'h1 slots=2 extra'");
  EXPECT_EQ(ParseHostfileText("# nothing\n\n", "hostfile 'f'").status().message(),
            "hostfile 'f' lists no hosts; write one 'HOST slots=N' (or 'HOST:N') line per host");
  EXPECT_NE(ReadHostfile("/nonexistent/hosts").status().message().find("cannot read hostfile"),
            std::string::npos);
}

// The Kubernetes MPI Operator's /etc/mpi/hostfile: "HOST slots=N" for Open MPI jobs, "HOST:N" for
// Intel MPI and MPICH jobs; dadtrun --hostfile takes both, mixed too.
TEST(HostsTest, HostfileMpiOperatorForms) {
  StatusOr<std::vector<HostSlots>> h = ParseHostfileText(
      "job-worker-0.job-worker.default.svc slots=2\n"
      "job-worker-1.job-worker.default.svc:3\n"
      "10.0.0.7:1   # an address\n"
      "::1\n"
      "[fe80::1]:4\n"
      "[fe80::2] slots=5\n",
      "hostfile '/etc/mpi/hostfile'");
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->size(), 6u);
  const std::pair<const char*, int> want[] = {{"job-worker-0.job-worker.default.svc", 2},
                                              {"job-worker-1.job-worker.default.svc", 3},
                                              {"10.0.0.7", 1},
                                              {"::1", 1},
                                              {"fe80::1", 4},
                                              {"fe80::2", 5}};
  for (size_t i = 0; i < h->size(); ++i) {
    EXPECT_EQ((*h)[i].host, want[i].first) << i;
    EXPECT_EQ((*h)[i].slots, want[i].second) << i;
  }
  EXPECT_EQ(TotalSlots(*h), 16);
}

TEST(HostsTest, BadColonFormNamesTheLine) {
  EXPECT_EQ(ParseHostfileText("h1:2\nh2:zero\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 2: the slot count in 'h2:zero' must be a positive integer, e.g. h2:4");
  EXPECT_EQ(ParseHostfileText("h1:0\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 1: the slot count in 'h1:0' must be a positive integer, e.g. h1:4");
  EXPECT_EQ(ParseHostfileText("h1:2 slots=2\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 1: give the slots once, 'HOST slots=N' or 'HOST:N', got 'h1:2 slots=2'");
  EXPECT_EQ(ParseHostfileText(":2\n", "hostfile 'f'").status().message(),
            "hostfile 'f' line 1: ':2' has no host name");
}

TEST(HostsTest, PlacementFollowsTheHosts) {
  // Host by host; local and cross ranks as Horovod defines them.
  std::vector<RankPlacement> p = PlaceRanks(*ParseHosts("a:2,b:2,c:2"), 6);
  ASSERT_EQ(p.size(), 6u);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(p[r].rank, r);
    EXPECT_EQ(p[r].host, std::string(1, static_cast<char>('a' + r / 2)));
    EXPECT_EQ(p[r].local_rank, r % 2);
    EXPECT_EQ(p[r].local_size, 2);
    EXPECT_EQ(p[r].cross_rank, r / 2);
    EXPECT_EQ(p[r].cross_size, 3);
  }
  // Uneven: a has 3, b has 1 (np 4 of 5 slots); local rank 1 and 2 exist only on a.
  p = PlaceRanks(*ParseHosts("a:3,b:2"), 4);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[3].host, "b");
  EXPECT_EQ(p[3].local_rank, 0);
  EXPECT_EQ(p[3].local_size, 1);
  EXPECT_EQ(p[3].cross_rank, 1);
  EXPECT_EQ(p[3].cross_size, 2);
  EXPECT_EQ(p[1].cross_rank, 0);
  EXPECT_EQ(p[1].cross_size, 1);
  // Unused hosts are dropped; a host named twice is one host.
  EXPECT_EQ(UsedHosts(*ParseHosts("a:2,b:2,c:2"), 3).size(), 2u);
  std::vector<HostSlots> merged = UsedHosts(*ParseHosts("a:1,b:1,a:1"), 3);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].slots, 2);
  p = PlaceRanks(*ParseHosts("a:1,b:1,a:1"), 3);
  EXPECT_EQ(p[1].host, "a");
  EXPECT_EQ(p[1].local_rank, 1);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
