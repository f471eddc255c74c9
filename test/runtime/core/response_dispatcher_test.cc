// What a rank does with each released response, without a backend: the lane / here / fence route,
// the order of runs and drains, which entries a lane gets, failure, the workers' cache replica
// and the timeline marks.
#include "runtime/core/response_dispatcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dadt {
namespace core {
namespace {

Response Make(Response::Type type, std::vector<std::string> names, bool eager = false,
              int32_t device = kCpuDevice) {
  Response r;
  r.type = type;
  r.names = std::move(names);
  r.eager = eager;
  r.device = device;
  return r;
}

Request Allreduce(const std::string& name) {
  Request r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = {4};
  return r;
}

EntryMap Entries(std::initializer_list<std::string> names) {
  EntryMap m;
  for (const std::string& n : names) m[n].request = Allreduce(n);
  return m;
}

// Records each call as text: "lane:a,b", "drain", "here:c".
class RecordingRunner : public ResponseRunner {
 public:
  explicit RecordingRunner(bool lanes) : lanes_(lanes) {}
  bool has_lanes() const override { return lanes_; }
  void RunOnLane(const Response& r, EntryMap entries) override {
    std::string held;
    for (const std::string& n : r.names) held += entries.count(n) ? n : "";
    calls.push_back("lane:" + held);
  }
  Status DrainLanes() override {
    calls.push_back("drain");
    return Status::OK();
  }
  Status RunHere(const Response& r, EntryMap& entries) override {
    calls.push_back("here:" + r.names[0]);
    if (r.names[0] == fail_on) return Aborted("backend failed on " + fail_on);
    for (const std::string& n : r.names) entries.erase(n);
    return Status::OK();
  }

  std::vector<std::string> calls;
  std::string fail_on;

