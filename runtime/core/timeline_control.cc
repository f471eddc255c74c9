#include "runtime/core/timeline_control.h"

namespace dadt {
namespace core {

Status TimelineControl::Start(const std::string& path) {
  if (path.empty()) return InvalidArgument("timeline: empty file path");
  std::lock_guard<std::mutex> lock(mu_);
  if (writer_) return PreconditionFailed("a timeline is already being written");
  auto writer = std::make_shared<timeline::ChromeTraceWriter>();
  DADT_RETURN_IF_ERROR(writer->Start(path));
  writer_ = writer;
  events_->AddSink(writer);
  return Status::OK();
}

Status TimelineControl::Stop() {
  std::shared_ptr<timeline::ChromeTraceWriter> writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writer.swap(writer_);
  }
  if (!writer) return Status::OK();
  events_->RemoveSink(writer.get());  // waits for an Emit in progress
  return writer->Stop();
}

}  // namespace core
}  // namespace dadt
