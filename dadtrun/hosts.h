// Host list parsing for dadtrun's -H/--hosts flag ("a:4,b:4", Horovod's syntax).
//
// Only this machine can be launched on for now (localhost, 127.0.0.1, ::1 or its own hostname);
// ssh launching comes later and will reuse ParseHosts unchanged.
//
//   StatusOr<std::vector<HostSlots>> hosts = ParseHosts("localhost:2,127.0.0.1:2");
//   int slots = TotalSlots(*hosts);  // 4
#pragma once

#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "host[:slots],..." -> entries in order. A missing slot count means 1. Empty entries, a slot
// count that is not a positive integer, or an empty host name are InvalidArgument naming the entry.
StatusOr<std::vector<HostSlots>> ParseHosts(const std::string& spec);

int TotalSlots(const std::vector<HostSlots>& hosts);

// This machine's hostname as gethostname() reports it.
std::string LocalHostname();

// True for localhost, 127.0.0.1, ::1, and `local_hostname` or its short form (case-insensitive).
bool IsLocalHost(const std::string& host, const std::string& local_hostname);

// InvalidArgument "host 'x' is not this machine; launching over ssh is not supported yet" for the
// first entry that is not this machine.
Status CheckAllLocal(const std::vector<HostSlots>& hosts, const std::string& local_hostname);

}  // namespace dadtrun
}  // namespace dadt
