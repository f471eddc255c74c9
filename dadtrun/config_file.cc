#include "dadtrun/config_file.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dadt {
namespace dadtrun {
namespace {

enum class Kind { kScalar, kBool, kPair };  // kPair: [A, B] or 'A B', as "A B"

struct Entry {
  const char* key;  // "section.key" or "key"
  const char* flag;
  Kind kind;
};

// Every key the file may hold, and the flag it stands for. "hosts" and "env" are handled apart.
constexpr Entry kEntries[] = {
    {"num_proc", "--num-proc", Kind::kScalar},
    {"hostfile", "--hostfile", Kind::kScalar},
    {"ssh.port", "--ssh-port", Kind::kScalar},
    {"ssh.identity_file", "--ssh-identity-file", Kind::kScalar},
    {"network_interface", "--network-interface", Kind::kScalar},
    {"start_timeout", "--start-timeout", Kind::kScalar},
    {"output_filename", "--output-filename", Kind::kScalar},
    {"tuning.fusion_threshold_mb", "--fusion-threshold-mb", Kind::kScalar},
    {"tuning.cycle_time_ms", "--cycle-time-ms", Kind::kScalar},
    {"tuning.cache_capacity", "--cache-capacity", Kind::kScalar},
    {"logging.log_level", "--log-level", Kind::kScalar},
    {"logging.verbose", "--verbose", Kind::kBool},
    {"timeline.filename", "--timeline-filename", Kind::kScalar},
    {"timeline.mark_cycles", "--timeline-mark-cycles", Kind::kBool},
    {"autotune.enabled", "--autotune", Kind::kBool},
    {"autotune.log_file", "--autotune-log-file", Kind::kScalar},
    {"autotune.warmup_samples", "--autotune-warmup-samples", Kind::kScalar},
    {"autotune.steps_per_sample", "--autotune-steps-per-sample", Kind::kScalar},
    {"autotune.bayes_opt_max_samples", "--autotune-bayes-opt-max-samples", Kind::kScalar},
    {"autotune.gaussian_process_noise", "--autotune-gaussian-process-noise", Kind::kScalar},
    {"elastic.min_np", "--min-np", Kind::kScalar},
    {"elastic.max_np", "--max-np", Kind::kScalar},
    {"elastic.host_discovery_script", "--host-discovery-script", Kind::kScalar},
    {"elastic.slots_per_host", "--slots-per-host", Kind::kScalar},
    {"elastic.timeout", "--elastic-timeout", Kind::kScalar},
    {"elastic.reset_limit", "--reset-limit", Kind::kScalar},
    {"elastic.blacklist_cooldown_range", "--blacklist-cooldown-range", Kind::kPair},
    {"elastic.checkpoint", "--elastic-checkpoint", Kind::kScalar},
};

const Entry* FindEntry(const std::string& key) {
  for (const Entry& e : kEntries) {
    if (key == e.key) return &e;
  }
  return nullptr;
}

bool IsSection(const std::string& name) {
  for (const Entry& e : kEntries) {
    const std::string key = e.key;
    if (key.rfind(name + ".", 0) == 0) return true;
  }
  return false;
}

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status Read(const YAML::Node& root, std::vector<ConfigFlag>* out) {
    if (root.IsNull()) return Status::OK();  // an empty file
    if (!root.IsMap()) return Error("", "the top level must be a mapping of keys to values");
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "hosts") {
        DADT_RETURN_IF_ERROR(ReadHosts(kv.second, out));
      } else if (key == "env") {
        DADT_RETURN_IF_ERROR(ReadEnv(kv.second, out));
      } else if (IsSection(key)) {
        if (!kv.second.IsMap()) return Error(key, "must be a mapping, e.g. " + key + ": {key: value}");
        for (const auto& inner : kv.second) {
          DADT_RETURN_IF_ERROR(ReadValue(key + "." + inner.first.as<std::string>(), inner.second, out));
        }
      } else {
        DADT_RETURN_IF_ERROR(ReadValue(key, kv.second, out));
      }
    }
    return Status::OK();
  }

 private:
  Status Error(const std::string& key, const std::string& what) const {
    return InvalidArgument("config file " + source_ + (key.empty() ? "" : ": '" + key + "'") + " " +
                           what);
  }

  Status ReadValue(const std::string& key, const YAML::Node& node, std::vector<ConfigFlag>* out) {
    const Entry* e = FindEntry(key);
    if (e == nullptr) return Error(key, "is not a known setting; see docs/running.md for the list");
    if (e->kind == Kind::kPair) return ReadPair(key, *e, node, out);
    if (!node.IsScalar()) return Error(key, "must be a single value");
    const std::string value = node.Scalar();
    if (e->kind == Kind::kBool) {
      bool b = false;
      if (!YAML::convert<bool>::decode(node, b)) return Error(key, "must be true or false, got '" + value + "'");
      if (b) out->push_back({e->flag, "true"});
      return Status::OK();
    }
    out->push_back({e->flag, value});
    return Status::OK();
  }

  // Two values, as a list [A, B] or a string "A B"; the flag gets them as "A B".
  Status ReadPair(const std::string& key, const Entry& e, const YAML::Node& node, std::vector<ConfigFlag>* out) {
    std::vector<std::string> values;
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) {
        if (!item.IsScalar()) return Error(key, "must be two values, e.g. [10, 300]");
        values.push_back(item.Scalar());
      }
    } else if (node.IsScalar()) {
      std::istringstream words(node.Scalar());
      for (std::string w; words >> w;) values.push_back(w);
    }
    if (values.size() != 2) return Error(key, "must be two values, e.g. [10, 300]");
    out->push_back({e.flag, values[0] + " " + values[1]});
    return Status::OK();
  }

  Status ReadHosts(const YAML::Node& node, std::vector<ConfigFlag>* out) {
    if (node.IsScalar()) {
      out->push_back({"--hosts", node.Scalar()});
      return Status::OK();
    }
    if (!node.IsSequence()) return Error("hosts", "must be 'h1:2,h2:2' or a list of hosts");
    std::string spec;
    for (const YAML::Node& item : node) {
      std::string entry;
      if (item.IsScalar()) {
        entry = item.Scalar();
      } else if (item.IsMap() && item["host"] && item["host"].IsScalar()) {
        entry = item["host"].Scalar();
        if (item["slots"]) entry += ":" + item["slots"].as<std::string>();
        for (const auto& kv : item) {
          const std::string k = kv.first.as<std::string>();
          if (k != "host" && k != "slots") return Error("hosts", "entries take only 'host' and 'slots', not '" + k + "'");
        }
      } else {
        return Error("hosts", "entries must be 'host:slots' or {host: NAME, slots: N}");
      }
      spec += (spec.empty() ? "" : ",") + entry;
    }
    out->push_back({"--hosts", spec});
    return Status::OK();
  }

  Status ReadEnv(const YAML::Node& node, std::vector<ConfigFlag>* out) {
    if (!node.IsMap()) return Error("env", "must be a mapping of NAME: value (null forwards NAME)");
    for (const auto& kv : node) {
      const std::string name = kv.first.as<std::string>();
      if (kv.second.IsNull()) {
        out->push_back({"-x", name});
      } else if (kv.second.IsScalar()) {
        out->push_back({"-x", name + "=" + kv.second.Scalar()});
      } else {
        return Error("env." + name, "must be a single value or null");
      }
    }
    return Status::OK();
  }

  const std::string source_;
};

}  // namespace

StatusOr<std::vector<ConfigFlag>> ParseConfigText(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("config file " + source + " is not valid YAML: line " +
                           std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  std::vector<ConfigFlag> flags;
  try {
    DADT_RETURN_IF_ERROR(Reader(source).Read(root, &flags));
  } catch (const YAML::Exception& e) {
    return InvalidArgument("config file " + source + ": line " + std::to_string(e.mark.line + 1) +
                           ": " + e.msg);
  }
  return flags;
}

StatusOr<std::vector<ConfigFlag>> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read config file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfigText(text.str(), "'" + path + "'");
}

}  // namespace dadtrun
}  // namespace dadt
