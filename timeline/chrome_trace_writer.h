// ChromeTraceWriter: an EventSink that writes the event stream to a Chrome trace-event JSON file
// (open it in chrome://tracing or ui.perfetto.dev), one row per tensor, as Horovod's timeline.
//
//   auto writer = std::make_shared<ChromeTraceWriter>();
//   Status s = writer->Start("/tmp/timeline.json");      // a valid, empty document from here on
//   stream.AddSink(writer);
//   ... training ...
//   stream.RemoveSink(writer.get());
//   s = writer->Stop();                                   // drains, writes, joins
//
// Threading: Consume runs on one emitting thread at a time (EventStream serializes them) and only
// copies the event into a bounded single-producer/single-consumer ring: it never blocks, takes no
// lock of its own and, once the ring's slots are warm, never allocates. When the ring is full the
// event is dropped and counted (dropped()); the loop never waits for the disk. A writer thread
// drains the ring at least every flush_interval, or sooner once flush_events have been queued,
// formats the batch (internal/chrome_format.h) and commits it to the file. Start/Stop come from
// a control thread. A reader must hold flock(LOCK_SH) only briefly: a commit waits for it (the
// loop still does not).
//
// The file is valid JSON at every moment, also when the process is killed by SIGKILL mid-write:
// it is "[" + entries + padding + "]\n" while running, the closing bracket never moves, entries
// go into the padding with page-local pwrite()s, growth happens in a copy renamed over the path,
// and Stop() compacts it to "[" + entries + "\n]\n" (internal/array_file.h says why a single
// "overwrite the trailing ]" pwrite() is not enough: SIGKILL can cut it between pages). Readers
// that need a consistent snapshot of a live file take flock(LOCK_SH) on it; every commit holds
// flock(LOCK_EX). A trace loaded after the run needs nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/status.h"
#include "timeline/event.h"
#include "timeline/internal/array_file.h"
#include "timeline/internal/chrome_format.h"
#include "timeline/internal/spsc_ring.h"

namespace dadt {
namespace timeline {

struct ChromeTraceWriterOptions {
  size_t queue_capacity = 1 << 15;                // events; rounded up to a power of two
  // The longest an event waits for the file. Short because tools read the live file: Horovod's
  // timeline test reads it 0.1 s after an allreduce (Horovod's writer never sleeps). An idle
  // wake-up finds the ring empty and writes nothing.
  std::chrono::milliseconds flush_interval{20};
  size_t flush_events = 1024;                     // wake the writer once this many are queued
};

class ChromeTraceWriter final : public EventSink {
 public:
  explicit ChromeTraceWriter(ChromeTraceWriterOptions options = ChromeTraceWriterOptions());
  ~ChromeTraceWriter() override;  // Stop()
  ChromeTraceWriter(const ChromeTraceWriter&) = delete;
  ChromeTraceWriter& operator=(const ChromeTraceWriter&) = delete;

  // Creates (replaces) `path` with an empty document and starts the writer thread.
  // PreconditionFailed when already started; InvalidArgument naming the path when it cannot be
  // opened. A writer may be started again after Stop (a new document, new rows).
  Status Start(const std::string& path);
  // Stops accepting events, writes everything already queued, joins the writer thread and closes
  // the file. Returns the first I/O error of the run, if any. Idempotent.
  Status Stop();

  // The producer side (the emitting thread only). Ignored unless started.
  void Consume(const Event& event) override;

  bool running() const { return accepting_.load(std::memory_order_relaxed); }
  // Events refused because the ring was full (or the file failed), since construction.
  uint64_t dropped() const {
    return ring_full_.load(std::memory_order_relaxed) + lost_.load(std::memory_order_relaxed);
  }
  // Events committed to the file by this run (metadata entries not counted).
  uint64_t written() const { return written_.load(std::memory_order_relaxed); }

 private:
  void Run();
  // Drains the ring into batches and commits them.
  void Drain();
  void Commit();

  const ChromeTraceWriterOptions options_;
  internal::SpscRing<Event> ring_;
  std::atomic<bool> accepting_{false};
  std::atomic<uint64_t> ring_full_{0};  // written by the producer only: no read-modify-write
  std::atomic<uint64_t> lost_{0};       // written by the writer thread only, after an I/O error
  std::atomic<uint64_t> written_{0};
  std::atomic<bool> wake_{false};
  size_t since_wake_ = 0;  // producer only

  std::mutex lifecycle_mu_;  // serializes Start/Stop
  std::mutex mu_;            // guards stop_ for the condition variable
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;

  // Writer-thread state (set up by Start before the thread exists).
  internal::ChromeFormatter formatter_;
  internal::ArrayFile file_;
  std::string batch_;
  std::vector<size_t> entry_ends_;
  Status error_;
};

}  // namespace timeline
}  // namespace dadt
