#include "test/timeline/trace_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace dadt {
namespace timeline {
namespace testing {

std::string TempPath(const std::string& stem) {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/" + stem + "." + std::to_string(getpid()) +
         "." + std::to_string(counter++) + ".json";
}

std::string ReadTrace(const std::string& path, bool lock) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  if (lock) flock(fd, LOCK_SH);
  std::string out;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  if (lock) flock(fd, LOCK_UN);
  close(fd);
  return out;
}

nlohmann::json ParseTrace(const std::string& text, std::string* error) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    *error = e.what();
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

nlohmann::json EntriesWithPhase(const nlohmann::json& doc, const std::string& ph) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : doc) {
    if (e.value("ph", "") == ph) out.push_back(e);
  }
  return out;
}

}  // namespace testing
}  // namespace timeline
}  // namespace dadt
