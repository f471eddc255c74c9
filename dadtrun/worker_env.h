// The environment each rank starts with: the user's environment plus the launcher -> worker
// contract of DESIGN.md (DADT_* names, torchrun's names, tuning knobs from flags).
//
// Pure functions of their inputs, so tests check the exact variables without starting anything.
//
//   EnvMap env = WorkerEnvironment(config, endpoints, CurrentEnvironment(), /*rank=*/1);
//   std::vector<std::string> envp = ToEnvStrings(env);  // "NAME=value" for execvpe
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dadtrun/cli.h"
#include "dadtrun/rendezvous_server.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

using EnvMap = std::map<std::string, std::string>;

// torchrun's names beside RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT (runtime/common/env.h): the index of the rank's host among the job's hosts and their
// number (torchrun's node rank and node count), and the rank within the one role dadtrun runs.
inline constexpr char kTorchGroupRank[] = "GROUP_RANK";
inline constexpr char kTorchGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kTorchRoleRank[] = "ROLE_RANK";
inline constexpr char kTorchRoleWorldSize[] = "ROLE_WORLD_SIZE";
// The socket interface of the frameworks' own process groups (torch.distributed's Gloo, NCCL's
// bootstrap); --network-interface sets both unless the user did.
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
inline constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";
// Under `dadtrun --mpi`: the host index of every rank as dadtrun placed them ("0,0,1,1"), read by
// the relay that starts each rank (TorchEnvFromMpi).
inline constexpr char kMpiHostOfRank[] = "DADT_MPI_HOST_OF_RANK";

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
// ranks follow the host assignment), plus -x NAME=VALUE settings. torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK,
// ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are set as torchrun sets them, so a plain
// torch.distributed script runs unchanged. With --network-interface, GLOO_SOCKET_IFNAME and
// NCCL_SOCKET_IFNAME name it too, unless the user's environment (or -x) sets them.
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

// Under `dadtrun --mpi`, mpirun starts each rank through dadtrun's relay (line_relay.h), which
// calls this with its own environment before starting the rank: torchrun's per-rank variables
// from Open MPI's (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE), and GROUP_RANK /
// GROUP_WORLD_SIZE from kMpiHostOfRank when mpirun placed the rank where dadtrun planned (same
// local rank and local size; --mpi-args may map ranks otherwise, and then GROUP_* are left out
// rather than set wrong). Empty when OMPI_COMM_WORLD_RANK is not set (not under mpirun); an error
// naming the variable when Open MPI's values are not integers.
StatusOr<EnvMap> TorchEnvFromMpi(const EnvMap& env);

// The address this host uses for the job: loopback when every rank is here; else the address of
// --network-interface; else the one this host uses to reach the first of `remote_hosts`.
StatusOr<std::string> LaunchAddress(const LaunchConfig& config,
                                    const std::vector<std::string>& remote_hosts);

// torchrun's MASTER_ADDR for a launch from this host: `launch_addr` when rank 0 runs here, else
// rank 0's host as the host list names it.
std::string MasterAddress(const LaunchConfig& config, const std::string& local_hostname,
                          const std::string& launch_addr);

// 32 random bytes from /dev/urandom as 64 lowercase hex digits.
StatusOr<std::string> GenerateSecret();

// A TCP port that was free a moment ago on `addr` (bind to port 0, read it, close).
StatusOr<int> FindFreePort(const std::string& addr);

// Where one job's ranks meet: dadtrun's rendezvous server on `bind_addr` with a fresh secret, and
// the endpoints every rank is told. `torch_master`: also MASTER_ADDR (MasterAddress) and a free
// MASTER_PORT for torch.distributed scripts (not for elastic jobs, whose geometry changes).
struct JobRendezvous {
  std::unique_ptr<RendezvousServer> server;
  JobEndpoints endpoints;
};
StatusOr<JobRendezvous> StartJobRendezvous(const LaunchConfig& config, const std::string& local_hostname,
                                           const std::string& bind_addr, bool torch_master);

}  // namespace dadtrun
}  // namespace dadt
