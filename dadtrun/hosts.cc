#include "dadtrun/hosts.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <strings.h>
#include <unistd.h>

namespace dadt {
namespace dadtrun {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

bool ParsePositiveInt(const std::string& s, int* out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

StatusOr<std::vector<HostSlots>> ParseHosts(const std::string& spec) {
  if (spec.empty()) return InvalidArgument("-H/--hosts is empty; use host:slots[,host:slots...]");
  std::vector<HostSlots> hosts;
  for (const std::string& entry : Split(spec, ',')) {
    if (entry.empty()) {
      return InvalidArgument("-H/--hosts '" + spec + "' has an empty entry; use host:slots[,...]");
    }
    HostSlots h;
    // The last ':' separates the slot count, so a bare IPv6 address needs brackets: [::1]:2.
    size_t colon = entry.rfind(':');
    bool bracketed = !entry.empty() && entry[0] == '[';
    if (bracketed) {
      size_t close = entry.find(']');
      if (close == std::string::npos) {
        return InvalidArgument("host entry '" + entry + "' has an unclosed '['");
      }
      h.host = entry.substr(1, close - 1);
      if (close + 1 < entry.size()) {
        if (entry[close + 1] != ':' || !ParsePositiveInt(entry.substr(close + 2), &h.slots)) {
          return InvalidArgument("host entry '" + entry + "': the slot count must be a positive integer");
        }
      }
    } else if (colon == std::string::npos) {
      h.host = entry;
    } else {
      h.host = entry.substr(0, colon);
      if (!ParsePositiveInt(entry.substr(colon + 1), &h.slots)) {
        return InvalidArgument("host entry '" + entry + "': the slot count must be a positive integer");
      }
    }
    if (h.host.empty()) return InvalidArgument("host entry '" + entry + "' has no host name");
    hosts.push_back(h);
  }
  return hosts;
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  long total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  return total > INT_MAX ? INT_MAX : static_cast<int>(total);
}

std::string LocalHostname() {
  char buf[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

bool IsLocalHost(const std::string& host, const std::string& local_hostname) {
  for (const char* name : {"localhost", "127.0.0.1", "::1"}) {
    if (strcasecmp(host.c_str(), name) == 0) return true;
  }
  if (local_hostname.empty()) return false;
  if (strcasecmp(host.c_str(), local_hostname.c_str()) == 0) return true;
  const std::string short_name = local_hostname.substr(0, local_hostname.find('.'));
  return strcasecmp(host.c_str(), short_name.c_str()) == 0;
}

Status CheckAllLocal(const std::vector<HostSlots>& hosts, const std::string& local_hostname) {
  for (const HostSlots& h : hosts) {
    if (!IsLocalHost(h.host, local_hostname)) {
      return InvalidArgument("host '" + h.host +
                             "' is not this machine; launching over ssh is not supported yet");
    }
  }
  return Status::OK();
}

}  // namespace dadtrun
}  // namespace dadt