 private:
  bool lanes_;
};

class RecordingSink : public timeline::EventSink {
 public:
  void Consume(const timeline::Event& e) override { events.push_back(e); }
  std::vector<timeline::Event> events;
};

TEST(RouteForTest, LanesTakeCpuCollectivesThatMoveData) {
  using T = Response::Type;
  for (T t : {T::kAllreduce, T::kAllgather, T::kBroadcast, T::kAlltoall, T::kReducescatter}) {
    EXPECT_EQ(RouteFor(Make(t, {"x"}), true), Route::kLane) << static_cast<int>(t);
    EXPECT_EQ(RouteFor(Make(t, {"x"}), false), Route::kHereAfterLanes) << static_cast<int>(t);
  }
}

TEST(RouteForTest, EagerCpuAllreduceRunsHereWithoutWaiting) {
  EXPECT_EQ(RouteFor(Make(Response::Type::kAllreduce, {"b"}, /*eager=*/true), true), Route::kHere);
  EXPECT_EQ(RouteFor(Make(Response::Type::kAllreduce, {"b"}, /*eager=*/true), false), Route::kHere);
  EXPECT_EQ(RouteFor(Make(Response::Type::kAllreduce, {"b"}, true, kStagedGpuDevice), true),
            Route::kHere);
}

TEST(RouteForTest, EverythingElseIsAFence) {
  using T = Response::Type;
  for (T t : {T::kBarrier, T::kJoin, T::kError, T::kProcessSetAdd, T::kProcessSetRemove}) {
    EXPECT_EQ(RouteFor(Make(t, {"x"}), true), Route::kHereAfterLanes) << static_cast<int>(t);
  }
  EXPECT_EQ(RouteFor(Make(T::kAllreduce, {"g"}, false, /*device=*/0), true), Route::kHereAfterLanes)
      << "GPU collectives run on the loop thread";
  EXPECT_EQ(RouteFor(Make(T::kAllreduce, {"g"}, /*eager=*/true, /*device=*/0), true),
            Route::kHereAfterLanes);
  EXPECT_STREQ(RouteName(Route::kHereAfterLanes), "here after the lanes");
}

TEST(ResponseDispatcherTest, RunsInOrderDrainingOnlyBeforeFences) {
  RecordingRunner runner(/*lanes=*/true);
  std::vector<std::string> executed;
  ResponseDispatcher d(&runner, nullptr, nullptr,
                       [&](const Response& r) { executed.push_back(r.names[0]); });
  EntryMap entries = Entries({"a", "b", "c", "d"});
  const std::vector<Response> list = {
      Make(Response::Type::kAllreduce, {"a"}), Make(Response::Type::kAllreduce, {"b"}, true),
      Make(Response::Type::kBarrier, {"c"}), Make(Response::Type::kAllgather, {"d"})};
  ASSERT_TRUE(d.Dispatch(list, entries).ok());
  EXPECT_EQ(runner.calls,
            (std::vector<std::string>{"lane:a", "here:b", "drain", "here:c", "lane:d"}));
  EXPECT_EQ(executed, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(entries.empty()) << "lanes took theirs, the loop consumed the rest";
}

TEST(ResponseDispatcherTest, LaneGetsOnlyTheEntriesThisRankHolds) {
  RecordingRunner runner(true);
  ResponseDispatcher d(&runner, nullptr, nullptr, nullptr);
  EntryMap entries = Entries({"y", "other"});  // a joined rank has no "x"
  ASSERT_TRUE(d.Dispatch({Make(Response::Type::kAllreduce, {"x", "y"})}, entries).ok());
  EXPECT_EQ(runner.calls, std::vector<std::string>{"lane:y"});
  EXPECT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries.count("other"), 1u);
}

TEST(ResponseDispatcherTest, WithoutLanesEveryResponseRunsHere) {
  RecordingRunner runner(false);
  ResponseDispatcher d(&runner, nullptr, nullptr, nullptr);
  EntryMap entries = Entries({"a"});
  ASSERT_TRUE(d.Dispatch({Make(Response::Type::kAllreduce, {"a"})}, entries).ok());
  EXPECT_EQ(runner.calls, (std::vector<std::string>{"drain", "here:a"}));
}

TEST(ResponseDispatcherTest, AFailureStopsTheListAndLeavesTheRestPending) {
  RecordingRunner runner(true);
  runner.fail_on = "b";
  int executed = 0;
  ResponseDispatcher d(&runner, nullptr, nullptr, [&](const Response&) { ++executed; });
  EntryMap entries = Entries({"a", "b", "c"});
  Status s = d.Dispatch({Make(Response::Type::kBarrier, {"a"}),
                         Make(Response::Type::kBarrier, {"b"}),
                         Make(Response::Type::kAllreduce, {"c"})},
                        entries);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("backend failed on b"), std::string::npos) << s.message();
  EXPECT_EQ(executed, 1) << "only the response that ran counts";
  EXPECT_EQ(runner.calls.back(), "here:b");
  EXPECT_EQ(entries.count("c"), 1u) << "the caller fails what did not run";
}

TEST(ResponseDispatcherTest, WorkerReplicaLearnsAssignedSlotsBeforeTheResponseRuns) {
  RecordingRunner runner(true);
  ResponseCache replica(8);
  ResponseDispatcher d(&runner, nullptr, &replica, nullptr);
  EntryMap entries = Entries({"a", "b"});
  Response r = Make(Response::Type::kAllreduce, {"a", "b", "gone"});
  r.cache_slots = {3, -1, 4};
  r.cache_generations = {7, 0, 1};
  ASSERT_TRUE(d.Dispatch({r}, entries).ok());
  auto a = replica.Lookup(Allreduce("a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->slot, 3);
  EXPECT_EQ(a->generation, 7u);
  EXPECT_FALSE(replica.Lookup(Allreduce("b")).has_value()) << "slot -1: not cached";
  EXPECT_EQ(replica.size(), 1) << "nothing recorded for a name this rank does not hold";
}

TEST(ResponseDispatcherTest, RankZeroHasNoReplicaToFill) {
  RecordingRunner runner(true);
  ResponseDispatcher d(&runner, nullptr, /*replica=*/nullptr, nullptr);
  EntryMap entries = Entries({"a"});
  Response r = Make(Response::Type::kAllreduce, {"a"});
  r.cache_slots = {0};
  r.cache_generations = {1};
  EXPECT_TRUE(d.Dispatch({r}, entries).ok());
}

TEST(ResponseDispatcherTest, MarksTheEndOfNegotiationAndCycles) {
  timeline::EventStream events;
  auto sink = std::make_shared<RecordingSink>();
  events.AddSink(sink);
  RecordingRunner runner(true);
  ResponseDispatcher d(&runner, &events, nullptr, nullptr);
  d.set_mark_cycles(true);
  EntryMap entries = Entries({"a", "bad"});
  ASSERT_TRUE(d.Dispatch({Make(Response::Type::kAllreduce, {"a", "joined"}),
                          Make(Response::Type::kError, {"bad"})},
                         entries)
                  .ok());
  ASSERT_EQ(sink->events.size(), 3u);
  EXPECT_EQ(sink->events[0].activity, timeline::kCycleStart);
  EXPECT_EQ(sink->events[1].tensor, "allreduce.a");  // Horovod's row name (timeline::TensorRow)
  EXPECT_EQ(sink->events[1].phase, timeline::Phase::kEnd);
  EXPECT_EQ(sink->events[1].activity, timeline::NegotiateActivity("allreduce"));
  EXPECT_TRUE(sink->events[1].args.empty());
  EXPECT_EQ(sink->events[2].tensor, "allreduce.bad");
  EXPECT_EQ(sink->events[2].args, "{\"error\":true}");

  sink->events.clear();
  EntryMap none;
  ASSERT_TRUE(d.Dispatch({}, none).ok());
  EXPECT_TRUE(sink->events.empty()) << "no cycle mark for an empty list";
}

}  // namespace
}  // namespace core
}  // namespace dadt
