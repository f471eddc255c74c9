// TimelineControl: starts and stops the Chrome-trace writer (docs/timeline.md) that listens on
// the runtime's event stream, from any thread; the loop thread and the lanes only emit.
//
//   TimelineControl timeline(&events);
//   DADT_RETURN_IF_ERROR(timeline.Start("/tmp/trace.json"));   // one writer at a time
//   ...
//   DADT_RETURN_IF_ERROR(timeline.Stop());                     // flushes; OK when none runs
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "runtime/common/status.h"
#include "timeline/chrome_trace_writer.h"
#include "timeline/event.h"

namespace dadt {
namespace core {

class TimelineControl {
 public:
  // `events` outlives this object.
  explicit TimelineControl(timeline::EventStream* events) : events_(events) {}

  // Writes every event from now on to `path`. Refused for an empty path or while writing.
  Status Start(const std::string& path);
  // Detaches the writer (waiting for an Emit in progress) and finishes the file.
  Status Stop();

 private:
  timeline::EventStream* events_;
  std::mutex mu_;  // guards writer_
  std::shared_ptr<timeline::ChromeTraceWriter> writer_;
};

}  // namespace core
}  // namespace dadt
