#include "runtime/common/status.h"

namespace dadt {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kMismatch: return "MISMATCH";
    case StatusCode::kPreconditionFailed: return "PRECONDITION_FAILED";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kTimeout: return "TIMEOUT";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kRemoved: return "REMOVED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace dadt
