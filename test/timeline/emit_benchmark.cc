// Emit cost per event: with no sink (the runtime's enabled() check alone, and Emit called
// anyway), with a counting sink, and with the ChromeTraceWriter attached. Prints a table.
//
//   bazel run //test/timeline:emit_benchmark [-- EVENTS [RING_CAPACITY]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "timeline/chrome_trace_writer.h"
#include "timeline/event.h"

namespace dadt {
namespace timeline {
namespace {

class CountingSink : public EventSink {
 public:
  void Consume(const Event& e) override { count += e.ts_us & 1; }
  int64_t count = 0;
};

// ns per iteration of `body`, best of three runs of n iterations.
template <typename F>
double NsPerCall(int64_t n, F body) {
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) body(i);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
  return best;
}

int Main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 2000000;
  const std::string tensor = "model.layer4.2.conv3.weight";
  const std::string activity = BackendActivity("gloo", "allreduce");
  EventStream stream;
  Event e{0, Phase::kBegin, tensor, activity, ""};
  volatile int64_t hole = 0;
  const auto row = [](const char* what, double ns) { std::printf("%-50s %9.2f\n", what, ns); };

  std::printf("%-50s %9s\n", "case", "ns/event");
  // What the runtime pays when nobody listens: one relaxed load, and no Event is built.
  row("no sink: if (enabled()) Emit(...)", NsPerCall(n, [&](int64_t i) {
        if (stream.enabled()) {
          stream.Emit({i, Phase::kBegin, tensor, activity, ""});
        } else {
          hole = hole + 1;
        }
      }));
  row("no sink: Emit(prebuilt event), unguarded", NsPerCall(n, [&](int64_t i) {
        e.ts_us = i;
        stream.Emit(e);
      }));
  row("building an end event (name copy + TensorArgs)", NsPerCall(n / 10, [&](int64_t i) {
        Event end{i, Phase::kEnd, tensor, "ALLREDUCE", TensorArgs("float32", {256, 64, 1, 1})};
        hole = hole + static_cast<int64_t>(end.args.size());
      }));

  auto counting = std::make_shared<CountingSink>();
  stream.AddSink(counting);
  row("counting sink: Emit(prebuilt event)", NsPerCall(n, [&](int64_t i) {
        e.ts_us = i;
        stream.Emit(e);
      }));
  stream.RemoveSink(counting.get());

  ChromeTraceWriterOptions opts;
  if (argc > 2) opts.queue_capacity = std::atoll(argv[2]);
  auto writer = std::make_shared<ChromeTraceWriter>(opts);
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/dadt_emit_benchmark.json";
  if (!writer->Start(path).ok()) return 1;
  stream.AddSink(writer);
  // Bursts the writer keeps up with, so that this is the enqueue cost, not the drop path; the
  // first laps around the ring also pay for its slots' first string allocations.
  constexpr int64_t kBurst = 1024;
  double total_ns = 0;
  int64_t timed = 0;
  for (int64_t done = 0; done < n; done += kBurst, timed += kBurst) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < kBurst; ++i) {
      e.ts_us = done + i;
      stream.Emit(e);
    }
    const auto t1 = std::chrono::steady_clock::now();
    total_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
    while (writer->written() + writer->dropped() < static_cast<uint64_t>(done + kBurst)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  row("ChromeTraceWriter: Emit(prebuilt event)", total_ns / timed);
  stream.RemoveSink(writer.get());
  Status s = writer->Stop();
  std::printf("  writer: %llu written, %llu dropped (%s) -> %s\n",
              static_cast<unsigned long long>(writer->written()),
              static_cast<unsigned long long>(writer->dropped()),
              s.ok() ? "ok" : s.message().c_str(), path.c_str());

  // A writer far behind: the ring is full and every event takes the drop path.
  ChromeTraceWriterOptions tiny;
  tiny.queue_capacity = 2;
  tiny.flush_interval = std::chrono::milliseconds(100000);
  tiny.flush_events = size_t{1} << 40;
  auto full = std::make_shared<ChromeTraceWriter>(tiny);
  if (!full->Start(path + ".full").ok()) return 1;
  stream.AddSink(full);
  row("ChromeTraceWriter, ring full: Emit (dropped)", NsPerCall(n, [&](int64_t i) {
        e.ts_us = i;
        stream.Emit(e);
      }));
  stream.RemoveSink(full.get());
  (void)full->Stop();
  return 0;
}

}  // namespace
}  // namespace timeline
}  // namespace dadt

int main(int argc, char** argv) { return dadt::timeline::Main(argc, argv); }
