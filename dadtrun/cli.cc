#include "dadtrun/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "dadtrun/config_file.h"
#include "dadtrun/elastic_flags.h"
#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {
namespace {

// Raw flag values as typed; converted and checked by hand so every error names the flag.
struct RawFlags {
  std::string num_proc, hosts, fusion_mb, cycle_ms, cache_capacity, start_timeout, log_level;
  std::string output_dir, iface, timeline;
  std::string autotune_log, autotune_warmup, autotune_steps, autotune_samples, autotune_noise;
  bool gloo = false, verbose = false, help = false, version = false, mark_cycles = false;
  bool autotune = false;
  std::string hostfile, ssh_port, ssh_identity, config_file;  // multi-host launching
  std::vector<std::string> env_x;                             // -x, in order
  std::string stall_warning_s, stall_shutdown_s;  // --stall-check-{warning,shutdown}-time-seconds
  bool no_stall_check = false;
  std::string liveness_s, liveness_shutdown_s;  // --liveness-{timeout,shutdown-time}-seconds
  bool mpi = false, check_build = false, hierarchical = false;
  std::string mpi_args;
  RawElasticFlags elastic;  // --min-np, --max-np, --host-discovery-script, ... (elastic_flags.h)
};

bool ParseInt64(const std::string& s, int64_t* out) {
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-')) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

Status BadValue(const std::string& flag, const std::string& expected, const std::string& got) {
  return InvalidArgument(flag + " expects " + expected + ", got '" + got + "'");
}

// Rewrites "-np" (which CLI11 would read as "-n p") to "--num-proc", only among dadtrun's own flags:
// scanning stops at the first positional argument, where the user's command begins.
// -H/--hosts, --hostfile, -p, -i and -x: where the ranks run and what they get from dadtrun.
Status ConvertHosts(const RawFlags& raw, const std::string& local_hostname, LaunchConfig* c) {
  (void)local_hostname;  // local entries are recognised at launch (IsLocalHost)
  if (!raw.hosts.empty() && !raw.hostfile.empty()) {
    return InvalidArgument("-H/--hosts and --hostfile both given; use one of them");
  }
  std::string source;
  c->hosts_given = !raw.hostfile.empty() || !raw.hosts.empty();
  if (!raw.hostfile.empty()) {
    StatusOr<std::vector<HostSlots>> hosts = ReadHostfile(raw.hostfile);
    if (!hosts.ok()) return hosts.status();
    c->hosts = *hosts;
    source = "--hostfile '" + raw.hostfile + "'";
  } else if (!raw.hosts.empty()) {
    StatusOr<std::vector<HostSlots>> hosts = ParseHosts(raw.hosts);
    if (!hosts.ok()) return hosts.status();
    c->hosts = *hosts;
    source = "-H/--hosts '" + raw.hosts + "'";
  } else {
    c->hosts = {HostSlots{"localhost", c->num_proc}};
  }
  const int slots = TotalSlots(c->hosts);
  // Elastic jobs run on whatever slots there are (ConvertElasticFlags checks --min-np instead).
  if (!ElasticRequested(raw.elastic) && c->num_proc > slots) {
    return InvalidArgument("-np " + std::to_string(c->num_proc) + " is more than the " +
                           std::to_string(slots) + " slots given by " + source +
                           "; lower -np or add slots");
  }
  if (!raw.ssh_port.empty()) {
    int64_t port = 0;
    if (!ParseInt64(raw.ssh_port, &port) || port < 1 || port > 65535) {
      return BadValue("-p/--ssh-port", "a TCP port number 1-65535", raw.ssh_port);
    }
    c->ssh_port = static_cast<int>(port);
  }
  c->ssh_identity_file = raw.ssh_identity;
  for (const std::string& x : raw.env_x) {
    const size_t eq = x.find('=');
    const std::string name = x.substr(0, eq);
    const bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(), [](unsigned char ch) {
                         return std::isalnum(ch) || ch == '_';
                       });
    if (!valid) return BadValue("-x", "NAME or NAME=VALUE with NAME a variable name", x);
    if (eq == std::string::npos) {
      c->forward_env.emplace_back(name, std::nullopt);
    } else {
      c->forward_env.emplace_back(name, x.substr(eq + 1));
    }
  }
  return Status::OK();
}

// Fills every flag the command line did not give from --config-file. -x entries from the file come
// first, so a command-line -x for the same name wins. `applied` gets the flags the file supplied.
Status ApplyConfigFile(CLI::App& app, RawFlags* raw, std::vector<std::string>* applied) {
  if (raw->config_file.empty()) return Status::OK();
  StatusOr<std::vector<ConfigFlag>> flags = LoadConfigFile(raw->config_file);
  if (!flags.ok()) return flags.status();
  const bool hosts_given = app.get_option("--hosts")->count() > 0 || app.get_option("--hostfile")->count() > 0;
  std::vector<std::string> env_x;
  for (const ConfigFlag& f : *flags) {
    if (f.flag == "-x") {
      env_x.push_back(f.value);
      continue;
    }
    if ((f.flag == "--hosts" || f.flag == "--hostfile") && hosts_given) continue;
    CLI::Option* opt = app.get_option(f.flag);
    if (opt->count() > 0) continue;
    applied->push_back(f.flag);
    try {
      if (opt->get_items_expected_min() > 1) {  // a two-value flag: "A B" (config_file.h)
        std::istringstream words(f.value);
        std::vector<std::string> values;
        for (std::string w; words >> w;) values.push_back(w);
        opt->add_result(values);
      } else {
        opt->add_result(f.value);
      }
      opt->run_callback();
    } catch (const CLI::ParseError& e) {
      return InvalidArgument("config file '" + raw->config_file + "': " + f.flag + ": " + e.what());
    }
  }
  env_x.insert(env_x.end(), raw->env_x.begin(), raw->env_x.end());
  raw->env_x = std::move(env_x);
  return Status::OK();
}

Status NormalizeArgs(const CLI::App& app, std::vector<std::string>* args) {
  for (size_t i = 0; i < args->size(); ++i) {
    std::string& a = (*args)[i];
    if (a == "--") return Status::OK();
    if (a == "-np") {
      a = "--num-proc";
    } else if (a.rfind("-np=", 0) == 0) {
      a = "--num-proc=" + a.substr(4);
      continue;
    }
    if (a.size() < 2 || a[0] != '-') return Status::OK();  // the command starts here
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) continue;
    const CLI::Option* opt = app.get_option_no_throw(a);
    if (opt == nullptr && a[1] != '-' && a.size() > 2) {  // "-Hhost:2": value attached
      opt = app.get_option_no_throw(a.substr(0, 2));
      if (opt != nullptr && opt->get_expected_max() > 0) continue;
      opt = nullptr;
    }
    if (opt == nullptr) {
      return InvalidArgument("unknown flag '" + a + "'; see dadtrun --help");
    }
    // Values the flag takes: 1, or 2 for --blacklist-cooldown-range MIN MAX.
    const size_t values =
        opt->get_expected_max() > 0 ? static_cast<size_t>(std::clamp(opt->get_expected_min(), 1, 2)) : 0;
    if (values > 0) {
      if (i + values >= args->size()) {
        return InvalidArgument("flag " + (a == "--num-proc" ? std::string("-np/--num-proc") : a) +
                               (values == 1 ? " needs a value" : " needs " + std::to_string(values) + " values"));
      }
      i += values;
    }
  }
  return Status::OK();
}

