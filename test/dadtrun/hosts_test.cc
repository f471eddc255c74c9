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

TEST(HostsTest, CheckAllLocalNamesTheRemoteHost) {
  StatusOr<std::vector<HostSlots>> h = ParseHosts("localhost:2,gpu7:2");
  ASSERT_TRUE(h.ok());
  Status s = CheckAllLocal(*h, "node1");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "host 'gpu7' is not this machine; launching over ssh is not supported yet");
  EXPECT_TRUE(CheckAllLocal(*ParseHosts("localhost:2,node1:1"), "node1").ok());
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
