// Executor (runtime/core/executor.h) and the timeline: every tensor of a fused response gets its
// own nested bars, closed on error paths too; which response types move data.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/executor.h"
#include "test/runtime/core/executor_test_util.h"
#include "timeline/event.h"

namespace dadt {
namespace core {
namespace {

using namespace testing_executor;  // NOLINT: test helpers

class RecordingSink : public timeline::EventSink {
 public:
  void Consume(const timeline::Event& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    const char* phase = e.phase == timeline::Phase::kBegin ? "B:" : e.phase == timeline::Phase::kEnd ? "E:" : "I:";
    bars_[e.tensor].push_back(phase + e.activity);
    if (e.phase == timeline::Phase::kEnd && !e.args.empty()) args_[e.tensor] = e.args;
  }
  std::vector<std::string> bars(const std::string& tensor) {
    std::lock_guard<std::mutex> lock(mu_);
    return bars_[tensor];
  }
  std::string args(const std::string& tensor) {
    std::lock_guard<std::mutex> lock(mu_);
    return args_[tensor];
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<std::string>> bars_;
  std::map<std::string, std::string> args_;
};

// Every tensor of a fused response gets its own nested bars, and every bar is closed, also when
// the backend fails (timeline viewers would otherwise show a bar left open).
TEST(Executor, TimelineBarsNestPerTensorAndCloseEvenOnFailure) {
  for (const bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "backend fails" : "backend succeeds");
    FakeBackend backend(fail ? Aborted("peer lost") : Status::OK());
    timeline::EventStream events;
    auto sink = std::make_shared<RecordingSink>();
    events.AddSink(sink);
    RankState s(&backend, 0, 1, &events);
    std::vector<float> a(2), b(3), g(4);
    s.Add(Entry(OpType::kAllreduce, "a", DataType::kFloat32, {2}, a.data(), a.data()));
    s.Add(Entry(OpType::kAllreduce, "b", DataType::kFloat32, {3}, b.data(), b.data()));
    (void)s.executor.Execute(Make(Response::Type::kAllreduce, {"a", "b"}, {2, 3}), s.entries);
    std::vector<std::string> expected = {"B:ALLREDUCE", "B:MEMCPY_IN_FUSION_BUFFER",
                                         "E:MEMCPY_IN_FUSION_BUFFER", "B:FAKE_ALLREDUCE",
                                         "E:FAKE_ALLREDUCE"};
    if (!fail) expected.insert(expected.end(), {"B:MEMCPY_OUT_FUSION_BUFFER", "E:MEMCPY_OUT_FUSION_BUFFER"});
    expected.push_back("E:ALLREDUCE");
    EXPECT_EQ(sink->bars("allreduce.a"), expected);
    EXPECT_EQ(sink->bars("allreduce.b"), expected);
    EXPECT_EQ(sink->args("allreduce.b"), timeline::TensorArgs("float32", {3}));

    s.Add(Entry(OpType::kAllgather, "g", DataType::kFloat32, {4}, g.data(), nullptr));
    (void)s.executor.Execute(Make(Response::Type::kAllgather, {"g"}, {4}), s.entries);
    EXPECT_EQ(sink->bars("allgather.g"), (std::vector<std::string>{"B:ALLGATHER", "B:FAKE_ALLGATHER",
                                                                    "E:FAKE_ALLGATHER", "E:ALLGATHER"}));
  }
}

TEST(Executor, MovesDataOnlyForTheCollectives) {
  for (auto t : {Response::Type::kAllreduce, Response::Type::kAllgather, Response::Type::kBroadcast,
                 Response::Type::kAlltoall, Response::Type::kReducescatter}) {
    EXPECT_TRUE(Executor::MovesData(t));
  }
  for (auto t : {Response::Type::kBarrier, Response::Type::kJoin, Response::Type::kError}) {
    EXPECT_FALSE(Executor::MovesData(t));
  }
}

}  // namespace
}  // namespace core
}  // namespace dadt
