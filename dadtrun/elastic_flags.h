// dadtrun's elastic flags (Horovod's names and defaults) and the settings they make.
//
// Elastic mode is on when any of --min-np, --max-np or --host-discovery-script is given
// (docs/elastic.md). Hosts then come from the discovery script, or from -H/--hostfile (a fixed
// list: fault tolerance without growth). Parsing is split from cli.cc so that file stays small;
// cli.cc registers these flags with AddElasticFlags and converts them with ConvertElasticFlags.
//
//   RawElasticFlags raw;
//   AddElasticFlags(&app, &raw);   // before app.parse
//   ... parse ...
//   Status s = ConvertElasticFlags(raw, &config);  // after -np, -H and --mpi/--gloo are known
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/env.h"
#include "runtime/common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dadt {
namespace dadtrun {

// How long one run of the discovery script may take before it is killed (and counts as failed).
inline constexpr int64_t kDiscoveryScriptTimeoutSeconds = 10;

struct ElasticConfig {
  bool enabled = false;
  int min_np = 0;          // --min-np; default -np
  int max_np = 0;          // --max-np; 0 = unbounded
  std::string discovery_script;  // --host-discovery-script; empty = the fixed -H/--hostfile list
  int slots_per_host = 1;  // --slots-per-host: slots of a script line without ":N"
  int64_t elastic_timeout_seconds = env::kDefaultElasticTimeoutSeconds;  // --elastic-timeout (Horovod's 600)
  int reset_limit = -1;    // --reset-limit; -1 = unlimited
  // --blacklist-cooldown-range MIN MAX (seconds); unset = a blacklisted host never comes back.
  std::optional<std::pair<int64_t, int64_t>> cooldown_range;
  // --elastic-checkpoint PATH, exported as DADT_ELASTIC_CHECKPOINT: rank 0 writes each commit there and
  // a world with no surviving worker resumes from it. Empty = none.
  std::string checkpoint_path;
};

// Values as typed; each converted with an error that names its flag.
struct RawElasticFlags {
  std::string min_np, max_np, discovery_script, slots_per_host, elastic_timeout, reset_limit, checkpoint;
  std::vector<std::string> cooldown_range;
};

void AddElasticFlags(CLI::App* app, RawElasticFlags* raw);

// Whether any flag that turns elastic mode on was given.
bool ElasticRequested(const RawElasticFlags& raw);

struct LaunchConfig;
// Fills config->elastic. Needs config->num_proc (0 when -np was not given: --min-np stands in),
// config->hosts_given and config->controller already set; checks the hosts against --min-np.
Status ConvertElasticFlags(const RawElasticFlags& raw, LaunchConfig* config);

}  // namespace dadtrun
}  // namespace dadt
