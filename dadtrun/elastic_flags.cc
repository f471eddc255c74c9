#include "dadtrun/elastic_flags.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>

#include "dadtrun/cli.h"

namespace dadt {
namespace dadtrun {
namespace {

bool ParseCount(const std::string& s, int64_t min, int64_t max, int64_t* out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

Status Bad(const std::string& flag, const std::string& expected, const std::string& got) {
  return InvalidArgument(flag + " expects " + expected + ", got '" + got + "'");
}

}  // namespace

void AddElasticFlags(CLI::App* app, RawElasticFlags* raw) {
  app->add_option("--min-np", raw->min_np);
  app->add_option("--max-np", raw->max_np);
  app->add_option("--host-discovery-script", raw->discovery_script);
  app->add_option("--slots-per-host", raw->slots_per_host);
  app->add_option("--elastic-timeout", raw->elastic_timeout);
  app->add_option("--reset-limit", raw->reset_limit);
  app->add_option("--blacklist-cooldown-range", raw->cooldown_range)->expected(2)->allow_extra_args(false);
  app->add_option("--elastic-checkpoint", raw->checkpoint);
}

bool ElasticRequested(const RawElasticFlags& raw) {
  return !raw.min_np.empty() || !raw.max_np.empty() || !raw.discovery_script.empty();
}

Status ConvertElasticFlags(const RawElasticFlags& raw, LaunchConfig* config) {
  ElasticConfig& e = config->elastic;
  e = ElasticConfig{};
  const bool tuning_given = !raw.slots_per_host.empty() || !raw.elastic_timeout.empty() ||
                            !raw.reset_limit.empty() || !raw.cooldown_range.empty() || !raw.checkpoint.empty();
  if (!ElasticRequested(raw)) {
    if (tuning_given) {
      return InvalidArgument(
          "--slots-per-host, --elastic-timeout, --reset-limit, --blacklist-cooldown-range and "
          "--elastic-checkpoint are elastic flags: add --min-np, --max-np or --host-discovery-script "
          "(docs/elastic.md)");
    }
    return Status::OK();
  }
  e.enabled = true;
  if (config->controller == "mpi") {
    return InvalidArgument("elastic training needs --gloo: MPI cannot change the size of its world");
  }
  if (!config->output_dir.empty()) {
    return InvalidArgument("--output-filename is not supported for elastic jobs yet (their workers come and go); "
                           "each worker's lines are prefixed with its id on dadtrun's output instead");
  }
  int64_t v = 0;
  e.min_np = config->num_proc;
  if (!raw.min_np.empty()) {
    if (!ParseCount(raw.min_np, 1, 1000000, &v)) return Bad("--min-np", "a positive integer", raw.min_np);
    e.min_np = static_cast<int>(v);
  }
  if (!raw.max_np.empty()) {
    if (!ParseCount(raw.max_np, 1, 1000000, &v)) return Bad("--max-np", "a positive integer", raw.max_np);
    e.max_np = static_cast<int>(v);
    if (e.max_np < e.min_np) {
      return InvalidArgument("--max-np " + raw.max_np + " is less than --min-np " + std::to_string(e.min_np) +
                             (raw.min_np.empty() ? " (from -np)" : ""));
    }
  }
  e.discovery_script = raw.discovery_script;
  if (!raw.slots_per_host.empty()) {
    if (!ParseCount(raw.slots_per_host, 1, 1000000, &v)) {
      return Bad("--slots-per-host", "a positive integer", raw.slots_per_host);
    }
    if (e.discovery_script.empty()) {
      return InvalidArgument("--slots-per-host applies to --host-discovery-script lines; with -H/--hostfile give "
                             "the slots there (host:N)");
    }
    e.slots_per_host = static_cast<int>(v);
  }
  if (!raw.elastic_timeout.empty()) {
    if (!ParseCount(raw.elastic_timeout, 1, 100000000, &v)) {
      return Bad("--elastic-timeout", "a whole number of seconds >= 1", raw.elastic_timeout);
    }
    e.elastic_timeout_seconds = v;
  } else if (env::IsSet(env::kElasticTimeout)) {
    // As horovodrun reads HOROVOD_ELASTIC_TIMEOUT (either name: runtime/common/env.h).
    const std::string value = env::GetString(env::kElasticTimeout);
    if (!ParseCount(value, 1, 100000000, &v)) {
      return Bad(env::Source(env::kElasticTimeout), "a whole number of seconds >= 1", value);
    }
    e.elastic_timeout_seconds = v;
  }
  if (!raw.reset_limit.empty()) {
    if (!ParseCount(raw.reset_limit, 0, 1000000000, &v)) {
      return Bad("--reset-limit", "an integer >= 0", raw.reset_limit);
    }
    e.reset_limit = static_cast<int>(v);
  }
  if (!raw.cooldown_range.empty()) {
    int64_t lo = 0, hi = 0;
    const std::string text = raw.cooldown_range.front() + " " + raw.cooldown_range.back();
    if (raw.cooldown_range.size() != 2 || !ParseCount(raw.cooldown_range[0], 1, 100000000, &lo) ||
        !ParseCount(raw.cooldown_range[1], 1, 100000000, &hi) || hi < lo) {
      return Bad("--blacklist-cooldown-range", "MIN MAX, whole seconds with 1 <= MIN <= MAX", text);
    }
    e.cooldown_range = std::make_pair(lo, hi);
  }
  if (!raw.checkpoint.empty()) {
    if (raw.checkpoint.back() == '/') {
      return Bad("--elastic-checkpoint", "a file path (on a filesystem every host sees)", raw.checkpoint);
    }
    e.checkpoint_path = raw.checkpoint;
  }
  if (!e.discovery_script.empty()) {
    if (config->hosts_given) {
      // horovodrun takes the pair (Horovod's elastic examples give both) and discovers with the
      // script alone; so does dadtrun, saying so.
      config->notices.push_back("-H/--hostfile ignored: --host-discovery-script names the hosts of an elastic "
                                "job (as with horovodrun)");
      config->hosts_given = false;
    }
    config->hosts.clear();  // they come from the script
    return Status::OK();
  }
  const int slots = TotalSlots(config->hosts);
  if (e.min_np > slots) {
    return InvalidArgument("--min-np " + std::to_string(e.min_np) + (raw.min_np.empty() ? " (from -np)" : "") +
                           " is more than the " + std::to_string(slots) + " slots of the fixed host list" +
                           (config->hosts_given ? "" : " (localhost:" + std::to_string(config->num_proc) + ")") +
                           "; lower it, add slots, or use --host-discovery-script");
  }
  return Status::OK();
}

}  // namespace dadtrun
}  // namespace dadt
