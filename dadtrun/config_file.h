// dadtrun's --config-file: a YAML file whose entries stand for command-line flags. Flags given on
// the command line override the file's values. docs/running.md lists every section; an unknown key
// is an error naming it, so a typo never goes unnoticed.
//
//   num_proc: 4                       # -np
//   hosts: h1:2,h2:2                  # -H; or a list: [h1:2, h2:2] or [{host: h1, slots: 2}, ...]
//   hostfile: /path/hosts             # --hostfile
//   ssh: {port: 22, identity_file: ~/.ssh/id_ed25519}
//   network_interface: eth0
//   start_timeout: 60
//   output_filename: logs/
//   env: {NCCL_DEBUG: INFO, PYTHONPATH: null}   # -x NAME=VALUE; null forwards NAME as it is
//   tuning: {fusion_threshold_mb: 64, cycle_time_ms: 2, cache_capacity: 1024}
//   logging: {log_level: info, verbose: true}
//   timeline: {filename: tl.json, mark_cycles: true}
//   autotune: {enabled: true, log_file: at.csv, warmup_samples: 3, steps_per_sample: 10,
//              bayes_opt_max_samples: 20, gaussian_process_noise: 0.8}
//   elastic: {min_np: 2, max_np: 8, host_discovery_script: ./hosts.sh, slots_per_host: 1, timeout: 600,
//             reset_limit: 5, blacklist_cooldown_range: [10, 300], checkpoint: /shared/job.ckpt}
//
//   StatusOr<std::vector<ConfigFlag>> flags = LoadConfigFile("dadt.yaml");
//   // -> {"--num-proc", "4"}, {"--hosts", "h1:2,h2:2"}, {"-x", "NCCL_DEBUG=INFO"}, ...
#pragma once

#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {
namespace dadtrun {

struct ConfigFlag {
  std::string flag;   // the long flag, e.g. "--num-proc", or "-x"
  std::string value;  // "true" for a boolean flag that is set; "A B" for a two-value flag
};

// Boolean entries that are false produce nothing. Errors name the file and the offending key.
StatusOr<std::vector<ConfigFlag>> ParseConfigText(const std::string& text, const std::string& source);
StatusOr<std::vector<ConfigFlag>> LoadConfigFile(const std::string& path);

}  // namespace dadtrun
}  // namespace dadt
