#include "runtime/common/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dadt {
namespace env {

namespace {

bool HasValue(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

}  // namespace

const char* HorovodAliasOf(const char* name) {
  for (const HorovodAlias& a : kHorovodAliases) {
    if (std::strcmp(a.dadt, name) == 0) return a.horovod;
  }
  return nullptr;
}

const char* Source(const char* name) {
  if (HasValue(name)) return name;
  const char* alias = HorovodAliasOf(name);
  return alias && HasValue(alias) ? alias : name;
}

std::string LookupIn(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  if (it != env.end() && !it->second.empty()) return it->second;
  const char* alias = HorovodAliasOf(name);
  if (!alias) return "";
  it = env.find(alias);
  return it != env.end() ? it->second : "";
}

std::vector<std::string> HorovodAliasNotices() {
  std::vector<std::string> lines;
  for (const HorovodAlias& a : kHorovodAliases) {
    if (!HasValue(a.horovod)) continue;
    const std::string theirs = std::string(a.horovod) + "=" + std::getenv(a.horovod);
    if (!HasValue(a.dadt)) {
      lines.push_back(theirs + " taken as " + a.dadt);
    } else if (std::strcmp(std::getenv(a.dadt), std::getenv(a.horovod)) != 0) {
      lines.push_back(theirs + " ignored: " + a.dadt + "=" + std::getenv(a.dadt) + " is set");
    }
  }
  return lines;
}

std::string GetString(const char* name, const std::string& fallback) {
  const char* v = std::getenv(Source(name));
  return (v && *v) ? std::string(v) : fallback;
}

bool IsSet(const char* name) { return HasValue(Source(name)); }

MpiLauncher DetectMpiLauncher() {
  if (IsSet(kOmpiWorldSize)) return MpiLauncher::kOpenMpi;
  if (IsSet(kPmiSize) && IsSet(kHydraLocalSize)) return MpiLauncher::kHydra;
  return MpiLauncher::kNone;
}

StatusOr<int64_t> GetInt(const char* name, int64_t fallback) {
  name = Source(name);  // errors name the variable that was read
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0') {
    return InvalidArgument(std::string(name) + "='" + v + "' is not an integer");
  }
  return static_cast<int64_t>(r);
}

StatusOr<double> GetDouble(const char* name, double fallback) {
  name = Source(name);
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  double r = std::strtod(v, &end);
  if (errno != 0 || *end != '\0') {
    return InvalidArgument(std::string(name) + "='" + v + "' is not a number");
  }
  return r;
}

StatusOr<bool> GetBool(const char* name, bool fallback) {
  name = Source(name);
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
    return true;
  if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
    return false;
  return InvalidArgument(std::string(name) + "='" + v + "' is not a boolean (use 1 or 0)");
}

StatusOr<int64_t> GetFusionThreshold(int64_t fallback) {
  const std::string value = GetString(kFusionThreshold);
  if (value.empty()) return fallback;
  StatusOr<int64_t> bytes = GetInt(kFusionThreshold, fallback);
  if (!bytes.ok() || *bytes < 0) {
    return InvalidArgument(std::string(Source(kFusionThreshold)) + "='" + value +
                           "' is not a number of bytes: it takes an integer >= 0, such as " +
                           "1048576 (dadtrun --fusion-threshold-mb takes megabytes)");
  }
  return bytes;
}

std::string FindOnPath(const std::string& name) {
  const std::string path = GetString("PATH");
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) {
      const std::string candidate = path.substr(start, end - start) + "/" + name;
      struct stat st;
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          ::access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
    }
    start = end + 1;
  }
  return "";
}

}  // namespace env
}  // namespace dadt