StatusOr<LaunchConfig> Convert(const RawFlags& raw, std::vector<std::string> command,
                               const std::string& local_hostname) {
  LaunchConfig c;
  c.verbose = raw.verbose;
  c.command = std::move(command);
  const bool elastic = ElasticRequested(raw.elastic);
  // An elastic job without -np starts from --min-np (Horovod's rule).
  const bool np_from_min = raw.num_proc.empty() && elastic && !raw.elastic.min_np.empty();
  if (raw.num_proc.empty() && !np_from_min) {
    return InvalidArgument(std::string("-np/--num-proc is required: the number of ranks to start, e.g. -np 2") +
                           (elastic ? " (or --min-np for an elastic job)" : ""));
  }
  const std::string np_flag = np_from_min ? "--min-np" : "-np/--num-proc";
  const std::string& np_text = np_from_min ? raw.elastic.min_np : raw.num_proc;
  int64_t np = 0;
  if (!ParseInt64(np_text, &np) || np < 1 || np > 1000000) {
    return BadValue(np_flag, "a positive integer", np_text);
  }
  c.num_proc = static_cast<int>(np);
  if (c.command.empty()) {
    return InvalidArgument("no command given; usage: dadtrun -np N command [args...]");
  }
  DADT_RETURN_IF_ERROR(ConvertHosts(raw, local_hostname, &c));
  if (!raw.fusion_mb.empty()) {
    double mb = 0;
    if (!ParseDouble(raw.fusion_mb, &mb) || mb < 0 || mb > 1e9) {
      return BadValue("--fusion-threshold-mb", "a number of megabytes >= 0", raw.fusion_mb);
    }
    c.fusion_threshold_bytes = static_cast<int64_t>(std::llround(mb * 1024.0 * 1024.0));
  }
  if (!raw.cycle_ms.empty()) {
    double ms = 0;
    if (!ParseDouble(raw.cycle_ms, &ms) || ms <= 0) {
      return BadValue("--cycle-time-ms", "a number of milliseconds > 0", raw.cycle_ms);
    }
    c.cycle_time_ms = ms;
  }
  if (!raw.cache_capacity.empty()) {
    int64_t n = 0;
    if (!ParseInt64(raw.cache_capacity, &n) || n < 0) {
      return BadValue("--cache-capacity", "an integer >= 0 (0 disables the cache)",
                      raw.cache_capacity);
    }
    c.cache_capacity = n;
  }
  if (!raw.start_timeout.empty()) {
    int64_t s = 0;
    if (!ParseInt64(raw.start_timeout, &s) || s < 1) {
      return BadValue("--start-timeout", "a whole number of seconds >= 1", raw.start_timeout);
    }
    c.start_timeout_seconds = s;
  } else if (env::IsSet(env::kStartTimeout)) {
    // As horovodrun reads HOROVOD_START_TIMEOUT: dadtrun's own wait and the ranks' agree.
    StatusOr<int64_t> s = env::GetInt(env::kStartTimeout, env::kDefaultStartTimeoutSeconds);
    if (!s.ok() || *s < 1) {
      return InvalidArgument(std::string(env::Source(env::kStartTimeout)) + "='" +
                             env::GetString(env::kStartTimeout) + "' is not a whole number of seconds >= 1");
    }
    c.start_timeout_seconds = *s;
  }
  if (!raw.log_level.empty()) {
    std::string level = raw.log_level;
    std::transform(level.begin(), level.end(), level.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    static const char* const kLevels[] = {"trace", "debug", "info", "warning", "error"};
    if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) {
      return BadValue("--log-level", "one of trace|debug|info|warning|error", raw.log_level);
    }
    c.log_level = level;
  }
  if (!raw.iface.empty()) c.network_interface = raw.iface;
  c.output_dir = raw.output_dir;
  if (raw.mark_cycles && raw.timeline.empty()) {
    return BadValue("--timeline-mark-cycles", "used together with --timeline-filename", "set alone");
  }
  if (!raw.timeline.empty()) c.timeline_filename = raw.timeline;
  // Autotune: each flag maps to one DADT_AUTOTUNE* variable.
  const bool any_autotune_option = !raw.autotune_log.empty() || !raw.autotune_warmup.empty() ||
                                   !raw.autotune_steps.empty() || !raw.autotune_samples.empty() ||
                                   !raw.autotune_noise.empty();
  if (any_autotune_option && !raw.autotune) {
    return BadValue("--autotune-*", "used together with --autotune", "given alone");
  }
  if (raw.autotune) {
    c.autotune_env.emplace_back(env::kAutotune, "1");
    if (!raw.autotune_log.empty()) c.autotune_env.emplace_back(env::kAutotuneLog, raw.autotune_log);
    struct IntFlag { const char* flag; const std::string* value; const char* var; int64_t min; };
    for (const IntFlag& f : {IntFlag{"--autotune-warmup-samples", &raw.autotune_warmup, env::kAutotuneWarmupSamples, 0},
                             IntFlag{"--autotune-steps-per-sample", &raw.autotune_steps, env::kAutotuneStepsPerSample, 1},
                             IntFlag{"--autotune-bayes-opt-max-samples", &raw.autotune_samples, env::kAutotuneMaxSamples, 1}}) {
      if (f.value->empty()) continue;
      int64_t v;
      if (!ParseInt64(*f.value, &v) || v < f.min) {
        return BadValue(f.flag, "an integer >= " + std::to_string(f.min), *f.value);
      }
      c.autotune_env.emplace_back(f.var, std::to_string(v));
    }
    if (!raw.autotune_noise.empty()) {
      double noise;
      if (!ParseDouble(raw.autotune_noise, &noise) || noise < 0) {
        return BadValue("--autotune-gaussian-process-noise", "a number >= 0", raw.autotune_noise);
      }
      c.autotune_env.emplace_back(env::kAutotuneNoise, raw.autotune_noise);
    }
  }
  c.timeline_mark_cycles = raw.mark_cycles;
  // Stall check: each flag maps to one DADT_STALL_* variable.
  if (raw.no_stall_check && (!raw.stall_warning_s.empty() || !raw.stall_shutdown_s.empty())) {
    return BadValue("--no-stall-check", "not combined with --stall-check-*-time-seconds", "both given");
  }
  if (raw.no_stall_check) c.stall_env.emplace_back(env::kStallCheckDisable, "1");
  for (const auto& [flag, value, var, min_exclusive] :
       {std::make_tuple("--stall-check-warning-time-seconds", &raw.stall_warning_s, env::kStallCheckTime, true),
        std::make_tuple("--stall-check-shutdown-time-seconds", &raw.stall_shutdown_s, env::kStallShutdownTime, false)}) {
    if (value->empty()) continue;
    double s;
    if (!ParseDouble(*value, &s) || s < 0 || (min_exclusive && s == 0)) {
      return BadValue(flag, min_exclusive ? "a number of seconds > 0" : "a number of seconds >= 0 (0 = off)", *value);
    }
    c.stall_env.emplace_back(var, *value);
  }
  // Liveness (heartbeats): each flag maps to one DADT_LIVENESS_* variable.
  double liveness = env::kDefaultLivenessTimeoutSeconds;
  double liveness_end = env::kDefaultLivenessShutdownTimeSeconds;
  for (const auto& [flag, value, var, out] :
       {std::make_tuple("--liveness-timeout-seconds", &raw.liveness_s, env::kLivenessTimeout, &liveness),
        std::make_tuple("--liveness-shutdown-time-seconds", &raw.liveness_shutdown_s,
                        env::kLivenessShutdownTime, &liveness_end)}) {
    if (value->empty()) continue;
    if (!ParseDouble(*value, out) || *out < 0) {
      return BadValue(flag, "a number of seconds >= 0", *value);
    }
    c.liveness_env.emplace_back(var, *value);
  }
  if (liveness > 0 && liveness_end < liveness) {
    return BadValue("--liveness-shutdown-time-seconds",
                    "at least the liveness timeout (--liveness-timeout-seconds, default 10)",
                    raw.liveness_shutdown_s.empty() ? "the default, 60" : raw.liveness_shutdown_s);
  }
  if (raw.mpi && raw.gloo) return InvalidArgument("--mpi and --gloo exclude each other; pick one");
  if (!raw.mpi_args.empty() && raw.gloo) {
    return InvalidArgument("--mpi-args is for launches through mpirun; it does not apply to --gloo");
  }
  c.controller = raw.mpi ? "mpi" : raw.gloo ? "gloo" : "auto";
  c.mpi_args = raw.mpi_args;
  c.hierarchical_allreduce = raw.hierarchical;
  DADT_RETURN_IF_ERROR(ConvertElasticFlags(raw.elastic, &c));
  return c;
}

}  // namespace

