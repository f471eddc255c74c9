// dadtrun's command line: `dadtrun [flags] command [args...]` parsed into a LaunchConfig.
//
// Parsing is separate from main so tests can drive it with plain vectors. Every error is a single
// line telling the user what to fix (main prints it after "dadtrun: " and exits 2). Everything after
// the first positional argument is the command, passed through verbatim (its own flags included).
//
//   StatusOr<CommandLine> cl = ParseCommandLine({"-np", "2", "python", "train.py", "--lr", "0.1"});
//   if (cl.ok() && cl->action == CommandLine::Action::kRun) Launch(cl->config);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dadtrun/elastic_flags.h"
#include "dadtrun/hosts.h"
#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

inline constexpr const char kVersion[] = "0.1.0";

// What to launch. Optional tuning values are unset when the flag was not given: the rank then sees
// whatever the user's environment has for that variable.
struct LaunchConfig {
  int num_proc = 0;
  std::vector<HostSlots> hosts;  // from -H or --hostfile, or {localhost: num_proc}
  bool hosts_given = false;      // -H or --hostfile; else Slurm's allocation, when inside one
  std::vector<std::string> command;
  std::string controller = "auto";  // --gloo, --mpi; "auto": MPI when built and mpirun is found
  std::string mpi_args;             // --mpi-args, passed to mpirun as they are
  bool hierarchical_allreduce = false;  // --hierarchical-allreduce -> DADT_HIERARCHICAL_ALLREDUCE
  bool verbose = false;
  std::optional<int64_t> fusion_threshold_bytes;  // --fusion-threshold-mb
  std::optional<double> cycle_time_ms;            // --cycle-time-ms
  std::optional<int64_t> cache_capacity;          // --cache-capacity
  std::optional<int64_t> start_timeout_seconds;   // --start-timeout
  std::optional<std::string> log_level;           // --log-level
  std::optional<std::string> network_interface;   // --network-interface
  std::string output_dir;                         // --output-filename; empty = none
  std::optional<std::string> timeline_filename;   // --timeline-filename
  bool timeline_mark_cycles = false;              // --timeline-mark-cycles
  std::vector<std::pair<std::string, std::string>> autotune_env;  // --autotune*: DADT_AUTOTUNE*
  int ssh_port = 0;                                // -p/--ssh-port; 0 = ssh's default
  std::string ssh_identity_file;                   // -i/--ssh-identity-file
  // -x NAME[=VALUE], in order: a value sets NAME for every rank; no value forwards dadtrun's own.
  std::vector<std::pair<std::string, std::optional<std::string>>> forward_env;
  std::vector<std::pair<std::string, std::string>> stall_env;  // --*stall-check*: DADT_STALL_*
  std::vector<std::pair<std::string, std::string>> liveness_env;  // --liveness-*: DADT_LIVENESS_*
  ElasticConfig elastic;  // --min-np, --max-np, --host-discovery-script, ... (elastic_flags.h)
  // One line each that dadtrun prints before it launches (e.g. -H ignored beside a discovery script).
  std::vector<std::string> notices;
};

struct CommandLine {
  enum class Action { kRun, kHelp, kVersion, kCheckBuild };
  Action action = Action::kRun;
  LaunchConfig config;  // valid for kRun
  std::string text;     // what to print for kHelp / kVersion
};

// `args` excludes argv[0]. `local_hostname` decides which -H entries are this machine.
StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                       const std::string& local_hostname);

std::string UsageText();

}  // namespace dadtrun
}  // namespace dadt
