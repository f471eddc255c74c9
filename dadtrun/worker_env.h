// The environment each rank starts with: the user's environment plus the launcher -> worker
// contract of DESIGN.md (DADT_* names, torchrun's names, tuning knobs from flags).
//
// Pure functions of their inputs, so tests check the exact variables without starting anything.
//
//   EnvMap env = WorkerEnvironment(config, endpoints, CurrentEnvironment(), /*rank=*/1);
//   std::vector<std::string> envp = ToEnvStrings(env);  // "NAME=value" for execvpe
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dadtrun/cli.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

using EnvMap = std::map<std::string, std::string>;

// Where the ranks of one job meet; the same for every rank.
struct JobEndpoints {
  std::string hostname;         // DADT_HOSTNAME
  std::string rendezvous_addr;  // dadtrun's key-value server
  int rendezvous_port = 0;
  std::string secret;           // DADT_SECRET; only ever passed through the environment
  std::string master_addr;      // torchrun's MASTER_ADDR / MASTER_PORT
  int master_port = 0;
};

EnvMap CurrentEnvironment();

// `user_env` plus the contract for `rank`, placed on config.hosts by PlaceRanks (local and cross
// ranks follow the host assignment), plus -x NAME=VALUE settings.
// Optional tuning flags that were not given leave `user_env`'s value untouched. OMP_NUM_THREADS=1 is
// added when several ranks share the host and the user has not set it; PYTHONUNBUFFERED=1 unless set.
//
// glibc malloc, unless UserTunesMalloc: MALLOC_MMAP_THRESHOLD_=32 MiB and MALLOC_TRIM_THRESHOLD_=1
// GiB. A training step frees its gradients and activations and allocates the same sizes again.
// With glibc's defaults, whether that memory goes back to the kernel each step depends on the
// heap's layout: when it does (the top of the heap trimmed, or a block above the dynamic mmap
// threshold unmapped), every page is faulted in again on the next step. A 10.5M-parameter MLP
// under mode="dear" took 10,000 page faults (40 MB) and about 15% more time per step that way;
// these values keep up to 1 GiB of freed memory for reuse, like the caching allocators of GPU
// frameworks, and the faults disappear (docs/performance.md).
EnvMap WorkerEnvironment(const LaunchConfig& config, const JobEndpoints& endpoints,
                         const EnvMap& user_env, int rank);

// Whether `env` already sets glibc malloc's thresholds (MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, or glibc.malloc.* in GLIBC_TUNABLES): then dadtrun adds none.
bool UserTunesMalloc(const EnvMap& env);

std::vector<std::string> ToEnvStrings(const EnvMap& env);

// 32 random bytes from /dev/urandom as 64 lowercase hex digits.
StatusOr<std::string> GenerateSecret();

// A TCP port that was free a moment ago on `addr` (bind to port 0, read it, close).
StatusOr<int> FindFreePort(const std::string& addr);

}  // namespace dadtrun
}  // namespace dadt
