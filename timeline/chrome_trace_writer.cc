#include "timeline/chrome_trace_writer.h"

#include "runtime/common/logging.h"

namespace dadt {
namespace timeline {
namespace {

// Batches are committed in pieces of about this size, so a burst never builds a huge buffer.
constexpr size_t kMaxBatchBytes = 1 << 20;

}  // namespace

ChromeTraceWriter::ChromeTraceWriter(ChromeTraceWriterOptions options)
    : options_(options), ring_(options.queue_capacity) {}

ChromeTraceWriter::~ChromeTraceWriter() { (void)Stop(); }

Status ChromeTraceWriter::Start(const std::string& path) {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (thread_.joinable()) {
    return PreconditionFailed("the timeline writer is already running; Stop() it first");
  }
  Status s = file_.Create(path);
  if (!s.ok()) return InvalidArgument(s.message());
  // Leftovers of a previous run (an event that raced the last Stop) belong to no document.
  while (ring_.Front() != nullptr) ring_.Release();
  formatter_.Reset();
  error_ = Status::OK();
  written_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
  accepting_.store(true, std::memory_order_release);
  return Status::OK();
}

Status ChromeTraceWriter::Stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (!thread_.joinable()) return error_;
  accepting_.store(false, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  Status s = file_.Close();  // compacts: the finished file has no padding
  if (error_.ok()) error_ = s;
  return error_;
}

void ChromeTraceWriter::Consume(const Event& event) {
  if (!accepting_.load(std::memory_order_acquire)) return;
  Event* slot = ring_.TryReserve();
  if (slot == nullptr) {
    ring_full_.store(ring_full_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return;
  }
  // assign() reuses the slot strings' capacity: no allocation once the ring is warm.
  slot->ts_us = event.ts_us;
  slot->phase = event.phase;
  slot->tensor.assign(event.tensor);
  slot->activity.assign(event.activity);
  slot->args.assign(event.args);
  ring_.Publish();
  if (++since_wake_ >= options_.flush_events) {
    since_wake_ = 0;
    // No lock here: a wake-up lost to the race with wait_for costs at most one flush_interval.
    wake_.store(true, std::memory_order_relaxed);
    cv_.notify_one();
  }
}

void ChromeTraceWriter::Run() {
  while (true) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.flush_interval,
                   [this] { return stop_ || wake_.load(std::memory_order_relaxed); });
      stopping = stop_;
    }
    wake_.store(false, std::memory_order_relaxed);
    Drain();
    if (stopping) return;  // Stop cleared accepting_ first, so this drain saw the last event
  }
}

void ChromeTraceWriter::Drain() {
  uint64_t events = 0;
  while (Event* e = ring_.Front()) {
    if (error_.ok()) {
      formatter_.Append(*e, &batch_, &entry_ends_);
      ++events;
    } else {
      lost_.store(lost_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    ring_.Release();
    if (batch_.size() >= kMaxBatchBytes) {
      Commit();
      if (error_.ok()) written_.fetch_add(events, std::memory_order_relaxed);
      events = 0;
    }
  }
  Commit();
  if (error_.ok()) written_.fetch_add(events, std::memory_order_relaxed);
}

void ChromeTraceWriter::Commit() {
  if (batch_.empty()) return;
  Status s = file_.Append(batch_, entry_ends_);
  batch_.clear();
  entry_ends_.clear();
  if (!s.ok() && error_.ok()) {
    error_ = s;
    DADT_LOG(ERROR) << s.message() << "; the timeline stops here (the file stays valid up to its "
                    << "last complete write)";
  }
}

}  // namespace timeline
}  // namespace dadt
