// TensorQueue (runtime/core/tensor_queue.h): the hand-off from framework threads to the loop
// thread. Entries come out in the order they went in, exactly once, even from several threads; a
// name already in flight (in its process set) is refused at once with its name in the message
// until Finish; Close
// returns what was queued and refuses the rest with its reason; the wake fd becomes readable on
// each push and on Wake, and ClearWake quiets it.
#include "runtime/core/tensor_queue.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dadt {
namespace core {
namespace {

TensorEntry Entry(const std::string& name, int64_t handle = -1) {
  TensorEntry e;
  e.request.name = name;
  e.handle = handle;
  return e;
}

bool Readable(int fd, int timeout_ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(TensorQueue, DrainReturnsEntriesInPushOrderOnce) {
  TensorQueue q;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.Push(Entry("t" + std::to_string(i), i)).ok());
  std::vector<TensorEntry> got = q.Drain();
  ASSERT_EQ(got.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].request.name, "t" + std::to_string(i));
    EXPECT_EQ(got[i].handle, i);
  }
  EXPECT_TRUE(q.Drain().empty());
}

TEST(TensorQueue, TheSameNameMayBeInFlightInTwoProcessSets) {
  TensorQueue q;
  TensorEntry in_set = Entry("w");
  in_set.request.process_set_id = 2;
  ASSERT_TRUE(q.Push(Entry("w")).ok());
  ASSERT_TRUE(q.Push(in_set).ok()) << "another set: another tensor";
  Status again = q.Push(in_set);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("'w' is already in flight in process set 2"), std::string::npos)
      << again.message();
  q.Finish(EntryKey(2, "w"));
  EXPECT_TRUE(q.Push(in_set).ok());
  EXPECT_NE(EntryKey(2, "w"), EntryKey(0, "w"));
  EXPECT_EQ(EntryKey(0, "w"), "w");
}

// What the liveness watch reports a rank waits for: each in-flight tensor by its own name (a
// process set's too), data-plane waits first, then the oldest; finished ones are gone.
TEST(TensorQueue, InFlightListsDataPlaneWaitsFirstThenTheOldest) {
  TensorQueue q;
  TensorEntry in_set = Entry("b");
  in_set.request.process_set_id = 2;
  in_set.request.op = OpType::kAllgather;
  ASSERT_TRUE(q.Push(Entry("a")).ok());
  ASSERT_TRUE(q.Push(in_set).ok());
  ASSERT_TRUE(q.Push(Entry("c")).ok());
  q.MarkReleased(2, {"b", "unknown"}, std::chrono::steady_clock::now());
  std::vector<InFlightTensor> got = q.InFlight(8);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].name, "b");
  EXPECT_TRUE(got[0].in_data_plane);
  EXPECT_STREQ(got[0].op, "allgather");
  EXPECT_EQ(got[1].name, "a");
  EXPECT_FALSE(got[1].in_data_plane);
  EXPECT_EQ(got[2].name, "c");
  EXPECT_EQ(q.InFlight(1).size(), 1u);
  q.Finish(EntryKey(2, "b"));
  got = q.InFlight(8);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "a");
}

TEST(TensorQueue, NameInFlightIsRefusedWithItsNameUntilFinished) {
  TensorQueue q;
  ASSERT_TRUE(q.Push(Entry("grad.w")).ok());
  Status dup = q.Push(Entry("grad.w"));
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("'grad.w'"), std::string::npos) << dup.message();
  // Drained (negotiating, executing) is still in flight.
  EXPECT_EQ(q.Drain().size(), 1u);
  EXPECT_EQ(q.Push(Entry("grad.w")).code(), StatusCode::kInvalidArgument);
  // Another name is not affected.
  EXPECT_TRUE(q.Push(Entry("grad.b")).ok());
  q.Finish("grad.w");
  EXPECT_TRUE(q.Push(Entry("grad.w")).ok());
  EXPECT_EQ(q.Drain().size(), 2u);
}

TEST(TensorQueue, CloseReturnsWhatWasQueuedAndRefusesLaterPushesWithTheReason) {
  TensorQueue q;
  ASSERT_TRUE(q.Push(Entry("a")).ok());
  ASSERT_TRUE(q.Push(Entry("b")).ok());
  std::vector<TensorEntry> left = q.Close(Aborted("rank 2 exited"));
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].request.name, "a");
  EXPECT_EQ(left[1].request.name, "b");
  Status s = q.Push(Entry("c"));
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_EQ(s.message(), "rank 2 exited");
  EXPECT_TRUE(q.Drain().empty());
}

TEST(TensorQueue, WakeFdSignalsPushesAndWakesAndClearsOnClearWake) {
  TensorQueue q;
  ASSERT_GE(q.wake_fd(), 0);
  EXPECT_FALSE(Readable(q.wake_fd()));
  ASSERT_TRUE(q.Push(Entry("a")).ok());
  ASSERT_TRUE(q.Push(Entry("b")).ok());
  EXPECT_TRUE(Readable(q.wake_fd()));
  q.ClearWake();  // one read clears any number of pushes (an eventfd counter)
  EXPECT_FALSE(Readable(q.wake_fd()));
  q.Wake();
  EXPECT_TRUE(Readable(q.wake_fd()));
  q.ClearWake();
  q.ClearWake();  // clearing a quiet fd does not block
  EXPECT_FALSE(Readable(q.wake_fd()));
}

TEST(TensorQueue, RefusedPushDoesNotWakeTheLoop) {
  TensorQueue q;
  ASSERT_TRUE(q.Push(Entry("a")).ok());
  q.ClearWake();
  EXPECT_FALSE(q.Push(Entry("a")).ok());
  EXPECT_FALSE(Readable(q.wake_fd()));
}

// Framework threads push while the loop thread drains on each wake-up: every entry arrives
// exactly once, and each thread's entries keep their order.
TEST(TensorQueue, ConcurrentPushesAllArriveOnceInPerThreadOrder) {
  TensorQueue q;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&q, t] {
      for (int i = 0; i < kPerThread; ++i) {
        TensorEntry e = Entry(std::to_string(t) + "/" + std::to_string(i), t * kPerThread + i);
        EXPECT_TRUE(q.Push(std::move(e)).ok());
      }
    });
  }
  std::vector<int> next(kThreads, 0);
  int received = 0;
  while (received < kThreads * kPerThread) {
    // Generous: only there so that a lost wake-up fails the test instead of hanging it.
    ASSERT_TRUE(Readable(q.wake_fd(), 30000)) << "lost wake-up after " << received << " entries";
    q.ClearWake();
    for (TensorEntry& e : q.Drain()) {
      const int t = static_cast<int>(e.handle / kPerThread);
      EXPECT_EQ(e.handle % kPerThread, next[t]) << "thread " << t << " out of order";
      next[t] = static_cast<int>(e.handle % kPerThread) + 1;
      ++received;
    }
  }
  for (auto& p : producers) p.join();
  EXPECT_TRUE(q.Drain().empty());
}

}  // namespace
}  // namespace core
}  // namespace dadt