std::string UsageText() {
  return std::string("dadtrun ") + kVersion +
         " - start one process per rank of a dadt job\n"
         "\n"
         "usage: dadtrun [flags] command [args...]\n"
         "   e.g. dadtrun -np 4 python train.py --lr 0.1\n"
         "\n"
         "flags:\n"
         "  -np, --num-proc N          number of ranks to start (required, >= 1)\n"
         "  -H, --hosts H:N[,H:N...]   hosts and their slots; ranks fill hosts in order\n"
         "  --hostfile FILE            hosts from FILE, one 'HOST slots=N' or 'HOST:N' line each ('#' comments)\n"
         "  -p, --ssh-port PORT        ssh port of the remote hosts (default: ssh's own)\n"
         "  -i, --ssh-identity-file F  ssh private key for the remote hosts\n"
         "  -x NAME[=VALUE]            set NAME=VALUE for every rank, or forward NAME (repeatable)\n"
         "  --config-file FILE         YAML file of settings; flags override it (docs/running.md)\n"
         "  --gloo                     Gloo controller and data plane; dadtrun starts the ranks\n"
         "  --mpi                      hand the launch to mpirun: MPI controller and data plane\n"
         "                             (neither flag: MPI when built and mpirun is on PATH, else Gloo)\n"
         "  --mpi-args \"ARGS\"          extra arguments for mpirun, e.g. --mpi-args \"--mca btl self,vader\"\n"
         "  --hierarchical-allreduce   allreduce inside each host, then across hosts -> DADT_HIERARCHICAL_ALLREDUCE\n"
         "  --check-build              print the frameworks, controllers and tensor operations this build has\n"
         "  --fusion-threshold-mb MB   tensor fusion buffer size        -> DADT_FUSION_THRESHOLD (bytes)\n"
         "  --cycle-time-ms MS         negotiation cycle time           -> DADT_CYCLE_TIME\n"
         "  --cache-capacity N         response cache entries, 0 = off  -> DADT_CACHE_CAPACITY\n"
         "  --start-timeout SECONDS    time for ranks to meet (default 30) -> DADT_START_TIMEOUT\n"
         "  --network-interface IFACE  interface for rendezvous and rank traffic -> DADT_IFACE\n"
         "  --log-level LEVEL          trace|debug|info|warning|error   -> DADT_LOG_LEVEL\n"
         "  --output-filename DIR      also write DIR/rank.<N>/stdout and .../stderr (not via mpirun)\n"
         "  --timeline-filename FILE   rank 0 writes a Chrome-trace timeline -> DADT_TIMELINE\n"
         "  --timeline-mark-cycles     add CYCLE_START marks to it      -> DADT_TIMELINE_MARK_CYCLES\n"
         "  --autotune                 tune fusion threshold and cycle time while training -> DADT_AUTOTUNE\n"
         "  --autotune-log-file FILE   CSV, one row per sample          -> DADT_AUTOTUNE_LOG\n"
         "  --autotune-warmup-samples N, --autotune-steps-per-sample N, --autotune-bayes-opt-max-samples N,\n"
         "  --autotune-gaussian-process-noise X   (defaults 3, 10, 20, 0.8) -> DADT_AUTOTUNE_*\n"
         "  --stall-check-warning-time-seconds S   warn on every rank when some ranks submitted a tensor\n"
         "                             and others did not for S seconds (default 60) -> DADT_STALL_CHECK_TIME_SECONDS\n"
         "  --stall-check-shutdown-time-seconds S  end the job with an error after S seconds of such a\n"
         "                             stall (default 0: never)          -> DADT_STALL_SHUTDOWN_TIME_SECONDS\n"
         "  --no-stall-check           no stall warnings or shutdowns    -> DADT_STALL_CHECK_DISABLE\n"
         "  --liveness-timeout-seconds S  warn on every rank when a rank has sent no heartbeat for S\n"
         "                             seconds (default 10; 0: no heartbeats) -> DADT_LIVENESS_TIMEOUT_SECONDS\n"
         "  --liveness-shutdown-time-seconds S  end the job when a rank has been silent for S seconds\n"
         "                             (default 60)                      -> DADT_LIVENESS_SHUTDOWN_TIME_SECONDS\n"
         "elastic training (docs/elastic.md; Gloo only):\n"
         "  --min-np N                 fewest workers the job runs with (default: -np)\n"
         "  --max-np N                 most workers the job runs with (default: no limit)\n"
         "  --host-discovery-script F  run every second; prints the usable hosts, one 'host[:slots]' a line\n"
         "  --slots-per-host N         slots of a script line without ':slots' (default 1)\n"
         "  --elastic-timeout S        how long to wait for --min-np slots before giving up\n"
         "                             (default: DADT_ELASTIC_TIMEOUT, else 600)\n"
         "  --reset-limit N            end the job at the (N+1)-th change of its workers (default: none)\n"
         "  --blacklist-cooldown-range MIN MAX  a failed host rests MIN s, doubling up to MAX s, then\n"
         "                             is used again (default: a failed host is never used again)\n"
         "  --elastic-checkpoint PATH  rank 0 writes each commit() there; if every worker is replaced, the\n"
         "                             job resumes from it (a path every host sees) -> DADT_ELASTIC_CHECKPOINT\n"
         "  (--min-np with -H/--hostfile and no script: fault tolerance on that fixed host list;\n"
         "   with a script, -H/--hostfile is ignored, as horovodrun does)\n"
         "  --verbose                  print what dadtrun does (stderr, prefixed 'dadtrun:')\n"
         "  --version                  print the version and exit\n"
         "  -h, --help                 print this help and exit\n"
         "\n"
         "Each output line of rank N appears as [N]<stdout>:line or [N]<stderr>:line\n"
         "([1,N]<stdout>:line through mpirun).\n"
         "Unset tuning flags leave the variables as your environment has them; Horovod's names\n"
         "(HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, ...) work too, and the DADT_ name wins.\n";
}

StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                       const std::string& local_hostname) {
  RawFlags raw;
  CLI::App app("dadtrun", "dadtrun");
  app.set_help_flag();  // our own -h/--help, with our own text
  app.prefix_command();
  app.add_option("--num-proc", raw.num_proc);
  app.add_option("-H,--hosts", raw.hosts);
  app.add_option("--fusion-threshold-mb", raw.fusion_mb);
  app.add_option("--cycle-time-ms", raw.cycle_ms);
  app.add_option("--cache-capacity", raw.cache_capacity);
  app.add_option("--start-timeout", raw.start_timeout);
  app.add_option("--log-level", raw.log_level);
  app.add_option("--output-filename", raw.output_dir);
  app.add_option("--network-interface", raw.iface);
  app.add_option("--timeline-filename", raw.timeline);
  app.add_flag("--timeline-mark-cycles", raw.mark_cycles);
  app.add_flag("--autotune", raw.autotune);
  app.add_option("--autotune-log-file", raw.autotune_log);
  app.add_option("--autotune-warmup-samples", raw.autotune_warmup);
  app.add_option("--autotune-steps-per-sample", raw.autotune_steps);
  app.add_option("--autotune-bayes-opt-max-samples", raw.autotune_samples);
  app.add_option("--autotune-gaussian-process-noise", raw.autotune_noise);
  app.add_option("--hostfile", raw.hostfile);
  app.add_option("-p,--ssh-port", raw.ssh_port);
  app.add_option("-i,--ssh-identity-file", raw.ssh_identity);
  app.add_option("-x", raw.env_x)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--config-file", raw.config_file);
  app.add_flag("--no-stall-check", raw.no_stall_check);
  app.add_option("--stall-check-warning-time-seconds", raw.stall_warning_s);
  app.add_option("--stall-check-shutdown-time-seconds", raw.stall_shutdown_s);
  app.add_option("--liveness-timeout-seconds", raw.liveness_s);
  app.add_option("--liveness-shutdown-time-seconds", raw.liveness_shutdown_s);
  app.add_flag("--gloo", raw.gloo);
  app.add_flag("--mpi", raw.mpi);
  app.add_option("--mpi-args", raw.mpi_args);
  app.add_flag("--check-build", raw.check_build);
  app.add_flag("--hierarchical-allreduce", raw.hierarchical);
  AddElasticFlags(&app, &raw.elastic);
  app.add_flag("--verbose", raw.verbose);
  app.add_flag("-h,--help", raw.help);
  app.add_flag("--version", raw.version);

  std::vector<std::string> normalized = args;
  DADT_RETURN_IF_ERROR(NormalizeArgs(app, &normalized));
  std::vector<std::string> reversed(normalized.rbegin(), normalized.rend());  // CLI11's order
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return InvalidArgument(what + "; see dadtrun --help");
  }

  CommandLine result;
  if (raw.help) {
    result.action = CommandLine::Action::kHelp;
    result.text = UsageText();
    return result;
  }
  if (raw.version) {
    result.action = CommandLine::Action::kVersion;
    result.text = std::string("dadtrun ") + kVersion + "\n";
    return result;
  }
  if (raw.check_build) {
    result.action = CommandLine::Action::kCheckBuild;
    return result;
  }
  std::vector<std::string> from_config;
  DADT_RETURN_IF_ERROR(ApplyConfigFile(app, &raw, &from_config));
  std::vector<std::string> command = app.remaining();
  const bool separated = !command.empty() && command[0] == "--";  // "--": the rest is the command
  if (separated) command.erase(command.begin());
  if (!separated && !command.empty() && command[0].size() > 1 && command[0][0] == '-') {
    return InvalidArgument("unknown flag '" + command[0] + "'; see dadtrun --help");
  }
  StatusOr<LaunchConfig> config = Convert(raw, std::move(command), local_hostname);
  if (!config.ok()) {
    // A bad value that came from the config file: say so, or the user looks for a flag they never typed.
    for (const std::string& flag : from_config) {
      if (config.status().message().find(flag + " ") != std::string::npos) {
        return InvalidArgument(config.status().message() + " (from config file '" + raw.config_file + "')");
      }
    }
    return config.status();
  }
  result.config = std::move(*config);
  return result;
}

}  // namespace dadtrun
}  // namespace dadt#include "runtime/common/env.h"

