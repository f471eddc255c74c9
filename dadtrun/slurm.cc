#include "dadtrun/slurm.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "runtime/common/env.h"

namespace dadt {
namespace dadtrun {
namespace {

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A non-negative decimal that fits an int, or -1.
int ToInt(const std::string& s) {
  if (!AllDigits(s) || s.size() > 9) return -1;
  return static_cast<int>(std::strtol(s.c_str(), nullptr, 10));
}

std::string Pad(int64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Splits at commas outside brackets; false on an unbalanced bracket.
bool SplitTopLevel(const std::string& text, std::vector<std::string>* parts) {
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '[') {
      if (++depth > 1) return false;
    } else if (c == ']') {
      if (--depth < 0) return false;
    }
    if (c == ',' && depth == 0) {
      parts->push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (depth != 0) return false;
  parts->push_back(cur);
  return true;
}

// The numbers of one bracket group ("01-04,07"), zero-padded as written; "" on error.
bool ExpandGroup(const std::string& group, std::vector<std::string>* out, std::string* why) {
  size_t start = 0;
  while (start <= group.size()) {
    size_t end = group.find(',', start);
    if (end == std::string::npos) end = group.size();
    const std::string item = group.substr(start, end - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi) || lo.size() > 18 || hi.size() > 18) {
      *why = "'" + item + "' is not a number or a range like 01-04";
      return false;
    }
    const int64_t a = std::strtoll(lo.c_str(), nullptr, 10);
    const int64_t b = std::strtoll(hi.c_str(), nullptr, 10);
    if (b < a) {
      *why = "range '" + item + "' runs backwards";
      return false;
    }
    if (b - a >= 1000000) {
      *why = "range '" + item + "' has more than a million hosts";
      return false;
    }
    for (int64_t v = a; v <= b; ++v) out->push_back(Pad(v, lo.size()));
    start = end + 1;
  }
  return true;
}

// One entry ("rack[1-2]-n[1-3]"): every name it stands for, rightmost group fastest.
bool ExpandEntry(const std::string& entry, std::vector<std::string>* out, std::string* why) {
  const size_t open = entry.find('[');
  if (open == std::string::npos) {
    if (entry.find(']') != std::string::npos) {
      *why = "unbalanced ']'";
      return false;
    }
    out->push_back(entry);
    return true;
  }
  const size_t close = entry.find(']', open);
  if (close == std::string::npos) {
    *why = "unbalanced '['";
    return false;
  }
  std::vector<std::string> numbers;
  if (close == open + 1) {
    *why = "empty brackets in '" + entry + "'";
    return false;
  }
  if (!ExpandGroup(entry.substr(open + 1, close - open - 1), &numbers, why)) return false;
  std::vector<std::string> rests;
  if (!ExpandEntry(entry.substr(close + 1), &rests, why)) return false;
  const std::string prefix = entry.substr(0, open);
  for (const std::string& n : numbers) {
    for (const std::string& r : rests) out->push_back(prefix + n + r);
  }
  return true;
}

const std::string* Find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// The first of `names` that is set.
const std::string* FindFirst(const EnvMap& env, std::initializer_list<const char*> names,
                             const char** which) {
  for (const char* n : names) {
    if (const std::string* v = Find(env, n)) {
      *which = n;
      return v;
    }
  }
  return nullptr;
}

Status BadVar(const char* name, const std::string& value, const std::string& why) {
  return InvalidArgument(std::string(name) + "='" + value + "' (set by Slurm): " + why);
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandNodeList(const std::string& list) {
  std::vector<std::string> entries;
  if (!SplitTopLevel(list, &entries)) {
    return InvalidArgument("node list '" + list + "' has unbalanced or nested brackets");
  }
  std::vector<std::string> hosts;
  for (const std::string& e : entries) {
    std::string why;
    if (e.empty()) return InvalidArgument("node list '" + list + "' has an empty entry");
    if (!ExpandEntry(e, &hosts, &why)) {
      return InvalidArgument("node list '" + list + "': " + why);
    }
  }
  return hosts;
}

StatusOr<std::vector<int>> ExpandTasksPerNode(const std::string& spec) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(start, end - start);
    const size_t paren = item.find("(x");
    const int count = ToInt(item.substr(0, paren));
    int times = 1;
    if (paren != std::string::npos) {
      times = item.back() == ')' ? ToInt(item.substr(paren + 2, item.size() - paren - 3)) : -1;
    }
    if (count < 1 || times < 1) {
      return InvalidArgument("tasks per node '" + spec + "': '" + item +
                             "' is not N or N(xM) with positive N and M");
    }
    out.insert(out.end(), static_cast<size_t>(times), count);
    start = end + 1;
  }
  return out;
}

bool InSlurmAllocation(const EnvMap& env) { return Find(env, "SLURM_JOB_ID") != nullptr; }

StatusOr<std::vector<HostSlots>> AllocationHosts(const EnvMap& env) {
  const char* list_name = nullptr;
  const std::string* list = FindFirst(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &list_name);
  if (list == nullptr) {
    return InvalidArgument("inside a Slurm allocation (SLURM_JOB_ID is set) but SLURM_JOB_NODELIST "
                           "is not; give the hosts with -H or --hostfile");
  }
  StatusOr<std::vector<std::string>> nodes = ExpandNodeList(*list);
  if (!nodes.ok()) return BadVar(list_name, *list, nodes.status().message());
  const char* slots_name = nullptr;
  const std::string* slots =
      FindFirst(env, {"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"}, &slots_name);
  if (slots == nullptr) {
    return InvalidArgument("inside a Slurm allocation but neither SLURM_TASKS_PER_NODE nor "
                           "SLURM_JOB_CPUS_PER_NODE is set; give the hosts with -H or --hostfile");
  }
  StatusOr<std::vector<int>> counts = ExpandTasksPerNode(*slots);
  if (!counts.ok()) return BadVar(slots_name, *slots, counts.status().message());
  if (counts->size() != nodes->size()) {
    return BadVar(slots_name, *slots,
                  "gives " + std::to_string(counts->size()) + " nodes, but " + list_name + "='" +
                      *list + "' has " + std::to_string(nodes->size()));
  }
  std::vector<HostSlots> hosts;
  for (size_t i = 0; i < nodes->size(); ++i) hosts.push_back({(*nodes)[i], (*counts)[i]});
  return hosts;
}

StatusOr<std::optional<SlurmTask>> StepTask(const EnvMap& env) {
  const std::string* step_id = Find(env, "SLURM_STEP_ID");
  const std::string* procid = Find(env, "SLURM_PROCID");
  if (step_id == nullptr || procid == nullptr) return std::optional<SlurmTask>();
  SlurmTask t;
  const char* size_name = nullptr;
  const std::string* size = FindFirst(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &size_name);
  struct Field {
    const char* name;
    const std::string* value;
    int* out;
  };
  const Field fields[] = {{"SLURM_PROCID", procid, &t.rank},
                          {size_name ? size_name : "SLURM_STEP_NUM_TASKS", size, &t.size},
                          {"SLURM_LOCALID", Find(env, "SLURM_LOCALID"), &t.local_rank},
                          {"SLURM_NODEID", Find(env, "SLURM_NODEID"), &t.node_index}};
  for (const Field& f : fields) {
    if (f.value == nullptr) {
      return InvalidArgument(std::string("this is a task of Slurm step ") + *step_id + " but " +
                             f.name + " is not set");
    }
    *f.out = ToInt(*f.value);
    if (*f.out < 0) return BadVar(f.name, *f.value, "not a non-negative integer");
  }
  if (t.size < 1 || t.rank >= t.size) {
    return BadVar("SLURM_PROCID", *procid, "not below the step's " + std::to_string(t.size) +
                                               " tasks");
  }
  const char* list_name = nullptr;
  const std::string* list = FindFirst(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST"}, &list_name);
  const char* tpn_name = nullptr;
  const std::string* tpn =
      FindFirst(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tpn_name);
  if (list == nullptr || tpn == nullptr) {
    return InvalidArgument(std::string("this is a task of Slurm step ") + *step_id + " but " +
                           (list ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_STEP_NODELIST") +
                           " is not set");
  }
  StatusOr<std::vector<std::string>> nodes = ExpandNodeList(*list);
  if (!nodes.ok()) return BadVar(list_name, *list, nodes.status().message());
  StatusOr<std::vector<int>> counts = ExpandTasksPerNode(*tpn);
  if (!counts.ok()) return BadVar(tpn_name, *tpn, counts.status().message());
  if (counts->size() != nodes->size() || t.node_index >= static_cast<int>(nodes->size())) {
    return BadVar(tpn_name, *tpn, "does not match " + std::string(list_name) + "='" + *list +
                                      "' and SLURM_NODEID=" + std::to_string(t.node_index));
  }
  t.num_nodes = static_cast<int>(nodes->size());
  t.local_size = (*counts)[t.node_index];
  if (t.local_rank >= t.local_size) {
    return BadVar("SLURM_LOCALID", std::to_string(t.local_rank),
                  "not below this node's " + std::to_string(t.local_size) + " tasks");
  }
  t.cross_rank = 0;
  t.cross_size = 0;
  for (int n = 0; n < t.num_nodes; ++n) {
    if ((*counts)[n] > t.local_rank) {
      if (n < t.node_index) ++t.cross_rank;
      ++t.cross_size;
    }
  }
  t.node = (*nodes)[t.node_index];
  t.rank0_node = nodes->front();  // task 0 runs on the step's first node, whatever the distribution
  const std::string* job = Find(env, "SLURM_JOB_ID");
  t.step = (job ? *job : std::string("?")) + "." + *step_id;
  return std::optional<SlurmTask>(t);
}

EnvMap SlurmRankEnvironment(const SlurmTask& t) {
  EnvMap env;
  env[env::kRank] = env[env::kTorchRank] = env[kTorchRoleRank] = std::to_string(t.rank);
  env[env::kSize] = env[env::kTorchWorldSize] = env[kTorchRoleWorldSize] = std::to_string(t.size);
  env[env::kLocalRank] = env[env::kTorchLocalRank] = std::to_string(t.local_rank);
  env[env::kLocalSize] = env[env::kTorchLocalWorldSize] = std::to_string(t.local_size);
  env[env::kCrossRank] = std::to_string(t.cross_rank);
  env[env::kCrossSize] = std::to_string(t.cross_size);
  env[kTorchGroupRank] = std::to_string(t.node_index);
  env[kTorchGroupWorldSize] = std::to_string(t.num_nodes);
  env[env::kHostname] = t.node;
  return env;
}

StatusOr<int> DirectLaunchPort(const EnvMap& env, const SlurmTask& task) {
  if (const std::string* port = Find(env, env::kRendezvousPort)) {
    const int p = ToInt(*port);
    if (p < 1 || p > 65535) {
      return InvalidArgument(std::string(env::kRendezvousPort) + "='" + *port +
                             "' is not a TCP port 1-65535");
    }
    return p;
  }
  const size_t dot = task.step.find('.');
  const int job = ToInt(task.step.substr(0, dot));
  const int step = ToInt(task.step.substr(dot + 1));
  if (job < 0 || step < 0) {
    return InvalidArgument("cannot derive a rendezvous port from Slurm step '" + task.step +
                           "'; set " + env::kRendezvousPort);
  }
  return 20000 + static_cast<int>((static_cast<int64_t>(job) * 97 + step) % 20000);
}

}  // namespace dadtrun
}  // namespace dadt
