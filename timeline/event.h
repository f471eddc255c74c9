// Event and EventStream: the one stream of timing events the runtime emits. The timeline writer
// (chrome_trace_writer.h) and the autotuner both consume it; neither is known to the emitter.
//
//   EventStream stream;                                   // owned by the Runtime
//   auto writer = std::make_shared<ChromeTraceWriter>();  // chrome_trace_writer.h
//   if (writer->Start("timeline.json").ok()) stream.AddSink(writer);
//   if (stream.enabled()) {                               // one relaxed load when nobody listens
//     stream.Emit({NowMicros(), Phase::kBegin, TensorRow("allreduce", name),
//                  NegotiateActivity("allreduce"), {}});
//   }
//
// Who emits what. Everything is emitted by the loop thread (phase 3 by the lane that runs the
// response, when lanes run it: runtime/core/lanes.h), per tensor row, in this order
// (row and activity names follow Horovod's, so existing Horovod timeline habits and tools carry
// over; the row, Event::tensor, is TensorRow(op, name): "allreduce.grad.w" for tensor "grad.w"):
//  1. QUEUE B/E: the wait in the TensorQueue. B carries the moment Runtime::Enqueue accepted the
//     entry (taken on the framework thread and stored in the entry), E the moment the loop thread
//     drained it. Both are emitted at drain time; ts_us is what places them, not emission order.
//     (Horovod's QUEUE is the wait for a GPU stream; dadt's CPU path has none, so the name is
//     used for the wait that dadt does have.)
//  2. NEGOTIATE_<OP> B at drain, when the request leaves for the coordinator (or, on rank 0, is
//     added to it). On rank 0 only, an instant per rank when that rank's request reaches the
//     Coordinator: activity = RankReadyActivity(rank), the rank as text (Horovod's mark), args
//     ReadyRankArgs(rank) = {"ready_rank":1}. NEGOTIATE_<OP> E when the response naming the
//     tensor arrives (Runtime::HandleResponses, before Executor::Execute).
//  3. <OP> B (ALLREDUCE, ALLGATHER, BROADCAST, ...) when the Executor starts the response. Nested
//     inside it: MEMCPY_IN_FUSION_BUFFER B/E (fused responses only), the collective named by the
//     backend, BackendActivity("gloo", "allreduce") = GLOO_ALLREDUCE B/E, then
//     MEMCPY_OUT_FUSION_BUFFER B/E. <OP> E when the handle completes, with args
//     TensorArgs("float32", {2, 3}) = {"dtype":"float32","shape":[2,3]}.
//  4. CYCLE_START instants with an empty tensor name (a global mark), once per loop iteration
//     that did work, only when asked for (Horovod's mark-cycles option).
// A fused response emits its bars once per tensor in it, so every tensor row is complete; a rank
// that joined() has no entry for a tensor and emits nothing for it. Every B gets its E, also on
// error paths, so that viewers never see a bar left open.
// ts_us is NowMicros(): steady-clock microseconds, comparable within one host.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dadt {
namespace timeline {

enum class Phase { kBegin, kEnd, kInstant };

struct Event {
  int64_t ts_us = 0;
  Phase phase = Phase::kInstant;
  std::string tensor;    // the row (TensorRow); empty for process-wide marks such as CYCLE_START
  std::string activity;  // QUEUE, NEGOTIATE_ALLREDUCE, GLOO_ALLREDUCE, ...
  std::string args;      // empty, or one JSON object as text (use the *Args helpers below)
};

inline constexpr char kQueue[] = "QUEUE";
inline constexpr char kMemcpyInFusionBuffer[] = "MEMCPY_IN_FUSION_BUFFER";
inline constexpr char kMemcpyOutFusionBuffer[] = "MEMCPY_OUT_FUSION_BUFFER";
inline constexpr char kCycleStart[] = "CYCLE_START";

// Steady-clock microseconds: the clock every emitter uses for Event::ts_us.
int64_t NowMicros();
// "allreduce" -> "ALLREDUCE" (the top-level bar of step 3).
std::string OpActivity(std::string_view op);
// "allreduce" -> "NEGOTIATE_ALLREDUCE".
std::string NegotiateActivity(std::string_view op);
// ("gloo", "allreduce") -> "GLOO_ALLREDUCE"; broadcast is BCAST, as Horovod writes it
// ("gloo", "broadcast") -> "GLOO_BCAST" (Horovod's GLOO_BCAST, MPI_BCAST, NCCL_BCAST).
std::string BackendActivity(std::string_view backend, std::string_view op);
// The row (Event::tensor) of tensor `name` of collective `op`: Horovod's name for it,
// "<op>.<name>" ("allreduce", "test_allreduce") -> "allreduce.test_allreduce", as Horovod's
// PyTorch front end names every tensor it enqueues, so tools that look for Horovod's rows find
// them. A name that already starts with "<op>." or "grouped_<op>." is kept as it is: dadt's
// generated names ("allreduce.noname.3", "grouped_allreduce.noname.1.0") and Horovod's own
// ("allreduce.noname.3") carry the op already.
std::string TensorRow(std::string_view op, std::string_view name);
// The activity of rank `rank`'s readiness instant: the rank as text ("1"), Horovod's name.
std::string RankReadyActivity(int rank);
// {"dtype":"float32","shape":[2,3]}: the args of the end of step 3.
std::string TensorArgs(std::string_view dtype, const std::vector<int64_t>& shape);
// {"ready_rank":1}: the args of a rank-ready instant.
std::string ReadyRankArgs(int rank);

// EventSink: one consumer of the stream. Consume runs synchronously inside EventStream::Emit, on
// the emitting thread, so it must be quick and never block: a sink with real work (file I/O,
// optimization) hands the event to its own thread. Emits are serialized, so a sink is never
// called concurrently. A sink must not add or remove sinks from inside Consume.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void Consume(const Event& event) = 0;
};

