// EventStream: enabled() tracks the sinks, Emit fans out, and sinks come and go from other threads
// while the loop thread emits.
#include "timeline/event.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace dadt {
namespace timeline {
namespace {

class CountingSink : public EventSink {
 public:
  void Consume(const Event& e) override {
    if (removed.load(std::memory_order_relaxed)) late.fetch_add(1);
    count.fetch_add(1, std::memory_order_relaxed);
    last_activity = e.activity;
  }
  std::atomic<int64_t> count{0};
  std::atomic<bool> removed{false};
  std::atomic<int64_t> late{0};  // events delivered after RemoveSink returned
  std::string last_activity;
};

TEST(EventStreamTest, EnabledOnlyWhileSinksAreAttached) {
  EventStream stream;
  EXPECT_FALSE(stream.enabled());
  stream.Emit({1, Phase::kInstant, "t", "X", ""});  // no sink: nothing happens
  stream.AddSink(nullptr);
  EXPECT_FALSE(stream.enabled());

  auto a = std::make_shared<CountingSink>();
  auto b = std::make_shared<CountingSink>();
  stream.AddSink(a);
  stream.AddSink(a);  // already attached: ignored
  EXPECT_TRUE(stream.enabled());
  EXPECT_EQ(stream.sink_count(), 1u);
  stream.AddSink(b);
  EXPECT_EQ(stream.sink_count(), 2u);

  stream.Emit({2, Phase::kBegin, "t", kQueue, ""});
  EXPECT_EQ(a->count, 1);
  EXPECT_EQ(b->count, 1);
  EXPECT_EQ(a->last_activity, "QUEUE");

  EXPECT_TRUE(stream.RemoveSink(a.get()));
  EXPECT_FALSE(stream.RemoveSink(a.get()));
  EXPECT_TRUE(stream.enabled());
  stream.Emit({3, Phase::kEnd, "t", kQueue, ""});
  EXPECT_EQ(a->count, 1);
  EXPECT_EQ(b->count, 2);
  EXPECT_TRUE(stream.RemoveSink(b.get()));
  EXPECT_FALSE(stream.enabled());
  EXPECT_EQ(stream.sink_count(), 0u);
}

TEST(EventStreamTest, ActivityNamesFollowHorovod) {
  EXPECT_EQ(OpActivity("allreduce"), "ALLREDUCE");
  EXPECT_EQ(NegotiateActivity("allreduce"), "NEGOTIATE_ALLREDUCE");
  EXPECT_EQ(NegotiateActivity("reducescatter"), "NEGOTIATE_REDUCESCATTER");
  EXPECT_EQ(BackendActivity("gloo", "allgather"), "GLOO_ALLGATHER");
  EXPECT_EQ(BackendActivity("nccl", "allreduce"), "NCCL_ALLREDUCE");
  EXPECT_EQ(BackendActivity("gloo", "broadcast"), "GLOO_BCAST");  // Horovod's GLOO_BCAST, MPI_BCAST
  EXPECT_EQ(BackendActivity("mpi", "broadcast"), "MPI_BCAST");
  EXPECT_EQ(OpActivity("broadcast"), "BROADCAST");
  EXPECT_EQ(RankReadyActivity(1), "1");  // Horovod's rank-ready mark is the rank
  EXPECT_STREQ(kMemcpyInFusionBuffer, "MEMCPY_IN_FUSION_BUFFER");
  EXPECT_STREQ(kMemcpyOutFusionBuffer, "MEMCPY_OUT_FUSION_BUFFER");
  EXPECT_STREQ(kCycleStart, "CYCLE_START");
}

// Rows carry Horovod's tensor names: "<op>.<name>", as Horovod's torch ops name what they enqueue
// (Horovod's timeline test looks for "allreduce.test_allreduce").
TEST(EventStreamTest, RowsAreHorovodsTensorNames) {
  EXPECT_EQ(TensorRow("allreduce", "test_allreduce"), "allreduce.test_allreduce");
  EXPECT_EQ(TensorRow("allgather", "grad.0.weight"), "allgather.grad.0.weight");
  EXPECT_EQ(TensorRow("broadcast", "x"), "broadcast.x");
  EXPECT_EQ(TensorRow("allreduce", "allreduce_x"), "allreduce.allreduce_x");  // not "<op>."
  EXPECT_EQ(TensorRow("allreduce", "allgather.noname.1"), "allreduce.allgather.noname.1");
  EXPECT_EQ(TensorRow("allreduce", ""), "allreduce.");
  // Generated names carry the op already.
  EXPECT_EQ(TensorRow("allreduce", "allreduce.noname.3"), "allreduce.noname.3");
  EXPECT_EQ(TensorRow("allreduce", "allreduce.set2.noname.0"), "allreduce.set2.noname.0");
  EXPECT_EQ(TensorRow("allreduce", "grouped_allreduce.noname.1.0"), "grouped_allreduce.noname.1.0");
  EXPECT_EQ(TensorRow("barrier", "barrier.noname.0"), "barrier.noname.0");
  EXPECT_EQ(TensorRow("", "x"), "x");
}

TEST(EventStreamTest, ArgsHelpersMakeJsonObjects) {
  EXPECT_EQ(TensorArgs("float32", {2, 3}), R"({"dtype":"float32","shape":[2,3]})");
  EXPECT_EQ(TensorArgs("int64", {}), R"({"dtype":"int64","shape":[]})");
  EXPECT_EQ(ReadyRankArgs(1), R"({"ready_rank":1})");
}

TEST(EventStreamTest, NowMicrosIsMonotonic) {
  const int64_t a = NowMicros();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int64_t b = NowMicros();
  EXPECT_GE(b - a, 2000);
}

// One emitting thread (the loop thread) runs flat out while four control threads attach and
// detach their own sinks. A permanent sink must see every event, and no sink may see an event
// after its RemoveSink returned.
TEST(EventStreamTest, SinksComeAndGoWhileEmitting) {
  EventStream stream;
  auto permanent = std::make_shared<CountingSink>();
  stream.AddSink(permanent);

  std::atomic<bool> done{false};
  std::atomic<int64_t> emitted{0};
  std::thread loop([&] {
    Event e{0, Phase::kInstant, "grad", "X", ""};
    while (!done.load()) {
      if (stream.enabled()) {
        e.ts_us++;
        stream.Emit(e);
        emitted.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });

  std::vector<std::thread> control;
  std::atomic<int64_t> late{0}, delivered{0};
  for (int t = 0; t < 4; ++t) {
    control.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        auto sink = std::make_shared<CountingSink>();
        stream.AddSink(sink);
        EXPECT_TRUE(stream.enabled());
        std::this_thread::yield();
        ASSERT_TRUE(stream.RemoveSink(sink.get()));
        sink->removed.store(true);
        std::this_thread::yield();
        late += sink->late.load();
        delivered += sink->count.load();
      }
    });
  }
  for (auto& t : control) t.join();
  done = true;
  loop.join();

  EXPECT_EQ(late.load(), 0);
  EXPECT_EQ(permanent->count.load(), emitted.load());
  EXPECT_GT(emitted.load(), 0);
  EXPECT_TRUE(stream.enabled());
  EXPECT_EQ(stream.sink_count(), 1u);
  EXPECT_TRUE(stream.RemoveSink(permanent.get()));
  EXPECT_FALSE(stream.enabled());
}

}  // namespace
}  // namespace timeline
}  // namespace dadt
