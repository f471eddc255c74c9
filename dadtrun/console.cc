#include "dadtrun/console.h"

#include <cerrno>
#include <mutex>
#include <unistd.h>

namespace dadt {
namespace dadtrun {
namespace console {
namespace {

// The one lock for dadtrun's terminal output: it is the terminal itself that is shared.
std::mutex& OutputLock() {
  static std::mutex mu;
  return mu;
}

}  // namespace

bool WriteAll(int fd, const std::string& data) {
  std::lock_guard<std::mutex> lock(OutputLock());
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void Message(const std::string& text) { WriteAll(STDERR_FILENO, "dadtrun: " + text + "\n"); }

}  // namespace console
}  // namespace dadtrun
}  // namespace dadt
