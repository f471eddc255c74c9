// dadtrun/munge.h: MungeCli against stand-in munge/unmunge scripts on PATH (what goes on their
// command line and stdin, how their errors read), unmunge's output and Slurm's AuthInfo socket.
#include "dadtrun/munge.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace dadt {
namespace dadtrun {
namespace {

class MungeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(tmp != nullptr ? tmp : "/tmp") + "/dadt-munge-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    const char* path = std::getenv("PATH");
    old_path_ = path != nullptr ? path : "/usr/bin:/bin";
    ::setenv("PATH", (dir_ + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override {
    ::setenv("PATH", old_path_.c_str(), 1);
    for (const char* f : {"munge", "unmunge", "munge.args", "unmunge.args"}) {
      std::remove((dir_ + "/" + f).c_str());
    }
    ::rmdir(dir_.c_str());
  }
  void Script(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
  }
  std::string Read(const std::string& name) {
    std::ifstream f(dir_ + "/" + name);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // A munge that wraps stdin in base64 and an unmunge that unwraps it, both recording their args.
  void FakeMungePair() {
    Script("munge", "echo \"$*\" > " + dir_ + "/munge.args; printf 'MUNGE:'; base64 -w0; echo ':'");
    Script("unmunge", "echo \"$*\" > " + dir_ + "/unmunge.args; c=$(cat); c=${c#MUNGE:}; c=${c%:}\n"
                      "printf 'UID:              4321\\n\\n'; printf '%s' \"$c\" | base64 -d");
  }

  std::string dir_;
  std::string old_path_;
};

TEST_F(MungeCliTest, PayloadGoesThroughStdinAndComesBackWithItsUid) {
  FakeMungePair();
  auto munge = MungeCli("/x/munge.socket");
  StatusOr<std::string> cred = munge->Encode("step=1.0 secret=hush", 77);
  ASSERT_TRUE(cred.ok()) << cred.status().message();
  EXPECT_EQ(cred->rfind("MUNGE:", 0), 0u) << *cred;
  const std::string args = Read("munge.args");
  EXPECT_NE(args.find("--cipher=aes128"), std::string::npos) << args;
  EXPECT_NE(args.find("--restrict-uid=77"), std::string::npos) << args;
  EXPECT_NE(args.find("--socket=/x/munge.socket"), std::string::npos) << args;
  EXPECT_EQ(args.find("hush"), std::string::npos) << "the payload was on the command line: " << args;
  StatusOr<MungeDecoded> got = munge->Decode(*cred);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->uid, 4321u);
  EXPECT_EQ(got->payload, "step=1.0 secret=hush");
  EXPECT_NE(Read("unmunge.args").find("--socket=/x/munge.socket"), std::string::npos);
  // Unrestricted: no --restrict-uid; munge's default socket: no --socket.
  ASSERT_TRUE(MungeCli("")->Encode("x", std::nullopt).ok());
  EXPECT_EQ(Read("munge.args"), "--cipher=aes128\n");
}

TEST_F(MungeCliTest, MungesErrorIsTheLastLineOfItsStderr) {
  Script("munge", "cat >/dev/null; echo 'munge: Error: Failed to access \"/x/s\": No such file' >&2; exit 6");
  // This one does not read its stdin: writing the credential must not kill us with SIGPIPE.
  Script("unmunge", "echo 'unmunge: Error: Replayed credential' >&2; exit 17");
  auto munge = MungeCli("/x/s");
  StatusOr<std::string> cred = munge->Encode("p", std::nullopt);
  ASSERT_FALSE(cred.ok());
  EXPECT_NE(cred.status().message().find("munge: Error: Failed to access \"/x/s\""), std::string::npos)
      << cred.status().message();
  EXPECT_NE(cred.status().message().find("Slurm's AuthInfo"), std::string::npos);
  StatusOr<MungeDecoded> got = munge->Decode("MUNGE:abc:");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("Replayed credential"), std::string::npos)
      << got.status().message();
}

TEST_F(MungeCliTest, NoMungeProgramIsNamed) {
  ::setenv("PATH", dir_.c_str(), 1);  // nothing there
  StatusOr<std::string> cred = MungeCli("")->Encode("p", std::nullopt);
  ASSERT_FALSE(cred.ok());
  EXPECT_NE(cred.status().message().find("munge is not installed"), std::string::npos)
      << cred.status().message();
}

TEST(MungeTest, UnmungeOutput) {
  StatusOr<MungeDecoded> d = ParseUnmungeOutput("UID:              1000\n\nhello world");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->uid, 1000u);
  EXPECT_EQ(d->payload, "hello world");
  d = ParseUnmungeOutput("STATUS: 0\nUID: 0\n\n");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->uid, 0u);
  EXPECT_EQ(d->payload, "");
  EXPECT_FALSE(ParseUnmungeOutput("UID: bob\n\nx").ok());
  EXPECT_FALSE(ParseUnmungeOutput("STATUS: 0\n\nx").ok());
  EXPECT_FALSE(ParseUnmungeOutput("").ok());
}

TEST(MungeTest, SocketFromSlurmAuthInfo) {
  EXPECT_EQ(SlurmAuthInfoSocket("ClusterName=x\nAuthType=auth/munge\n"), "");
  EXPECT_EQ(SlurmAuthInfoSocket("AuthInfo=socket=/tmp/m/munge.socket\n"), "/tmp/m/munge.socket");
  EXPECT_EQ(SlurmAuthInfoSocket("  authinfo = cred_expire=100, socket=/run/m.sock # ours\n"),
            "/run/m.sock");
  EXPECT_EQ(SlurmAuthInfoSocket("#AuthInfo=socket=/nope\nAuthInfo=ttl=60\n"), "");
  EXPECT_EQ(MungeSocketForSlurm({{"SLURM_CONF", "/nonexistent/slurm.conf"}}), "");
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
