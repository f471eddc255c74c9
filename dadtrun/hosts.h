// Host lists for dadtrun: the -H/--hosts flag ("a:4,b:4", Horovod's syntax) and --hostfile files
// ("host slots=N" or "host:N" lines), and the placement of ranks on them.
//
// The parsed list is a plain vector of {host, slots}, so every spawner (ssh, mpirun) consumes the
// same thing. Ranks are placed host by host: the first host's slots are filled first.
//
//   StatusOr<std::vector<HostSlots>> hosts = ParseHosts("localhost:2,127.0.0.1:2");
//   int slots = TotalSlots(*hosts);  // 4
//   std::vector<RankPlacement> p = PlaceRanks(*hosts, 3);  // ranks 0,1 on localhost, 2 on 127.0.0.1
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

// A hostfile's text: one host per line, "host slots=N" (Open MPI's form; max_slots=N too),
// "host:N" (MPICH's and Intel MPI's; the Kubernetes MPI Operator writes either, by the job's MPI)
// or "host" (1 slot); '#' starts a comment; blank lines are skipped. A bare IPv6 address is a
// host ("::1"); with a slot count it is bracketed, "[::1]:2". An error names `source`, the line
// number and what to write instead.
StatusOr<std::vector<HostSlots>> ParseHostfileText(const std::string& text, const std::string& source);
// Reads and parses the file at `path`.
StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path);

// Where one rank runs and its place in the job's geometry (Horovod's definitions): local_rank
// counts the ranks before it on its host; cross_rank counts the hosts before its own that also have
// a rank with this local_rank, and cross_size is how many hosts have one.
struct RankPlacement {
  int rank = 0;
  int host_index = 0;  // index into UsedHosts(hosts, num_proc)
  std::string host;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

// Places `num_proc` ranks host by host. Requires num_proc <= TotalSlots(hosts). Hosts given the same
// name twice are one host: their slots add up and their ranks share local ranks.
std::vector<RankPlacement> PlaceRanks(const std::vector<HostSlots>& hosts, int num_proc);

// The hosts that get at least one rank under PlaceRanks, in order, once each, with the number of
// ranks placed there as `slots`.
std::vector<HostSlots> UsedHosts(const std::vector<HostSlots>& hosts, int num_proc);

}  // namespace dadtrun
}  // namespace dadt
