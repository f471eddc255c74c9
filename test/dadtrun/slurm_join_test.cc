// dadtrun/slurm_join.h: the tasks of one step, as threads, get task 0's secret through a fake
// munge that seals each credential with its maker's uid (as munged does), honours uid
// restrictions and refuses replays.
#include "dadtrun/slurm_join.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/net/socket.h"

namespace dadt {
namespace dadtrun {
namespace {

using std::chrono::milliseconds;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
constexpr int kStorePort = 4242;

// One cluster's munged: the credentials made so far and those decoded (a replay is refused).
struct FakeMunged {
  struct Cred {
    uid_t uid;
    std::optional<uid_t> restrict_uid;
    std::string payload;
  };
  std::mutex mu;
  std::map<std::string, Cred> made;
  std::set<std::string> decoded;
};

class FakeMunge : public CredentialService {
 public:
  FakeMunge(FakeMunged* munged, uid_t uid, bool works = true)
      : munged_(munged), uid_(uid), works_(works) {}

  StatusOr<std::string> Encode(const std::string& payload,
                               std::optional<uid_t> restrict_uid) override {
    if (!works_) return PreconditionFailed("munge: Error: Failed to access \"/run/munge/munge.socket.2\"");
    std::lock_guard<std::mutex> lock(munged_->mu);
    const std::string cred = "MUNGE:" + std::to_string(munged_->made.size()) + ":";
    munged_->made[cred] = {uid_, restrict_uid, payload};
    return cred;
  }

  StatusOr<MungeDecoded> Decode(const std::string& credential) override {
    std::lock_guard<std::mutex> lock(munged_->mu);
    auto it = munged_->made.find(credential);
    if (it == munged_->made.end()) return PreconditionFailed("unmunge: Error: Invalid credential");
    if (it->second.restrict_uid && *it->second.restrict_uid != uid_) {
      return PreconditionFailed("unmunge: Error: Unauthorized credential for client UID=" +
                                std::to_string(uid_));
    }
    if (!munged_->decoded.insert(credential).second) {
      return PreconditionFailed("unmunge: Error: Replayed credential");
    }
    return MungeDecoded{it->second.uid, it->second.payload};
  }

 private:
  FakeMunged* munged_;
  uid_t uid_;
  bool works_;
};

SlurmTask Task(int rank, int size) {
  SlurmTask t;
  t.rank = rank;
  t.size = size;
  t.node = "node" + std::to_string(rank);
  t.rank0_node = "node0";
  t.step = "77.0";
  return t;
}

struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    StatusOr<int> l = net::ListenTcp("127.0.0.1", 0, &port);
    EXPECT_TRUE(l.ok()) << l.status().message();
    fd = l.ok() ? *l : -1;
  }
  ~Listener() { ::close(fd); }
};

// Runs task 0 (uid `uids[0]`) and tasks 1.. (uids[k], munge working where `works[k]`) as threads.
struct StepRun {
  Status task0;
  std::vector<StatusOr<JoinAnswer>> others;
};

StepRun RunStep(const std::vector<uid_t>& uids, std::vector<bool> works = {},
                milliseconds timeout = milliseconds(5000), SecretToHandOut handout = {kSecret, kStorePort, ""}) {
  const int size = static_cast<int>(uids.size());
  if (works.empty()) works.assign(uids.size(), true);
  FakeMunged munged;
  Listener listener;
  StepRun run;
  run.others.assign(size - 1, StatusOr<JoinAnswer>(InternalError("not run")));
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    FakeMunge munge(&munged, uids[0], works[0]);
    run.task0 = HandOutSecret(munge, Task(0, size), uids[0], listener.fd, handout, timeout);
  });
  for (int k = 1; k < size; ++k) {
    threads.emplace_back([&, k] {
      FakeMunge munge(&munged, uids[k], works[k]);
      run.others[k - 1] =
          AskForSecret(munge, Task(k, size), uids[k], "127.0.0.1", listener.port, timeout);
    });
  }
  for (std::thread& t : threads) t.join();
  return run;
}

TEST(SlurmJoinTest, EveryTaskOfOneUserGetsTheSecretAndTheStorePort) {
  for (int size : {2, 3, 7}) {
    StepRun run = RunStep(std::vector<uid_t>(size, 1000));
    ASSERT_TRUE(run.task0.ok()) << run.task0.message();
    for (const auto& answer : run.others) {
      ASSERT_TRUE(answer.ok()) << answer.status().message();
      EXPECT_EQ(answer->secret, kSecret);
      EXPECT_EQ(answer->store_port, kStorePort);
    }
  }
}

TEST(SlurmJoinTest, ATaskOfAnotherUserStopsEveryTaskNamingBothUids) {
  StepRun run = RunStep({1000, 1000, 2000});
  ASSERT_FALSE(run.task0.ok());
  EXPECT_NE(run.task0.message().find("task 2 of Slurm step 77.0"), std::string::npos)
      << run.task0.message();
  EXPECT_NE(run.task0.message().find("runs as uid 2000"), std::string::npos) << run.task0.message();
  EXPECT_NE(run.task0.message().find("task 0 as uid 1000"), std::string::npos)
      << run.task0.message();
  for (const auto& answer : run.others) {
    ASSERT_FALSE(answer.ok());
    EXPECT_NE(answer.status().message().find("runs as uid 2000"), std::string::npos)
        << answer.status().message();
  }
}

