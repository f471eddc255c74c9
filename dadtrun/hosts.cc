#include "dadtrun/hosts.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
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

StatusOr<std::vector<HostSlots>> ParseHostfileText(const std::string& text,
                                                   const std::string& source) {
  std::vector<HostSlots> hosts;
  int line_no = 0;
  for (std::string line : Split(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::vector<std::string> words;
    std::istringstream tokens(line);
    for (std::string word; tokens >> word;) words.push_back(word);
    if (words.empty()) continue;
    const std::string where = source + " line " + std::to_string(line_no);
    HostSlots h;
    h.host = words[0];
    if (h.host.find('=') != std::string::npos || h.host.find(',') != std::string::npos) {
      return InvalidArgument(where + ": expected 'HOST slots=N' or 'HOST:N', got '" + line + "'");
    }
    if (words.size() > 2) {
      return InvalidArgument(where + ": expected 'HOST slots=N' or 'HOST:N', got '" + line + "'");
    }
    // MPICH's and Intel MPI's form "HOST:N" (the MPI Operator writes it for them). One ':' only,
    // so that a bare IPv6 address (several) stays a host; "[ADDR]:N" as in -H.
    const size_t close = h.host[0] == '[' ? h.host.find(']') : std::string::npos;
    const bool bracketed = close != std::string::npos;
    const size_t colon = bracketed ? (close + 1 < h.host.size() && h.host[close + 1] == ':'
                                          ? close + 1
                                          : std::string::npos)
                                   : h.host.rfind(':');
    if (colon != std::string::npos && (bracketed || h.host.find(':') == colon)) {
      const std::string host_part = h.host.substr(0, colon);
      const std::string count = h.host.substr(colon + 1);
      if (words.size() == 2) {
        return InvalidArgument(where + ": give the slots once, 'HOST slots=N' or 'HOST:N', got '" +
                               line + "'");
      }
      if (!ParsePositiveInt(count, &h.slots)) {
        return InvalidArgument(where + ": the slot count in '" + words[0] +
                               "' must be a positive integer, e.g. " + host_part + ":4");
      }
      h.host = bracketed ? host_part.substr(1, host_part.size() - 2) : host_part;
      if (h.host.empty()) return InvalidArgument(where + ": '" + words[0] + "' has no host name");
    } else if (bracketed) {
      h.host = h.host.substr(1, close - 1);
    }
    if (words.size() == 2) {
      const std::string& kv = words[1];
      if (kv.rfind("slots=", 0) != 0 && kv.rfind("max_slots=", 0) != 0) {
        return InvalidArgument(where + ": expected 'HOST slots=N' or 'HOST:N', got '" + line + "'");
      }
      if (!ParsePositiveInt(kv.substr(kv.find('=') + 1), &h.slots)) {
        return InvalidArgument(where + ": the slot count in '" + kv +
                               "' must be a positive integer, e.g. slots=4");
      }
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) {
    return InvalidArgument(source + " lists no hosts; write one 'HOST slots=N' (or 'HOST:N') line "
                           "per host");
  }
  return hosts;
}

StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return InvalidArgument("cannot read hostfile '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseHostfileText(text.str(), "hostfile '" + path + "'");
}

std::vector<HostSlots> UsedHosts(const std::vector<HostSlots>& hosts, int num_proc) {
  std::vector<HostSlots> used;
  int left = num_proc;
  for (const HostSlots& h : hosts) {
    if (left <= 0) break;
    const int n = std::min(left, h.slots);
    left -= n;
    auto same = std::find_if(used.begin(), used.end(),
                             [&h](const HostSlots& u) { return u.host == h.host; });
    if (same != used.end()) {
      same->slots += n;
    } else {
      used.push_back({h.host, n});
    }
  }
  return used;
}

std::vector<RankPlacement> PlaceRanks(const std::vector<HostSlots>& hosts, int num_proc) {
  const std::vector<HostSlots> used = UsedHosts(hosts, num_proc);
  std::vector<RankPlacement> placements;
  int rank = 0;
  for (size_t i = 0; i < used.size(); ++i) {
    for (int local = 0; local < used[i].slots; ++local) {
      RankPlacement p;
      p.rank = rank++;
      p.host_index = static_cast<int>(i);
      p.host = used[i].host;
      p.local_rank = local;
      p.local_size = used[i].slots;
      p.cross_rank = 0;
      p.cross_size = 0;
      for (size_t j = 0; j < used.size(); ++j) {
        if (used[j].slots > local) {
          if (j < i) ++p.cross_rank;
          ++p.cross_size;
        }
      }
      placements.push_back(p);
    }
  }
  return placements;
}

}  // namespace dadtrun
}  // namespace dadt
