// HandleTable (runtime/core/handle_table.h): what a framework thread sees of a collective it
// enqueued. Poll and Wait report completion and the status the loop thread gave; unknown and
// released handles are answered, not crashed on; outputs are handed over once; waiters on other
// threads wake when their own handle completes.
#include "runtime/core/handle_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace dadt {
namespace core {
namespace {

HandleResult WithStatus(Status s) {
  HandleResult r;
  r.status = std::move(s);
  return r;
}

TEST(HandleTable, HandlesAreDistinctAndPendingUntilCompleted) {
  HandleTable t;
  std::set<int64_t> seen;
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(seen.insert(t.Create()).second);
  const int64_t h = *seen.begin();
  EXPECT_EQ(t.Poll(h), 0);
  t.Complete(h, HandleResult{});
  EXPECT_EQ(t.Poll(h), 1);
  EXPECT_TRUE(t.Wait(h).ok());
}

TEST(HandleTable, WaitReturnsTheStatusTheLoopThreadGave) {
  HandleTable t;
  const int64_t h = t.Create();
  t.Complete(h, WithStatus(MismatchError("tensor 'grad.w': shapes differ")));
  Status s = t.Wait(h);
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_EQ(s.message(), "tensor 'grad.w': shapes differ");
  // Waiting again gives the same answer (the framework may poll, then wait).
  EXPECT_EQ(t.Wait(h).code(), StatusCode::kMismatch);
}

TEST(HandleTable, UnknownHandleIsAnErrorNotAHang) {
  HandleTable t;
  EXPECT_EQ(t.Poll(42), -1);
  EXPECT_EQ(t.Wait(42).code(), StatusCode::kInvalidArgument);
  Status s;
  EXPECT_TRUE(t.WaitFor(42, std::chrono::milliseconds(0), &s));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("42"), std::string::npos) << s.message();
  EXPECT_EQ(t.TakeOutput(42), nullptr);
  EXPECT_EQ(t.IntResult(42), -1);
  EXPECT_TRUE(t.ReceivedSplits(42).empty());
}

TEST(HandleTable, WaitForOnAPendingHandleGivesUpAndLeavesStatusAlone) {
  HandleTable t;
  const int64_t h = t.Create();
  Status s = Aborted("untouched");
  EXPECT_FALSE(t.WaitFor(h, std::chrono::milliseconds(1), &s));
  EXPECT_EQ(s.message(), "untouched");
  t.Complete(h, WithStatus(TimeoutError("late")));
  EXPECT_TRUE(t.WaitFor(h, std::chrono::milliseconds(0), &s));
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
}

TEST(HandleTable, WaitWakesWhenAnotherThreadCompletes) {
  HandleTable t;
  const int64_t h = t.Create();
  std::atomic<bool> returned{false};
  Status got;
  std::thread waiter([&] {
    got = t.Wait(h);
    returned = true;
  });
  // Whether the waiter is already asleep or not, it must see this completion.
  t.Complete(h, WithStatus(Aborted("peer died")));
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(got.code(), StatusCode::kAborted);
}

// A handle released by another thread while one waits on it (and many handles created meanwhile,
// which rehash the map) wakes the waiter with an error; it never reads the freed entry.
TEST(HandleTable, ReleasingAHandleWhileAnotherThreadWaitsOnItWakesItWithAnError) {
  HandleTable t;
  const int64_t h = t.Create();
  Status got, got_for;
  bool answered = false;
  std::thread waiter([&] { got = t.Wait(h); });
  std::thread timed([&] { answered = t.WaitFor(h, std::chrono::seconds(30), &got_for); });
  for (int i = 0; i < 10000; ++i) t.Create();
  t.Release(h);
  waiter.join();
  timed.join();
  // A waiter that was asleep gets Aborted; one that only got there after the release is told
  // the handle is unknown. Neither may hang or read the freed entry (the ASan tier checks that).
  for (const Status& s : {got, got_for}) {
    const bool slept = s.code() == StatusCode::kAborted &&
                       s.message().find("released while being waited on") != std::string::npos;
    const bool late = s.code() == StatusCode::kInvalidArgument;
    EXPECT_TRUE(slept || late) << s.ToString();
  }
  EXPECT_TRUE(answered);
}

TEST(HandleTable, ManyWaitersEachGetTheirOwnResult) {
  HandleTable t;
  constexpr int kHandles = 16;
  std::vector<int64_t> handles;
  for (int i = 0; i < kHandles; ++i) handles.push_back(t.Create());
  std::vector<Status> got(kHandles);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kHandles; ++i) {
    waiters.emplace_back([&, i] { got[i] = t.Wait(handles[i]); });
  }
  for (int i = kHandles - 1; i >= 0; --i) {  // reverse order: no waiter may take another's wake-up
    t.Complete(handles[i], WithStatus(InternalError("result " + std::to_string(i))));
  }
  for (auto& w : waiters) w.join();
  for (int i = 0; i < kHandles; ++i) EXPECT_EQ(got[i].message(), "result " + std::to_string(i));
}

TEST(HandleTable, OutputIsHandedOverOnceAndOnlyWhenDone) {
  HandleTable t;
  const int64_t h = t.Create();
  HandleResult r;
  r.output = HostBuffer::Allocate(DataType::kInt32, {2, 3});
  static_cast<int32_t*>(r.output->ptr())[5] = 77;
  r.int_result = 3;
  r.received_splits = {1, 0, 2};
  EXPECT_EQ(t.TakeOutput(h), nullptr);  // pending: nothing to take yet
  t.Complete(h, std::move(r));
  EXPECT_EQ(t.IntResult(h), 3);
  EXPECT_EQ(t.ReceivedSplits(h), (std::vector<int64_t>{1, 0, 2}));
  auto out = t.TakeOutput(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->bytes, 24);
  EXPECT_EQ(out->shape, (Shape{2, 3}));
  EXPECT_EQ(out->dtype, DataType::kInt32);
  EXPECT_EQ(static_cast<int32_t*>(out->ptr())[5], 77);
  EXPECT_EQ(t.TakeOutput(h), nullptr);
}

TEST(HandleTable, ReleasedHandleIsForgottenAndALateCompletionIsIgnored) {
  HandleTable t;
  const int64_t h = t.Create();
  t.Release(h);
  EXPECT_EQ(t.Poll(h), -1);
  t.Complete(h, HandleResult{});  // e.g. the loop thread finishing a handle the user dropped
  EXPECT_EQ(t.Poll(h), -1);
  EXPECT_NE(t.Create(), h);  // ids are not reused
}

TEST(HostBuffer, AllocatesShapeTimesElementSizeAndHandlesEmptyShapes) {
  auto b = HostBuffer::Allocate(DataType::kFloat64, {3, 0});
  EXPECT_EQ(b->bytes, 0);
  EXPECT_NE(b->ptr(), nullptr);
  auto s = HostBuffer::Allocate(DataType::kFloat16, {});
  EXPECT_EQ(s->bytes, 2);  // a scalar is one element
  EXPECT_EQ(s->device, kCpuDevice);
}

}  // namespace
}  // namespace core
}  // namespace dadt
