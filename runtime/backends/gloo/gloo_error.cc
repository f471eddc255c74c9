#include "runtime/backends/gloo/gloo_error.h"

#include <gloo/common/logging.h>

namespace dadt {
namespace backends {
namespace gloo {
namespace internal {

Status StatusFromCurrentException(const char* what, const char* file, int line) {
  const std::string where = std::string("gloo ") + what + " failed at " + file + ":" +
                            std::to_string(line) + ": ";
  try {
    throw;
  } catch (const StoreError& e) {
    return Status(e.status().code(), where + e.status().message());
  } catch (const ::gloo::IoException& e) {
    const std::string msg = e.what();
    // Gloo words its timeouts "Timed out waiting ..." (send/recv) and "Connect timeout".
    const bool timed_out = msg.find("Timed out") != std::string::npos ||
                           msg.find("timeout") != std::string::npos;
    if (timed_out) return TimeoutError(where + msg);
    return Aborted(where + msg + " (a peer has probably exited or lost its connection)");
  } catch (const ::gloo::InvalidOperationException& e) {
    return InternalError(where + e.what());
  } catch (const ::gloo::Exception& e) {
    return Aborted(where + e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    return InternalError(where + e.what());
  } catch (const std::exception& e) {
    return InternalError(where + e.what());
  } catch (...) {
    return InternalError(where + "unknown exception");
  }
}

}  // namespace internal
}  // namespace gloo
}  // namespace backends
}  // namespace dadt
