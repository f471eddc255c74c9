// What the C API's files share (runtime/c_api.cc and its siblings; not a public header): the
// process's one runtime handle and each thread's last error. c_api.cc holds both.
#pragma once

#include <memory>

#include "runtime/common/status.h"
#include "runtime/core/runtime.h"

namespace dadt {
namespace capi {

// The process's runtime, null before the first init. After shutdown the object stays (stopped) so
// that waits on its handles still answer ABORTED; the next init replaces it. A shared reference,
// so a concurrent shutdown never frees it under the caller.
std::shared_ptr<core::Runtime> Get();

// The runtime between init and shutdown, else null.
std::shared_ptr<core::Runtime> GetRunning();

// Records `s` as this thread's last error (dadt_last_error, dadt_last_error_code); returns its code.
int Fail(const Status& s);

// The error of a call that needs a running runtime.
Status NotInitialized();

}  // namespace capi
}  // namespace dadt