// EventStream: fans events out to the sinks attached at the moment of Emit.
//
// Threading: Emit may run on any thread (the runtime emits from its loop thread and its lanes);
// concurrent Emits are serialized by a mutex of their own, so a sink such as ChromeTraceWriter
// sees one producer at a time. AddSink and RemoveSink may be called from any other thread at any
// time: the sink list is copy-on-write (a shared_ptr swapped under a mutex and read with
// std::atomic_load), so Emit never waits for them. When the list
// is empty, enabled() is false and the runtime skips building events altogether.
// Lifetime: the stream shares ownership of its sinks. Once RemoveSink returns, the sink receives
// no further events (RemoveSink waits for Emit calls that already hold it), so the caller may
// stop or destroy it; calling RemoveSink from inside Consume would therefore deadlock.
class EventStream {
 public:
  EventStream() = default;
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // One relaxed load: false when no sink is attached. Emitters test it before building an Event.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Attaches `sink` (ignored when null or already attached).
  void AddSink(std::shared_ptr<EventSink> sink);
  // Detaches `sink`; returns false when it was not attached.
  bool RemoveSink(const EventSink* sink);
  size_t sink_count() const;

  // Calls Consume on every attached sink, in the order they were added.
  void Emit(const Event& event) const;

 private:
  using SinkList = std::vector<std::shared_ptr<EventSink>>;

  // Installs `next` (null when empty) as the current list; the caller holds mu_.
  void Replace(std::shared_ptr<const SinkList> next);

  mutable std::mutex mu_;                  // serializes AddSink/RemoveSink (never taken by Emit)
  mutable std::mutex emit_mu_;             // serializes Emit calls (the sinks' one producer)
  std::shared_ptr<const SinkList> sinks_;  // replaced, never mutated; null when empty
  // Lists replaced while an Emit may still be iterating them (guarded by mu_).
  std::vector<std::weak_ptr<const SinkList>> retired_;
  std::atomic<bool> enabled_{false};
};

}  // namespace timeline
}  // namespace dadt
