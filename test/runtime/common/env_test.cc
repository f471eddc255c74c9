// env::FindOnPath: how dadtrun finds mpirun and srun, as a shell would.
#include "runtime/common/env.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace dadt {
namespace env {
namespace {

class FindOnPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dadt_env_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    for (const char* d : {"/a", "/b", "/c"}) ASSERT_EQ(::mkdir((root_ + d).c_str(), 0755), 0);
    const char* old = std::getenv("PATH");
    saved_path_ = old ? old : "";
  }
  void TearDown() override {
    ::setenv("PATH", saved_path_.c_str(), 1);
    std::string cmd = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void MakeFile(const std::string& rel, mode_t mode) {
    std::ofstream(root_ + rel) << "#!/bin/sh\n";
    ASSERT_EQ(::chmod((root_ + rel).c_str(), mode), 0);
  }
  std::string root_;
  std::string saved_path_;
};

TEST_F(FindOnPathTest, TakesTheFirstExecutableRegularFileInPathOrder) {
  MakeFile("/a/tool", 0644);                                   // not executable: skipped
  ASSERT_EQ(::mkdir((root_ + "/b/tool").c_str(), 0755), 0);  // a directory: skipped
  MakeFile("/c/tool", 0755);
  ::setenv("PATH", ("::" + root_ + "/a:" + root_ + "/b:" + root_ + "/c").c_str(), 1);
  EXPECT_EQ(FindOnPath("tool"), root_ + "/c/tool");
  MakeFile("/a/tool2", 0755);
  MakeFile("/c/tool2", 0755);
  EXPECT_EQ(FindOnPath("tool2"), root_ + "/a/tool2");
}

TEST_F(FindOnPathTest, EmptyWhenAbsentOrPathUnset) {
  ::setenv("PATH", (root_ + "/a").c_str(), 1);
  EXPECT_EQ(FindOnPath("no-such-tool"), "");
  ::unsetenv("PATH");
  EXPECT_EQ(FindOnPath("sh"), "");
}

}  // namespace
}  // namespace env
}  // namespace dadt