TEST(SlurmJoinTest, ATaskWithoutMungeStopsEveryTask) {
  StepRun run = RunStep({1000, 1000, 1000}, {true, false, true});
  ASSERT_FALSE(run.task0.ok());
  EXPECT_NE(run.task0.message().find("task 1 of Slurm step 77.0"), std::string::npos)
      << run.task0.message();
  EXPECT_NE(run.task0.message().find("Failed to access"), std::string::npos) << run.task0.message();
  ASSERT_FALSE(run.others[0].ok());
  EXPECT_NE(run.others[0].status().message().find("cannot get a munge credential"),
            std::string::npos);
  ASSERT_FALSE(run.others[1].ok());
  EXPECT_NE(run.others[1].status().message().find("task 1 of Slurm step 77.0"), std::string::npos)
      << run.others[1].status().message();
}

TEST(SlurmJoinTest, NoMungeOnTaskZeroStopsEveryTask) {
  StepRun run = RunStep({1000, 1000}, {false, true});
  ASSERT_FALSE(run.task0.ok());
  EXPECT_NE(run.task0.message().find("task 0 (on node0) cannot get a munge credential"),
            std::string::npos)
      << run.task0.message();
  ASSERT_FALSE(run.others[0].ok());
  EXPECT_NE(run.others[0].status().message().find("task 0 (on node0) cannot get a munge"),
            std::string::npos)
      << run.others[0].status().message();
}

TEST(SlurmJoinTest, ATaskThatNeverAsksIsNamedAtTheTimeOut) {
  FakeMunged munged;
  Listener listener;
  Status task0;
  StatusOr<JoinAnswer> one(InternalError("not run"));
  std::thread t0([&] {
    FakeMunge munge(&munged, 1000);
    task0 = HandOutSecret(munge, Task(0, 3), 1000, listener.fd, {kSecret, kStorePort, ""},
                          milliseconds(1000));
  });
  std::thread t1([&] {
    FakeMunge munge(&munged, 1000);
    one = AskForSecret(munge, Task(1, 3), 1000, "127.0.0.1", listener.port, milliseconds(1000));
  });
  t0.join();
  t1.join();
  ASSERT_FALSE(task0.ok());
  EXPECT_NE(task0.message().find("task(s) 2 of Slurm step 77.0 did not ask"), std::string::npos)
      << task0.message();
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("task(s) 2 of Slurm step 77.0 did not ask"),
            std::string::npos)
      << one.status().message();
}

TEST(SlurmJoinTest, NoTaskZeroIsATimeOutNotAHang) {
  FakeMunged munged;
  int port = 0;
  {
    Listener closed;  // a port that nobody listens on once this closes
    port = closed.port;
  }
  FakeMunge munge(&munged, 1000);
  StatusOr<JoinAnswer> one =
      AskForSecret(munge, Task(1, 2), 1000, "127.0.0.1", port, milliseconds(600));
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("did not answer at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << one.status().message();
}

// Another user's process answering at the port in task 0's place.
TEST(SlurmJoinTest, AnAnswerFromAnotherUserIsRefused) {
  FakeMunged munged;
  Listener listener;
  Status impostor;
  StatusOr<JoinAnswer> one(InternalError("not run"));
  std::thread t0([&] {
    FakeMunge munge(&munged, 666);
    impostor = HandOutSecret(munge, Task(0, 2), /*uid=*/1000, listener.fd,
                             {kSecret, kStorePort, ""}, milliseconds(3000));
  });
  std::thread t1([&] {
    FakeMunge munge(&munged, 1000);
    one = AskForSecret(munge, Task(1, 2), 1000, "127.0.0.1", listener.port, milliseconds(3000));
  });
  t0.join();
  t1.join();
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("runs as uid 666"), std::string::npos)
      << one.status().message();
}

TEST(SlurmJoinTest, ARequestForAnotherStepIsTurnedAwayAndTheStepGoesOn) {
  FakeMunged munged;
  Listener listener;
  Status task0;
  StatusOr<JoinAnswer> one(InternalError("not run"));
  StatusOr<JoinAnswer> stray(InternalError("not run"));
  std::thread t0([&] {
    FakeMunge munge(&munged, 1000);
    task0 = HandOutSecret(munge, Task(0, 2), 1000, listener.fd, {kSecret, kStorePort, ""},
                          milliseconds(5000));
  });
  {
    FakeMunge munge(&munged, 1000);
    SlurmTask other = Task(1, 2);
    other.step = "78.0";
    stray = AskForSecret(munge, other, 1000, "127.0.0.1", listener.port, milliseconds(5000));
  }
  std::thread t1([&] {
    FakeMunge munge(&munged, 1000);
    one = AskForSecret(munge, Task(1, 2), 1000, "127.0.0.1", listener.port, milliseconds(5000));
  });
  t0.join();
  t1.join();
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find("task 0 of Slurm step 77.0, not of 78.0"),
            std::string::npos)
      << stray.status().message();
  ASSERT_TRUE(task0.ok()) << task0.message();
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->secret, kSecret);
}

TEST(SlurmJoinTest, ATaskZeroThatCouldNotStartItsStoreSaysWhyToEveryTask) {
  StepRun run = RunStep({1000, 1000}, {}, milliseconds(5000), {"", 0, "task 0: no store"});
  ASSERT_FALSE(run.task0.ok());
  ASSERT_FALSE(run.others[0].ok());
  EXPECT_NE(run.others[0].status().message().find("task 0: no store"), std::string::npos)
      << run.others[0].status().message();
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
