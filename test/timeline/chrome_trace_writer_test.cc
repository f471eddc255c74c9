// ChromeTraceWriter: every event lands in its tensor's row, the file parses at every moment while
// the writer runs, and a full queue drops and counts instead of blocking the loop thread.
#include "timeline/chrome_trace_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <thread>

#include "test/timeline/trace_util.h"

namespace dadt {
namespace timeline {
namespace {

using nlohmann::json;
using testing::EntriesWithPhase;
using testing::ParseTrace;
using testing::ReadTrace;
using testing::TempPath;

json ReadDoc(const std::string& path) {
  std::string error;
  json doc = ParseTrace(ReadTrace(path), &error);
  EXPECT_FALSE(doc.is_discarded()) << error;
  return doc;
}

// tensor name -> pid, from the process_name metadata.
std::map<std::string, int> Rows(const json& doc) {
  std::map<std::string, int> rows;
  for (const auto& e : EntriesWithPhase(doc, "M")) {
    if (e["name"] == "process_name") rows[e["args"]["name"]] = e["pid"];
  }
  return rows;
}

// One tensor's life as the runtime emits it.
void EmitLifecycle(ChromeTraceWriter& w, const std::string& name, int64_t t) {
  w.Consume({t, Phase::kBegin, name, kQueue, ""});
  w.Consume({t + 1, Phase::kEnd, name, kQueue, ""});
  w.Consume({t + 1, Phase::kBegin, name, NegotiateActivity("allreduce"), ""});
  w.Consume({t + 2, Phase::kInstant, name, "1", ReadyRankArgs(1)});
  w.Consume({t + 3, Phase::kEnd, name, NegotiateActivity("allreduce"), ""});
  w.Consume({t + 4, Phase::kBegin, name, "ALLREDUCE", ""});
  w.Consume({t + 4, Phase::kBegin, name, kMemcpyInFusionBuffer, ""});
  w.Consume({t + 5, Phase::kEnd, name, kMemcpyInFusionBuffer, ""});
  w.Consume({t + 5, Phase::kBegin, name, BackendActivity("gloo", "allreduce"), ""});
  w.Consume({t + 8, Phase::kEnd, name, BackendActivity("gloo", "allreduce"), ""});
  w.Consume({t + 8, Phase::kBegin, name, kMemcpyOutFusionBuffer, ""});
  w.Consume({t + 9, Phase::kEnd, name, kMemcpyOutFusionBuffer, ""});
  w.Consume({t + 9, Phase::kEnd, name, "ALLREDUCE", TensorArgs("float32", {2, 3})});
}
constexpr int kLifecycleEvents = 13;

TEST(ChromeTraceWriterTest, WritesEveryEventInItsTensorsRow) {
  const std::string path = TempPath("rows");
  ChromeTraceWriter w;
  ASSERT_TRUE(w.Start(path).ok());
  EXPECT_TRUE(ReadDoc(path).empty());  // valid before the first event
  const std::vector<std::string> names = {"grad/w\"1\"", "grad\\b", "gr\xc3\xa4" "d\n2"};
  for (size_t i = 0; i < names.size(); ++i) EmitLifecycle(w, names[i], 100 * i);
  w.Consume({7, Phase::kInstant, "", kCycleStart, ""});
  ASSERT_TRUE(w.Stop().ok());
  EXPECT_EQ(w.written(), names.size() * kLifecycleEvents + 1);
  EXPECT_EQ(w.dropped(), 0u);

  const json doc = ReadDoc(path);
  const auto rows = Rows(doc);
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_EQ(rows.count(names[i]), 1u) << names[i];
    const int pid = rows.at(names[i]);
    EXPECT_EQ(pid, static_cast<int>(i + 1));  // by first appearance
    int b = 0, e = 0, inst = 0;
    for (const auto& ev : doc) {
      if (ev["pid"] != pid || ev["ph"] == "M") continue;
      EXPECT_EQ(ev["tid"], pid);
      b += ev["ph"] == "B";
      e += ev["ph"] == "E";
      inst += ev["ph"] == "i";
      if (ev["ph"] == "E" && ev["name"] == "ALLREDUCE") {
        EXPECT_EQ(ev["args"]["dtype"], "float32");
      }
    }
    EXPECT_EQ(b, 6);
    EXPECT_EQ(e, 6);
    EXPECT_EQ(inst, 1);
  }
  EXPECT_EQ(EntriesWithPhase(doc, "i").size(), names.size() + 1);
}

TEST(ChromeTraceWriterTest, AttachedToAnEventStream) {
  const std::string path = TempPath("stream");
  EventStream stream;
  auto writer = std::make_shared<ChromeTraceWriter>();
  ASSERT_TRUE(writer->Start(path).ok());
  stream.AddSink(writer);
  ASSERT_TRUE(stream.enabled());
  stream.Emit({NowMicros(), Phase::kBegin, "w", kQueue, ""});
  stream.Emit({NowMicros(), Phase::kEnd, "w", kQueue, ""});
  ASSERT_TRUE(stream.RemoveSink(writer.get()));
  stream.Emit({NowMicros(), Phase::kBegin, "after", kQueue, ""});  // nobody listens any more
  ASSERT_TRUE(writer->Stop().ok());
  const json doc = ReadDoc(path);
  EXPECT_EQ(Rows(doc), (std::map<std::string, int>{{"w", 1}}));
  EXPECT_EQ(EntriesWithPhase(doc, "B").size() + EntriesWithPhase(doc, "E").size(), 2u);
}

TEST(ChromeTraceWriterTest, LifecycleErrorsAndRestart) {
  const std::string path = TempPath("life");
  ChromeTraceWriter w;
  w.Consume({1, Phase::kInstant, "early", "X", ""});  // not started: ignored
  EXPECT_EQ(w.Start("/nonexistent-dir/x.json").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.Start(path).ok());
  EXPECT_TRUE(w.running());
  EXPECT_EQ(w.Start(path).code(), StatusCode::kPreconditionFailed);
  w.Consume({2, Phase::kInstant, "first", "X", ""});
  ASSERT_TRUE(w.Stop().ok());
  EXPECT_TRUE(w.Stop().ok());  // idempotent
  EXPECT_FALSE(w.running());
  w.Consume({3, Phase::kInstant, "late", "X", ""});  // stopped: ignored

  ASSERT_TRUE(w.Start(path).ok());  // a new document with new rows
  w.Consume({4, Phase::kInstant, "second", "X", ""});
  ASSERT_TRUE(w.Stop().ok());
  const auto rows = Rows(ReadDoc(path));
  EXPECT_EQ(rows, (std::map<std::string, int>{{"second", 1}}));
  EXPECT_EQ(w.written(), 1u);
}

TEST(ChromeTraceWriterTest, FlushesWithoutStop) {
  const std::string path = TempPath("flush");
  ChromeTraceWriterOptions opts;
  opts.flush_interval = std::chrono::milliseconds(20);
  ChromeTraceWriter w(opts);
  ASSERT_TRUE(w.Start(path).ok());
  w.Consume({1, Phase::kInstant, "t", "X", ""});
  size_t seen = 0;
  for (int i = 0; i < 500 && seen == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = EntriesWithPhase(ReadDoc(path), "i").size();
  }
  EXPECT_EQ(seen, 1u);
  ASSERT_TRUE(w.Stop().ok());
}

// A reader polls the file while the loop thread emits flat out and the writer commits every
// millisecond: every snapshot must parse, and the event count only grows.
TEST(ChromeTraceWriterTest, EverySnapshotParsesWhileWriting) {
  const std::string path = TempPath("live");
  ChromeTraceWriterOptions opts;
  opts.flush_interval = std::chrono::milliseconds(1);
  opts.flush_events = 64;
  opts.queue_capacity = 1 << 16;
  ChromeTraceWriter w(opts);
  ASSERT_TRUE(w.Start(path).ok());

  // Paced like training steps, so that the reader sees the file at many sizes.
  constexpr int kSteps = 150, kTensors = 20;
  std::atomic<bool> done{false};
  std::thread loop([&] {
    for (int step = 0; step < kSteps; ++step) {
      for (int t = 0; t < kTensors; ++t) {
        EmitLifecycle(w, "grad." + std::to_string(t) + "\"q\"", step * 100);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    done = true;
  });
  int reads = 0;
  size_t last = 0;
  while (!done.load() || reads < 10) {
    std::string error;
    const std::string text = ReadTrace(path);
    const json doc = ParseTrace(text, &error);
    ASSERT_FALSE(doc.is_discarded())
        << "read " << reads << " (" << text.size() << " bytes): " << error;
    ASSERT_GE(doc.size(), last);
    last = doc.size();
    ++reads;
  }
  loop.join();
  ASSERT_TRUE(w.Stop().ok());
  const json doc = ReadDoc(path);
  EXPECT_EQ(w.written() + w.dropped(), static_cast<uint64_t>(kSteps * kTensors * kLifecycleEvents));
  EXPECT_EQ(doc.size() - EntriesWithPhase(doc, "M").size(), w.written());
  EXPECT_EQ(Rows(doc).size(), static_cast<size_t>(kTensors));
  std::printf("%d snapshots parsed; %llu events written, %llu dropped\n", reads,
              static_cast<unsigned long long>(w.written()),
              static_cast<unsigned long long>(w.dropped()));
}

// The test holds the file's lock, so every commit of the writer thread blocks; the loop thread
// must still get through all its Consume calls, dropping and counting what does not fit.
TEST(ChromeTraceWriterTest, FullQueueDropsAndCountsButNeverBlocks) {
  const std::string path = TempPath("overflow");
  ChromeTraceWriterOptions opts;
  opts.queue_capacity = 64;
  opts.flush_events = 16;
  opts.flush_interval = std::chrono::milliseconds(1);
  ChromeTraceWriter w(opts);
  ASSERT_TRUE(w.Start(path).ok());
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);

  constexpr int kEvents = 100000;
  std::thread loop([&] {
    for (int i = 0; i < kEvents; ++i) w.Consume({i, Phase::kInstant, "t", "X", ""});
  });
  loop.join();  // returns although the writer cannot write a byte
  EXPECT_GE(w.dropped(), static_cast<uint64_t>(kEvents / 2));
  EXPECT_EQ(w.written(), 0u);

  flock(fd, LOCK_UN);
  close(fd);
  ASSERT_TRUE(w.Stop().ok());
  EXPECT_EQ(w.written() + w.dropped(), static_cast<uint64_t>(kEvents));
  const json doc = ReadDoc(path);
  EXPECT_EQ(EntriesWithPhase(doc, "i").size(), w.written());
}

}  // namespace
}  // namespace timeline
}  // namespace dadt
