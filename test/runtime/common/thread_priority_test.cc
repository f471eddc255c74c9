// MakeThisThreadRealtime: the calling thread, and threads it creates afterwards, run SCHED_FIFO;
// other threads keep their scheduling. Where real-time scheduling is not allowed, the call says
// why and nothing changes.
#include "runtime/common/thread_priority.h"

#include <pthread.h>
#include <sched.h>

#include <thread>

#include "gtest/gtest.h"

namespace dadt {
namespace {

int Policy() {
  int policy = -1;
  sched_param param{};
  pthread_getschedparam(pthread_self(), &policy, &param);
  return policy;
}

TEST(ThreadPriorityTest, CallingThreadAndItsChildrenBecomeRealtime) {
  Status s;
  int mine = -1, child = -1;
  std::thread([&] {
    s = MakeThisThreadRealtime();
    mine = Policy();
    std::thread([&] { child = Policy(); }).join();
  }).join();
  if (!s.ok()) {
    EXPECT_EQ(s.code(), StatusCode::kPreconditionFailed);
    EXPECT_NE(s.message().find("SCHED_FIFO"), std::string::npos) << s.message();
    EXPECT_EQ(mine, SCHED_OTHER) << "a refused call changed nothing";
    GTEST_SKIP() << "real-time scheduling is not allowed here: " << s.message();
  }
  EXPECT_EQ(mine, SCHED_FIFO);
  EXPECT_EQ(child, SCHED_FIFO);
  EXPECT_EQ(Policy(), SCHED_OTHER) << "only the calling thread changes";
}

}  // namespace
}  // namespace dadt
