// Converting Gloo's exceptions into dadt Status at the backend edge.
//
// Gloo reports every failure by throwing (gloo::IoException for a closed connection or a timed-out
// send/recv, gloo::EnforceNotMet for a failed internal check, gloo::InvalidOperationException for
// misuse). Nothing above the backend may see an exception, so every call into Gloo is wrapped in
// one of these macros, which keep the file:line of the call site and the collective's name, the
// way NCCL's NCCLCHECK leaves a trail of return codes:
//
//   DADT_GLOO_CHECK("broadcast", ::gloo::broadcast(opts));           // returns the Status on error
//   Status s = DADT_GLOO_STATUS("allreduce", ::gloo::allreduce(opts));  // just evaluates to it
//
// Mapping: a timed-out operation -> kTimeout; any other I/O failure (a peer died, a connection was
// reset) and other gloo::Exception -> kAborted; failed Gloo checks and anything else -> kInternal;
// a StoreError (thrown by the rendezvous adapter) -> the Status it carries.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include <gloo/common/error.h>

#include "runtime/common/status.h"

namespace dadt {
namespace backends {
namespace gloo {

// Thrown through Gloo by StoreAdapter so that a dadt Status from the KeyValueStore (a timeout
// naming the key, a refused secret) reaches the caller intact instead of as a generic error.
class StoreError : public ::gloo::Exception {
 public:
  explicit StoreError(Status status)
      : ::gloo::Exception(status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

namespace internal {

// Call only from inside a catch block: classifies the in-flight exception.
Status StatusFromCurrentException(const char* what, const char* file, int line);

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt

// Evaluates to OK, or to the Status for whatever the statements threw.
#define DADT_GLOO_STATUS(what, ...)                                                    \
  ([&]() -> ::dadt::Status {                                                           \
    try {                                                                              \
      __VA_ARGS__;                                                                     \
    } catch (...) {                                                                    \
      return ::dadt::backends::gloo::internal::StatusFromCurrentException((what), __FILE__, \
                                                                          __LINE__);   \
    }                                                                                  \
    return ::dadt::Status::OK();                                                       \
  }())

// Returns the converted Status from the enclosing function if the statements threw.
#define DADT_GLOO_CHECK(what, ...) DADT_RETURN_IF_ERROR(DADT_GLOO_STATUS(what, __VA_ARGS__))
